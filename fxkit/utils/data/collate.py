"""`default_collate` and `default_convert`: how `DataLoader` turns samples into
batches, with ``torch.utils.data.default_collate``'s rules.

A batch keeps the structure of one sample, with a leading batch dimension
added to every leaf: tensors and numpy arrays are stacked, Python floats
become a float64 tensor, ints an int64 tensor, bools a bool tensor, strings
stay a list; tuples, lists, named tuples and dicts are collated field by field.

Example:
    >>> default_collate([(fxkit.ones(3), 0), (fxkit.zeros(3), 1)])
    [tensor([[1., 1., 1.], [0., 0., 0.]]), tensor([0, 1])]
"""
import collections.abc
import copy

import numpy as np

from fxkit.errors import ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.ops.factories import from_numpy, tensor
from fxkit.runtime.ops.rearrange import stack
from fxkit.runtime.tensor import Tensor


def default_collate(batch):
    """Merge a list of samples into one batch (see the module docstring for the rules).

    Args:
        batch: a non-empty list of samples of the same structure.

    Raises:
        ShapeError: tensors or arrays at the same place have different shapes, or
            sequences at the same place have different lengths.
        TypeError: a sample holds a type with no collation rule.
    """
    elem = batch[0]
    if isinstance(elem, Tensor):
        _check_shapes(batch, "tensors")
        return stack(batch)
    if isinstance(elem, np.ndarray):
        if elem.dtype.kind in "SUO":
            raise TypeError(f"default_collate: numpy arrays of {elem.dtype} cannot become tensors; "
                            f"convert them to numbers or pass a collate_fn")
        _check_shapes(batch, "numpy arrays")
        return from_numpy(np.stack(batch))
    if isinstance(elem, np.generic):
        return from_numpy(np.array(batch))
    if isinstance(elem, float):
        return tensor(batch, dtype=_dt.float64)
    if isinstance(elem, int):
        return tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return _rebuild_mapping(elem, {key: default_collate([d[key] for d in batch]) for key in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(list(samples)) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        sizes = {len(sample) for sample in batch}
        if len(sizes) > 1:
            raise ShapeError(f"default_collate: each element in the batch should be of equal size, got "
                             f"sequences of lengths {sorted(sizes)}; pad them or pass a collate_fn")
        columns = [default_collate(list(samples)) for samples in zip(*batch)]
        # PyTorch returns tuples as lists ("for backwards compatibility"); unpacking works alike.
        if isinstance(elem, tuple):
            return columns
        return _rebuild_sequence(elem, columns)
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
                    f"found {type(elem).__name__}; pass DataLoader(collate_fn=...) for other types")


def default_convert(data):
    """Turn numpy arrays and scalars in one sample into tensors, keeping the structure
    (what `DataLoader` does with each sample when ``batch_size=None``)."""
    if isinstance(data, np.ndarray) and data.dtype.kind not in "SUO":
        return from_numpy(data)
    if isinstance(data, np.generic) and not isinstance(data, (np.str_, np.bytes_)):
        return from_numpy(np.asarray(data))
    if isinstance(data, collections.abc.Mapping):
        return _rebuild_mapping(data, {key: default_convert(value) for key, value in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return _rebuild_sequence(data, [default_convert(d) for d in data])
    return data


def _check_shapes(batch, what):
    shapes = {tuple(b.shape) for b in batch}
    if len(shapes) > 1:
        raise ShapeError(f"default_collate: {what} in a batch must have the same shape to be stacked, got "
                         f"shapes {sorted(shapes)}; resize or pad the samples, or pass a collate_fn")


def _rebuild_mapping(elem, values):
    """``values`` in the mapping type of ``elem`` where it can be built, else a dict."""
    if isinstance(elem, collections.abc.MutableMapping):
        clone = copy.copy(elem)
        clone.update(values)
        return clone
    try:
        return type(elem)(values)
    except TypeError:
        return values


def _rebuild_sequence(elem, values):
    """``values`` in the sequence type of ``elem`` where it can be built, else a list."""
    try:
        return type(elem)(values)
    except TypeError:
        return values
