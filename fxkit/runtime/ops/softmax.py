"""The exp-sum family: ``softmax``, ``log_softmax`` and ``logsumexp``.

All three subtract the maximum along the reduced dim before ``exp``, so large
inputs do not overflow (PyTorch computes them the same way). They are
reductions to the graph (kind ``reduction``): fusion treats softmax as a
kernel that ends in a reduction over one axis. bfloat16 inputs are computed
in float32 and rounded once, as in PyTorch.
"""
import numpy as np

from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.dims import normalize_dims, reduced_shape, single_dim
from fxkit.runtime.ops.low_precision import BFLOAT16_KIND, run_in_float32
from fxkit.runtime.ops.reductions import require_float


def softmax_dim(dim, ndim):
    """``dim``, or PyTorch's legacy choice when it is None (``_get_softmax_dim``):
    0 for 0-, 1- and 3-d inputs, else 1. ``F.log_softmax(x)`` without ``dim`` relies on it."""
    if dim is None:
        return 0 if ndim in (0, 1, 3) else 1
    return dim


def _softmax_input(a, dtype, name):
    """Cast to ``dtype=`` first (PyTorch does, to compute in higher precision); refuse integers."""
    dtype = _dt.as_dtype(dtype)
    if dtype is not None and a.dtype != dtype.np:
        a = a.astype(dtype.np)
    require_float(_dt.from_numpy(a.dtype), name, "pass dtype=fxkit.float32 or cast with .float()")
    return a


def _softmax_rule(name):
    def rule(input, dim=None, dtype=None):  # noqa: A002
        out = _dt.as_dtype(dtype) or input.dtype
        require_float(out, name, "pass dtype=fxkit.float32 or cast with .float()")
        single_dim(softmax_dim(dim, len(input.shape)), len(input.shape), name)
        return TensorMeta(input.shape, out, input.device)

    return rule


def _normalize(xp, a, axis, log):
    """Softmax (or its log) of a non-empty array of at least one dim along ``axis``.

    The reductions are the arrays' methods: numpy's ``amax``/``sum`` functions add a Python-level
    wrapper (~1.5 us each, a quarter of a small classifier's log_softmax) around the same reduction."""
    out = xp.subtract(a, a.max(axis=axis, keepdims=True))
    if log:
        out -= xp.log(xp.exp(out).sum(axis=axis, keepdims=True))
        return out
    xp.exp(out, out=out)
    out /= out.sum(axis=axis, keepdims=True)
    return out


def _softmax_op(name, log, doc):
    def impl(xp, input, dim=None, dtype=None):  # noqa: A002
        input = _softmax_input(input, dtype, name)
        if input.dtype.kind == BFLOAT16_KIND:
            return run_in_float32(impl, xp, input, dim)
        axis = single_dim(softmax_dim(dim, input.ndim), input.ndim, name)
        if input.ndim == 0:
            return _normalize(xp, input.reshape(1), 0, log).reshape(())
        if input.size == 0:
            return xp.empty_like(input)
        return _normalize(xp, input, axis, log)

    impl.__name__ = name
    impl.__doc__ = doc + (" ``dim=None`` takes PyTorch's legacy implicit dim (see `softmax_dim`); "
                          "``dtype=`` casts the input first.")
    return op(name, kind="reduction", shape_rule=_softmax_rule(name))(impl)


softmax = _softmax_op("softmax", False,
                      "``exp(x) / sum(exp(x))`` along ``dim``, computed as ``exp(x - max)`` for stability.")
log_softmax = _softmax_op("log_softmax", True,
                          "``x - logsumexp(x)`` along ``dim``: the log of `softmax` without its underflow.")


def _logsumexp_rule(input, dim, keepdim=False):  # noqa: A002
    out = input.dtype if input.dtype.is_floating_point else _dt.default_float
    return TensorMeta(reduced_shape(input.shape, dim, keepdim, "logsumexp"), out, input.device)


@op("logsumexp", kind="reduction", shape_rule=_logsumexp_rule)
def logsumexp(xp, input, dim, keepdim=False):  # noqa: A002
    """``log(sum(exp(x)))`` over ``dim`` (an int or tuple), stable for large inputs.

    Integer inputs give the default float dtype; the logsumexp of nothing is ``-inf``.
    Infinite maxima are not subtracted, so a dim of ``-inf`` gives ``-inf`` (not NaN)
    and ``+inf`` gives ``+inf``, as in PyTorch.
    """
    if input.dtype.kind in "biu":
        input = input.astype(_dt.default_float.np)
    elif input.dtype.kind == BFLOAT16_KIND:
        return run_in_float32(logsumexp.impl, xp, input, dim, keepdim)
    axes = normalize_dims(dim, input.ndim, "logsumexp")
    if input.ndim == 0:  # log(exp(x)) of a single value is the value itself
        return input.copy()
    if input.size == 0:
        return xp.full(reduced_shape(input.shape, dim, keepdim, "logsumexp"), -np.inf, dtype=input.dtype)
    top = xp.amax(input, axis=axes, keepdims=True)
    top = xp.where(xp.isinf(top), 0, top)
    shifted = xp.subtract(input, top)
    xp.exp(shifted, out=shifted)
    with np.errstate(divide="ignore"):  # a dim of all -inf sums to 0: log gives -inf, as in PyTorch
        out = xp.log(xp.sum(shifted, axis=axes, keepdims=True))
    out += top
    return out if keepdim else out.reshape(reduced_shape(input.shape, dim, False, "logsumexp"))
