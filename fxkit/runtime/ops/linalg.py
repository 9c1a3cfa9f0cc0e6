"""Linear algebra on BLAS through numpy/cupy: matmul, mm, bmm, linear, addmm,
baddbmm and einsum.

These are the hot ops of most models, so the eager path does no shape
arithmetic of its own: it lets ``xp.matmul`` run and only on its failure
works out PyTorch's error message from the shapes (``_matmul_shape``).
Operands must share a dtype, as in PyTorch (numpy would silently upcast
``float32 @ float64`` to float64). bfloat16 operands multiply in float32 on BLAS
and the result is rounded once (`low_precision.run_in_float32`), like PyTorch's.
"""
import math

from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta, broadcast_shapes, same_dim
from fxkit.runtime.op import op
from fxkit.runtime.ops.einsum_plan import cached_plan, contract, plan_einsum
from fxkit.runtime.ops.low_precision import BFLOAT16_KIND, run_in_float32


def _dims(shape):
    return "x".join(str(d) for d in shape)


def _matmul_shape(a_shape, b_shape, name="matmul"):
    """Result shape of ``matmul`` (numpy's rules for 1-d operands and batch broadcasting),
    or a ShapeError with PyTorch's message."""
    if len(a_shape) == 0 or len(b_shape) == 0:
        raise ShapeError(f"{name}: both arguments need at least 1 dimension, got shapes "
                         f"{list(a_shape)} and {list(b_shape)}")
    a2 = (1,) + tuple(a_shape) if len(a_shape) == 1 else tuple(a_shape)
    b2 = tuple(b_shape) + (1,) if len(b_shape) == 1 else tuple(b_shape)
    if not same_dim(a2[-1], b2[-2]):
        raise ShapeError(f"{name}: mat1 and mat2 shapes cannot be multiplied "
                         f"({_dims(a2[-2:])} and {_dims(b2[-2:])})")
    batch = broadcast_shapes(a2[:-2], b2[:-2], op_name=name)
    out = batch + (a2[-2], b2[-1])
    if len(a_shape) == 1:
        out = out[:-2] + out[-1:]
    if len(b_shape) == 1:
        out = out[:-1]
    return out


def _dt_error(name, *dtypes):
    names = " and ".join(_dt.from_numpy(getattr(d, "np", d)).name for d in dtypes)
    return DTypeError(f"{name}: expected all inputs to have the same dtype, got {names}; cast with .to()")


def _same_dtype(name, *metas):
    first = metas[0].dtype
    if any(m.dtype is not first for m in metas[1:]):
        raise _dt_error(name, *(m.dtype for m in metas))
    return first


def _require_ndim(name, ndim, **shapes):
    for role, shape in shapes.items():
        if len(shape) != ndim:
            raise ShapeError(f"{name}: {role} must be a {ndim}-D tensor, got shape {list(shape)}")


def _scaled_shape(name, input_shape, out_shape, role="input"):
    """``beta * input`` (or a bias) must broadcast to the product's shape without growing it."""
    try:
        fits = broadcast_shapes(input_shape, out_shape, op_name=name) == tuple(out_shape)
    except ShapeError:
        fits = False
    if not fits:
        raise ShapeError(f"{name}: {role} of shape {list(input_shape)} cannot be broadcast to the "
                         f"product's shape {list(out_shape)}")


# -- matmul, mm, bmm -------------------------------------------------------------
def _matmul_rule(input, other):  # noqa: A002
    return TensorMeta(_matmul_shape(input.shape, other.shape), _same_dtype("matmul", input, other), input.device)


@op("matmul", kind="matmul", shape_rule=_matmul_rule)
def matmul(xp, input, other):  # noqa: A002
    """Matrix product with numpy's broadcasting of batch dimensions (``a @ b``)."""
    dtype = input.dtype
    if dtype != other.dtype:
        raise _dt_error("matmul", dtype, other.dtype)
    if dtype.kind == BFLOAT16_KIND:
        return run_in_float32(matmul.impl, xp, input, other)
    try:
        return xp.matmul(input, other)
    except ValueError:
        _matmul_shape(input.shape, other.shape)
        raise


def _mm_shape(name, a_shape, b_shape):
    _require_ndim(name, 2, self=a_shape, mat2=b_shape)
    return _matmul_shape(a_shape, b_shape, name)


def _mm_rule(input, mat2):  # noqa: A002
    return TensorMeta(_mm_shape("mm", input.shape, mat2.shape), _same_dtype("mm", input, mat2), input.device)


@op("mm", kind="matmul", shape_rule=_mm_rule)
def mm(xp, input, mat2):  # noqa: A002
    """Product of two matrices (2-D only; `matmul` broadcasts)."""
    if input.ndim != 2 or mat2.ndim != 2 or input.shape[1] != mat2.shape[0]:
        _mm_shape("mm", input.shape, mat2.shape)
    dtype = input.dtype
    if dtype != mat2.dtype:
        raise _dt_error("mm", dtype, mat2.dtype)
    if dtype.kind == BFLOAT16_KIND:
        return run_in_float32(mm.impl, xp, input, mat2)
    return xp.matmul(input, mat2)


def _bmm_shape(name, a_shape, b_shape):
    _require_ndim(name, 3, batch1=a_shape, batch2=b_shape)
    if not same_dim(a_shape[0], b_shape[0]):
        raise ShapeError(f"{name}: batch1 and batch2 must have the same batch size, got "
                         f"{a_shape[0]} and {b_shape[0]} (shapes {list(a_shape)} and {list(b_shape)})")
    return _matmul_shape(a_shape, b_shape, name)


def _bmm_rule(input, mat2):  # noqa: A002
    return TensorMeta(_bmm_shape("bmm", input.shape, mat2.shape), _same_dtype("bmm", input, mat2), input.device)


@op("bmm", kind="matmul", shape_rule=_bmm_rule)
def bmm(xp, input, mat2):  # noqa: A002
    """Batched product of ``(B, n, m)`` and ``(B, m, p)`` tensors (no batch broadcasting)."""
    if input.ndim != 3 or mat2.ndim != 3 or input.shape[0] != mat2.shape[0] or input.shape[2] != mat2.shape[1]:
        _bmm_shape("bmm", input.shape, mat2.shape)
    dtype = input.dtype
    if dtype != mat2.dtype:
        raise _dt_error("bmm", dtype, mat2.dtype)
    if dtype.kind == BFLOAT16_KIND:
        return run_in_float32(bmm.impl, xp, input, mat2)
    return xp.matmul(input, mat2)


# -- linear ------------------------------------------------------------------------
def _linear_shape(x_shape, w_shape, b_shape):
    if len(w_shape) not in (1, 2):
        raise ShapeError(f"linear: weight must be 1-D or 2-D (out_features, in_features), "
                         f"got shape {list(w_shape)}")
    in_features = w_shape[-1]
    if len(x_shape) == 0:
        raise ShapeError(f"linear: the input must have at least 1 dimension (its last is in_features="
                         f"{in_features}), got a 0-d tensor")
    if not same_dim(x_shape[-1], in_features):
        raise ShapeError(
            f"linear: mat1 and mat2 shapes cannot be multiplied ({math.prod(x_shape[:-1])}x{x_shape[-1]} "
            f"and {_dims(tuple(reversed(w_shape)))}): the input's last dimension is {x_shape[-1]} "
            f"but the weight (shape {list(w_shape)}) has in_features={in_features}")
    out = _matmul_shape(x_shape, tuple(reversed(w_shape)), "linear")
    if b_shape is not None:
        _scaled_shape("linear", b_shape, out, role="bias")
    return out


def _linear_rule(input, weight, bias=None):  # noqa: A002
    metas = (input, weight) if bias is None else (input, weight, bias)
    dtype = _same_dtype("linear", *metas)
    return TensorMeta(_linear_shape(input.shape, weight.shape, None if bias is None else bias.shape),
                      dtype, input.device)


@op("linear", kind="matmul", shape_rule=_linear_rule, method=False)
def linear(xp, input, weight, bias=None):  # noqa: A002
    """``x @ weight.T + bias`` with PyTorch's layout: ``weight`` is ``(out_features, in_features)``.

    BLAS reads ``weight.T`` without a copy and the bias is added in place to the fresh product.
    An input of more than 2 dims is one ``(rows, in_features)`` product: numpy's stacked matmul
    against the transposed weight loops outside BLAS (``(8, 17, 3072) @ (3072, 768)``: 1.8 s
    against 70 ms for the same rows as one 2-D product).
    """
    dtype = input.dtype
    if dtype != weight.dtype or (bias is not None and bias.dtype != dtype):
        raise _dt_error("linear", *(t.dtype for t in (input, weight, bias) if t is not None))
    if dtype.kind == BFLOAT16_KIND:
        return run_in_float32(linear.impl, xp, input, weight, bias)
    try:
        if input.ndim > 2 and weight.ndim == 2 and input.shape[-1] == weight.shape[1]:
            rows = input.reshape(math.prod(input.shape[:-1]), input.shape[-1])
            out = xp.matmul(rows, weight.T).reshape(input.shape[:-1] + (weight.shape[0],))
        else:
            out = xp.matmul(input, weight.T)
    except ValueError:
        _linear_shape(input.shape, weight.shape, None)
        raise
    if bias is not None:
        if not out.ndim:  # a 1-D input and weight give a numpy scalar, which ``+=`` would rebind
            out = xp.asarray(out)
        try:
            out += bias
        except ValueError:
            _linear_shape(input.shape, weight.shape, bias.shape)
            raise
    return out


# -- addmm, baddbmm -------------------------------------------------------------------
def _check_scalars(name, dtype, beta, alpha):
    if dtype.kind in "biu" and (isinstance(beta, float) or isinstance(alpha, float)):
        raise DTypeError(f"{name}: beta={beta} and alpha={alpha} must be integers for integer tensors "
                         f"({_dt.from_numpy(dtype).name}); cast the tensors with .float() first")


def _scaled_product(xp, name, inp, product, beta, alpha):
    """``beta * inp + alpha * product`` in place on the fresh ``product``; ``inp`` is ignored
    when ``beta == 0`` (NaN in it does not propagate, as in PyTorch)."""
    _check_scalars(name, product.dtype, beta, alpha)
    if alpha != 1:
        product *= alpha
    if beta != 0:
        try:
            product += inp if beta == 1 else inp * beta
        except ValueError:
            _scaled_shape(name, inp.shape, product.shape)
            raise
    elif inp.shape != product.shape:
        _scaled_shape(name, inp.shape, product.shape)
    return product


def _addmm_rule(input, mat1, mat2, *, beta=1, alpha=1):  # noqa: A002
    out = _mm_shape("addmm", mat1.shape, mat2.shape)
    _scaled_shape("addmm", input.shape, out)
    return TensorMeta(out, _same_dtype("addmm", input, mat1, mat2), mat1.device)


@op("addmm", kind="matmul", shape_rule=_addmm_rule)
def addmm(xp, input, mat1, mat2, *, beta=1, alpha=1):  # noqa: A002
    """``beta * inp + alpha * (a @ b)`` for matrices ``a``, ``b``; ``inp`` broadcasts to the product."""
    if input.dtype != mat1.dtype or mat1.dtype != mat2.dtype:
        raise _dt_error("addmm", input.dtype, mat1.dtype, mat2.dtype)
    if mat1.ndim != 2 or mat2.ndim != 2 or mat1.shape[1] != mat2.shape[0]:
        _mm_shape("addmm", mat1.shape, mat2.shape)
    if mat1.dtype.kind == BFLOAT16_KIND:
        return run_in_float32(addmm.impl, xp, input, mat1, mat2, beta=beta, alpha=alpha)
    return _scaled_product(xp, "addmm", input, xp.matmul(mat1, mat2), beta, alpha)


def _baddbmm_rule(input, batch1, batch2, *, beta=1, alpha=1):  # noqa: A002
    out = _bmm_shape("baddbmm", batch1.shape, batch2.shape)
    _scaled_shape("baddbmm", input.shape, out)
    return TensorMeta(out, _same_dtype("baddbmm", input, batch1, batch2), batch1.device)


@op("baddbmm", kind="matmul", shape_rule=_baddbmm_rule)
def baddbmm(xp, input, batch1, batch2, *, beta=1, alpha=1):  # noqa: A002
    """``beta * inp + alpha * bmm(a, b)``; ``inp`` broadcasts to the ``(B, n, p)`` product."""
    if input.dtype != batch1.dtype or batch1.dtype != batch2.dtype:
        raise _dt_error("baddbmm", input.dtype, batch1.dtype, batch2.dtype)
    if batch1.ndim != 3 or batch2.ndim != 3 or batch1.shape[0] != batch2.shape[0] or batch1.shape[2] != batch2.shape[1]:
        _bmm_shape("baddbmm", batch1.shape, batch2.shape)
    if batch1.dtype.kind == BFLOAT16_KIND:
        return run_in_float32(baddbmm.impl, xp, input, batch1, batch2, beta=beta, alpha=alpha)
    return _scaled_product(xp, "baddbmm", input, xp.matmul(batch1, batch2), beta, alpha)


# -- einsum ---------------------------------------------------------------------------
def _einsum_operands(operands):
    """``einsum(eq, a, b)`` and ``einsum(eq, [a, b])`` are the same call."""
    if len(operands) == 1 and type(operands[0]) in (list, tuple):
        return tuple(operands[0])
    return operands


def _refuse_bool(dtype):
    # NOTE: numpy sums bools with logical or (True) where PyTorch counts them (int64).
    if dtype is _dt.bool_ or getattr(dtype, "kind", "") == "b":
        raise DTypeError("einsum: bool operands are not supported; cast them with .long() to count "
                         "or .float()")


def _einsum_rule(equation, *operands):
    operands = _einsum_operands(operands)
    dtype = _same_dtype("einsum", *operands)
    _refuse_bool(dtype)
    plan = plan_einsum(equation, [o.shape for o in operands])
    return TensorMeta(plan.out_shape, dtype, operands[0].device)


@op("einsum", kind="matmul", shape_rule=_einsum_rule, method=False)
def einsum(xp, equation, *operands):
    """Einstein summation, ``einsum("bij,bjk->bik", a, b)``, with ``...`` and PyTorch's
    broadcasting of size-1 dims. Pairs of operands contract through ``matmul`` (BLAS, batch
    dims included), left to right like PyTorch without opt_einsum."""
    operands = _einsum_operands(operands)
    if any(o.dtype != operands[0].dtype for o in operands[1:]):
        raise _dt_error("einsum", *(o.dtype for o in operands))
    _refuse_bool(operands[0].dtype)
    if operands[0].dtype.kind == BFLOAT16_KIND:  # np.einsum has no bfloat16 loops
        return run_in_float32(einsum.impl, xp, equation, *operands)
    return contract(xp, cached_plan(equation, tuple(o.shape for o in operands)), operands)
