"""Indexing: getitem and setitem (basic and advanced indexing)."""
import numpy as np

from fxkit.errors import IndexOutOfRangeError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.tensor import Tensor


def raw_index(index):
    """An index with its Tensors replaced by their arrays (anywhere in a tuple)."""
    if isinstance(index, Tensor):
        return index._data
    if isinstance(index, tuple):
        return tuple(raw_index(i) for i in index)
    if isinstance(index, list) and any(isinstance(i, Tensor) for i in index):
        return [raw_index(i) for i in index]
    return index


def _meta_index(index):
    """Stand-in index arrays for TensorMeta (integer zeros; masks cannot be sized)."""
    if isinstance(index, TensorMeta):
        if index.dtype is _dt.bool_:
            raise ShapeError("getitem: the result shape of a boolean mask depends on its values "
                             "and cannot be inferred without running")
        return np.zeros(index.shape, dtype=np.intp)
    if isinstance(index, tuple):
        return tuple(_meta_index(i) for i in index)
    return index


def _getitem_rule(a, index):
    if isinstance(a, (list, tuple)):
        return a[index]
    fake = np.lib.stride_tricks.as_strided(np.zeros((), dtype=np.bool_), shape=a.shape,
                                           strides=(0,) * len(a.shape))
    return TensorMeta(fake[_meta_index(index)].shape, a.dtype, a.device)


@op("getitem", kind="view", shape_rule=_getitem_rule, method=False)
def getitem(xp, a, index):
    """``a[index]`` with numpy's (= PyTorch's) basic and advanced indexing; also picks
    an element of a tuple or list (the outputs of ``chunk`` or ``max``)."""
    if isinstance(a, (list, tuple)):
        return a[index]
    try:
        return a[raw_index(index)]
    except IndexError as exc:
        raise IndexOutOfRangeError(f"getitem: {exc} (tensor of shape {list(a.shape)}, index {index!r})") from None


def _setitem_rule(a, index, value):
    return None


@op("setitem", kind="other", shape_rule=_setitem_rule, method=False, pure=False)
def setitem(xp, a, index, value):
    """``a[index] = value`` in place; returns None like Python's assignment."""
    value = value._data if isinstance(value, Tensor) else value
    try:
        a[raw_index(index)] = value
    except IndexError as exc:
        raise IndexOutOfRangeError(f"setitem: {exc} (tensor of shape {list(a.shape)}, index {index!r})") from None
    return None
