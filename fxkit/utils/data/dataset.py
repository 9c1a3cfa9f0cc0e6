"""Datasets: map-style (`Dataset`, indexed by key, with a length) and
iterable-style (`IterableDataset`, a stream), as in ``torch.utils.data``, plus
`TensorDataset` over tensors that share their first dimension.

Example:
    >>> class Squares(Dataset):
    ...     def __getitem__(self, i):
    ...         return fxkit.tensor([float(i)]), i * i
    ...     def __len__(self):
    ...         return 10
"""
from fxkit.errors import ShapeError
from fxkit.runtime.tensor import Tensor


class Dataset:
    """A map-style dataset: subclasses define ``__getitem__(key)`` and ``__len__()``.

    `DataLoader` reads it by integer index ``0 .. len - 1`` (shuffled or not) and
    batches the samples; any other key type is the subclass's own business.
    """


class IterableDataset(Dataset):
    """An iterable-style dataset: subclasses define ``__iter__()``, yielding samples.

    For streams (files, sockets, generators) that cannot be indexed; `DataLoader`
    batches them in the order they come, so ``shuffle`` does not apply.

    Example:
        >>> class Lines(IterableDataset):
        ...     def __init__(self, path):
        ...         self.path = path
        ...     def __iter__(self):
        ...         with open(self.path) as f:
        ...             yield from (line.rstrip("\\n") for line in f)
    """


class TensorDataset(Dataset):
    """Samples ``(t0[i], t1[i], ...)`` from tensors sharing their first dimension.

    Args:
        *tensors: fxkit Tensors with equal ``shape[0]``.

    Raises:
        TypeError: an argument is not a Tensor.
        ShapeError: the tensors' first dimensions differ.

    Example:
        >>> ds = TensorDataset(fxkit.randn(100, 8), fxkit.arange(100))
        >>> x, y = ds[3]
    """

    def __init__(self, *tensors):
        if not tensors:
            raise TypeError("TensorDataset needs at least one tensor")
        for i, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                raise TypeError(f"TensorDataset: argument {i} is a {type(t).__name__}, not an fxkit Tensor; "
                                f"wrap numpy arrays with fxkit.from_numpy")
            if t.ndim == 0:
                raise ShapeError(f"TensorDataset: argument {i} is a 0-d tensor; samples are taken along dim 0")
        sizes = [t.shape[0] for t in tensors]
        if any(s != sizes[0] for s in sizes):
            raise ShapeError(f"TensorDataset: size mismatch between tensors: first dimensions {sizes}; "
                             f"every tensor needs one row per sample")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]
