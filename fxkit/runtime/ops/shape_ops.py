"""Shape and view ops: view, reshape, permute, cat, split, ... and size queries."""
import math

from fxkit.errors import ShapeError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op


def shape_arg(shape, name):
    """``f(x, 2, 3)``, ``f(x, (2, 3))`` and ``f(x, [2, 3])`` all give ``(2, 3)``."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    for s in shape:
        if not isinstance(s, int):
            raise TypeError(f"{name}: sizes must be ints, got {s!r} in {tuple(shape)}")
    return tuple(shape)


def infer_view_shape(old_shape, shape, name="view"):
    """Resolve one ``-1`` in ``shape`` against ``old_shape``'s element count."""
    numel = math.prod(old_shape)
    if shape.count(-1) > 1:
        raise ShapeError(f"{name}: only one dimension can be inferred (-1), got {list(shape)}")
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if known == 0 or numel % known:
            raise ShapeError(f"{name}: shape {list(shape)} is invalid for input of size {numel}")
        shape = tuple(numel // known if d == -1 else d for d in shape)
    elif known != numel:
        raise ShapeError(f"{name}: shape {list(shape)} is invalid for input of size {numel} "
                         f"(input shape {list(old_shape)})")
    return shape


def _view_rule(a, *shape):
    return TensorMeta(infer_view_shape(a.shape, shape_arg(shape, "view")), a.dtype, a.device)


@op("view", kind="view", shape_rule=_view_rule)
def view(xp, a, *shape):
    """The same data with another shape; ``-1`` infers one dimension."""
    return a.reshape(infer_view_shape(a.shape, shape_arg(shape, "view")))
