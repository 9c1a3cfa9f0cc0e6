"""The gated linear unit: ``glu(x, dim) = a * sigmoid(b)`` for the two halves ``a, b`` of ``x`` along ``dim``.

It halves ``dim``, so it is no elementwise op of ``x`` (kind ``other``); the
sigmoid is PyTorch's formula (`elementwise_unary.sigmoid`), so float32 results
round as torch's do. bfloat16 runs in float32 and rounds once.
"""
from fxkit.errors import ShapeError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.dims import normalize_dim
from fxkit.runtime.ops.elementwise_unary import sigmoid
from fxkit.runtime.ops.low_precision import BFLOAT16_KIND, run_in_float32
from fxkit.runtime.ops.nn_checks import require_float, shown


def _halved(shape, dim):
    """``dim`` made non-negative, and ``shape`` with it halved; its size must be even."""
    if not shape:
        raise ShapeError("glu: a 0-d tensor cannot be halved; pass a tensor with at least one dim")
    axis = normalize_dim(dim, len(shape), "glu")
    size = shape[axis]
    if type(size) is int and size % 2:
        raise ShapeError(f"glu: halving dimension must be even, but dimension {axis} of the input of shape "
                         f"{shown(shape)} is size {size}")
    return axis, tuple(shape[:axis]) + (size // 2,) + tuple(shape[axis + 1:])


def _glu_rule(input, dim=-1):  # noqa: A002
    require_float("glu", input)
    return TensorMeta(_halved(input.shape, dim)[1], input.dtype, input.device)


@op("glu", kind="other", shape_rule=_glu_rule, method=False)
def glu(xp, input, dim=-1):  # noqa: A002
    """``a * sigmoid(b)`` where ``a`` and ``b`` are the first and second half of ``input`` along ``dim``.

    Example:
        >>> F.glu(fxkit.tensor([[1.0, 2.0, 0.0, 0.0]]))
        tensor([[0.5000, 1.0000]])
    """
    require_float("glu", input)
    if input.dtype.kind == BFLOAT16_KIND:
        return run_in_float32(glu.impl, xp, input, dim)
    axis, _ = _halved(input.shape, dim)
    half = input.shape[axis] // 2
    first = input[(slice(None),) * axis + (slice(None, half),)]
    second = input[(slice(None),) * axis + (slice(half, None),)]
    out = sigmoid.impl(xp, second)
    out *= first
    return out
