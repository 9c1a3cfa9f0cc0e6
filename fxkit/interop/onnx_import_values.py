"""The values an ONNX import holds besides graph nodes: constants and shape values.

`Const` is a value known while importing (an initializer, a ``Constant``
node); `Dims` is a shape value kept item by item with its exact rank, so that
shape arithmetic on ``Shape`` outputs stays exact (`onnx_import_dims`).
"""
import numpy as np

from fxkit.graph import Node


class Const:
    """A constant known while importing: an initializer or a ``Constant`` node's value."""

    __slots__ = ("array", "name")

    def __init__(self, array, name):
        self.array = array
        self.name = name


class Dims(list):
    """A shape value: a 0-d (``scalar``) or 1-D integer or boolean tensor held item by item.

    Items are Python ints/bools or graph nodes computing them; rules keep
    shape arithmetic in this form (see `onnx_import_dims`) so that ``Reshape``
    and ``Expand`` receive shapes, and the rank is exact (a ``Gather`` of one
    dim is 0-d, its ``Unsqueeze`` 1-D).
    """

    def __init__(self, items, scalar=False):
        super().__init__(items)
        if scalar and len(self) != 1:
            raise ValueError(f"a 0-d shape value holds one item, not {len(self)}")
        self.scalar = scalar

    @property
    def known(self):
        """Every item is a Python int or bool (the value is a constant)."""
        return all(type(d) in (int, bool) for d in self)

    @property
    def dtype(self):
        return np.dtype(bool) if self and all(type(d) is bool or (isinstance(d, Node) and _is_bool_item(d))
                                              for d in self) else np.dtype(np.int64)

    def array(self):
        """The value as a numpy array (it must be `known`)."""
        return np.array(list(self), dtype=self.dtype).reshape(() if self.scalar else (len(self),))


_BOOL_ITEM_OPS = frozenset({"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not"})


def _is_bool_item(node):
    return getattr(node.target, "name", None) in _BOOL_ITEM_OPS
