"""Ordering ops: ``sort``, ``argsort`` and ``topk``, with PyTorch's signatures and results.

NaN sorts as the largest value (last ascending, first descending), as in
PyTorch. Every sort here is stable, which PyTorch promises only with
``stable=True``: equal elements keep their order, so indices are reproducible.
A descending sort is the stable ascending sort of the reversed dimension, read
backwards: equal elements then still come in their original order, and no
negation is needed (which would wrap unsigned and bool tensors).
``sort`` and ``topk`` return a ``(values, indices)`` named tuple, indices int64;
``topk(sorted=False)`` returns its k values sorted too (PyTorch leaves that
order unspecified).
"""
from collections import namedtuple

import numpy as np

from fxkit.errors import DTypeError, IndexOutOfRangeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.dims import int_arg, single_dim
from fxkit.runtime.ops.low_precision import BFLOAT16_KIND

# ``torch.return_types.sort`` / ``topk``: ``values, indices = x.sort()``.
SortResult = namedtuple("sort", ("values", "indices"))
TopkResult = namedtuple("topk", ("values", "indices"))
# NOTE: the ops ``sort``/``topk`` own those module-level names; pickle finds the classes by these.
SortResult.__qualname__, TopkResult.__qualname__ = "SortResult", "TopkResult"
# topk sorts only its k picks (after a partition) when k is at most this fraction of the dim.
_PARTIAL = 4


def _check_flag(name, what, value):
    if not isinstance(value, (bool, np.bool_)):
        raise DTypeError(f"{name}: {what} must be a bool, got {type(value).__name__} {value!r}")


def _order(xp, a, axis, descending):
    """The int64 indices that sort ``a`` along ``axis`` stably (ascending, or descending)."""
    if a.dtype.kind == BFLOAT16_KIND:  # ml_dtypes' bfloat16 sorts NaN anywhere: order the exact float32 copy
        a = a.astype(np.float32)
    if not descending:
        return xp.argsort(a, axis=axis, kind="stable").astype(np.int64, copy=False)
    n = a.shape[axis]
    backwards = xp.argsort(xp.flip(a, axis), axis=axis, kind="stable")
    return (n - 1 - xp.flip(backwards, axis)).astype(np.int64, copy=False)


def _sorted(xp, name, a, dim, descending):
    axis = single_dim(dim, a.ndim, name)
    _check_flag(name, "descending", descending)
    if a.ndim == 0:
        return a.copy(), xp.zeros((), np.int64)
    indices = _order(xp, a, axis, descending)
    return xp.take_along_axis(a, indices, axis), indices


def _sort_rule(input, dim=-1, descending=False, *, stable=False):  # noqa: A002
    single_dim(dim, len(input.shape), "sort")
    return SortResult(TensorMeta(input.shape, input.dtype, input.device),
                      TensorMeta(input.shape, _dt.int64, input.device))


@op("sort", kind="other", shape_rule=_sort_rule)
def sort(xp, input, dim=-1, descending=False, *, stable=False):  # noqa: A002
    """``(values, indices)``: ``input`` sorted along ``dim``, and where each value came from.

    Example:
        >>> fxkit.tensor([3.0, 1.0, 2.0]).sort(descending=True)
        sort(values=tensor([3., 2., 1.]), indices=tensor([0, 2, 1]))
    """
    _check_flag("sort", "stable", stable)
    return SortResult(*_sorted(xp, "sort", input, dim, descending))


def _argsort_rule(input, dim=-1, descending=False, *, stable=False):  # noqa: A002
    single_dim(dim, len(input.shape), "argsort")
    return TensorMeta(input.shape, _dt.int64, input.device)


@op("argsort", kind="other", shape_rule=_argsort_rule)
def argsort(xp, input, dim=-1, descending=False, *, stable=False):  # noqa: A002
    """The int64 indices that sort ``input`` along ``dim`` (``sort(...).indices``).

    Example:
        >>> fxkit.tensor([3.0, 1.0, 2.0]).argsort()
        tensor([1, 2, 0])
    """
    _check_flag("argsort", "stable", stable)
    return _sorted(xp, "argsort", input, dim, descending)[1]


def _topk_shape(shape, k, dim, largest, sorted):  # noqa: A002
    axis = single_dim(dim, len(shape), "topk")
    k = int_arg(k, "topk", "k")
    _check_flag("topk", "largest", largest)
    _check_flag("topk", "sorted", sorted)
    size = shape[axis] if shape else 1
    if k < 0 or (isinstance(size, int) and k > size):
        raise IndexOutOfRangeError(f"topk: k={k} is out of range for dimension {dim} of size {size} "
                                   f"(input shape {list(shape)}); k must be in [0, {size}]")
    return axis, k, tuple(shape[:axis]) + (k,) + tuple(shape[axis + 1:]) if shape else ()


def _topk_rule(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    _, _, shape = _topk_shape(input.shape, k, dim, largest, sorted)
    return TopkResult(TensorMeta(shape, input.dtype, input.device), TensorMeta(shape, _dt.int64, input.device))


@op("topk", kind="other", shape_rule=_topk_rule)
def topk(xp, input, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    """``(values, indices)`` of the ``k`` largest (``largest=False``: smallest) elements along ``dim``,
    largest first (smallest first); ties keep their original order.

    Example:
        >>> fxkit.tensor([1.0, 5.0, 3.0, 4.0]).topk(2)
        topk(values=tensor([5., 4.]), indices=tensor([1, 3]))
    """
    axis, k, _ = _topk_shape(input.shape, k, dim, largest, sorted)
    if input.dtype.kind == "b":
        raise DTypeError("topk: bool inputs are not supported (as in PyTorch); cast with .int() first")
    if input.ndim == 0:
        return TopkResult(input.copy(), xp.zeros((), np.int64))
    n = input.shape[axis]
    if 0 < k and k * _PARTIAL <= n:
        indices = _top_indices(xp, input, k, axis, largest)
    else:
        indices = _order(xp, input, axis, largest)
        indices = indices[(slice(None),) * axis + (slice(0, k),)]
    return TopkResult(xp.take_along_axis(input, indices, axis), indices)


def _top_indices(xp, a, k, axis, largest):
    """`topk`'s indices without sorting everything: a partition finds the k-th value, the
    elements beyond it and the first of the ties at it (lowest index first) are picked,
    and only those k are sorted. The same indices as the stable full sort."""
    key = a.astype(np.float32) if a.dtype.kind == BFLOAT16_KIND else a
    key = xp.moveaxis(key, axis, -1)
    n = key.shape[-1]
    # the k-th value in the result's order; partitions place NaN last, as the largest value
    threshold = xp.partition(key, n - k if largest else k - 1, axis=-1)[..., n - k if largest else k - 1:][..., :1]
    floating = key.dtype.kind == "f"
    if floating:
        nan, nan_threshold = xp.isnan(key), xp.isnan(threshold)
        if largest:
            beyond = (key > threshold) | (nan & ~nan_threshold)
        else:
            beyond = (key < threshold) | (~nan & nan_threshold)
        tied = (key == threshold) | (nan & nan_threshold)
    else:
        beyond = key > threshold if largest else key < threshold
        tied = key == threshold
    wanted = k - beyond.sum(axis=-1, keepdims=True)
    picked = beyond | (tied & (xp.cumsum(tied, axis=-1) <= wanted))
    positions = xp.nonzero(picked.reshape(-1, n))[1].reshape(key.shape[:-1] + (k,))
    values = xp.take_along_axis(key, positions, -1)
    order = xp.take_along_axis(positions, _order(xp, values, -1, largest), -1)
    return xp.moveaxis(order, -1, axis).astype(np.int64, copy=False)
