"""`TensorMeta`: what shape rules compute instead of tensors."""
from typing import NamedTuple

from fxkit.runtime.device import Device, cpu
from fxkit.runtime.dtypes import DType


class TensorMeta(NamedTuple):
    """Shape, dtype and device of a tensor, without its data.

    Dimensions are ints or symbolic expressions (any object with ``+ - * //``),
    so a shape rule written with plain arithmetic serves both.
    """

    shape: tuple
    dtype: DType
    device: Device = cpu

    @property
    def ndim(self):
        return len(self.shape)

    def __repr__(self):
        dims = ", ".join(str(d) for d in self.shape)
        return f"TensorMeta({self.dtype.name}[{dims}], {self.device})"


def broadcast_shapes(*shapes, op_name="broadcast"):
    """numpy/PyTorch broadcasting of shapes, for ints and symbolic dims."""
    from fxkit.errors import ShapeError

    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(-ndim, 0):
        dim = 1
        for s in shapes:
            if len(s) < -i:
                continue
            d = s[i]
            if _is_one(d):
                continue
            if _is_one(dim):
                dim = d
            elif not same_dim(dim, d):
                shown = " and ".join(str(list(s)) for s in shapes)
                raise ShapeError(
                    f"{op_name}: shapes {shown} cannot be broadcast together "
                    f"(dimension {i}: {dim} vs {d})"
                )
        out.append(dim)
    return tuple(out)


def _is_one(d):
    return isinstance(d, int) and d == 1


def same_dim(a, b):
    """Whether dims ``a`` and ``b`` are provably equal: ints by value, symbolic dims when their
    difference is 0 (``N*4`` and ``4*N`` print differently but are one size); a symbolic dim is never
    the same as an int, nor as an expression in other symbols."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    try:
        difference = a - b
    except TypeError:
        return str(a) == str(b)
    return type(difference) is int and difference == 0
