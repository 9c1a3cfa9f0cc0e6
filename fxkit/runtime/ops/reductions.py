"""Reductions over ``dim`` (an int, a tuple, or None for all) with ``keepdim``.

Signatures, defaults and result dtypes follow PyTorch: integer and bool sums
and products accumulate in int64, ``mean``/``var``/``norm`` need floating
inputs, indices are int64, and ``max``/``min`` with a ``dim`` return a
``(values, indices)`` named tuple. Reductions without an identity (``max``,
``argmax``, ``amax``) refuse an empty reduced dimension with PyTorch's message.
bfloat16 accumulates in float32 and is rounded once, as in PyTorch (numpy would
accumulate in bfloat16: see `low_precision`).
"""
import math
import warnings
from collections import namedtuple

import numpy as np

from fxkit.errors import DTypeError, IndexOutOfRangeError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.dims import normalize_dims, reduced_shape, single_dim
from fxkit.runtime.ops.elementwise_binary import maximum, minimum
from fxkit.runtime.ops.low_precision import BFLOAT16_KIND, accumulated, run_in_float32

# ``torch.return_types.max`` / ``min``: ``values, indices = x.max(1)``.
MaxResult = namedtuple("max", ("values", "indices"))
MinResult = namedtuple("min", ("values", "indices"))
# NOTE: the ops ``max``/``min`` own those module-level names; pickle finds the classes by these.
MaxResult.__qualname__, MinResult.__qualname__ = "MaxResult", "MinResult"

_INT_KINDS = "biu"


def _accumulate_dtype(dtype, explicit):
    """PyTorch's accumulation dtype of sum/prod/cumsum: ``dtype=`` if given, else
    int64 for integer and bool inputs, else the input's dtype (a `DType`)."""
    explicit = _dt.as_dtype(explicit)
    if explicit is not None:
        return explicit
    return _dt.int64 if dtype.category < 2 else dtype


def require_float(dtype, name, fix="cast with .float() or pass dtype=fxkit.float32"):
    """Refuse an integer or bool `DType` where PyTorch needs floats (mean, var, softmax)."""
    if dtype.category < 2:
        raise DTypeError(f"{name}: needs a floating point tensor, got {dtype.name}; {fix}")


def _need_elements(shape, axes, name):
    """Reductions without an identity cannot reduce an empty dimension (PyTorch's rule)."""
    if axes is None:
        if math.prod(shape) == 0:
            raise ShapeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                             f"Specify the reduction dim with the 'dim' argument.")
        return
    for axis in axes:
        if shape[axis] == 0:
            raise IndexOutOfRangeError(f"{name}(): Expected reduction dim {axis} to have non-zero size "
                                       f"(input shape {list(shape)})")


def _reduced(a, dim, keepdim, name, dtype):
    return TensorMeta(reduced_shape(a.shape, dim, keepdim, name), dtype, a.device)


# -- sum, prod, mean -----------------------------------------------------------
def _sum_rule(input, dim=None, keepdim=False, dtype=None):  # noqa: A002
    return _reduced(input, dim, keepdim, "sum", _accumulate_dtype(input.dtype, dtype))


@op("sum", kind="reduction", shape_rule=_sum_rule)
def sum(xp, input, dim=None, keepdim=False, dtype=None):  # noqa: A001, A002
    """Sum over ``dim``; integer and bool inputs sum to int64 like PyTorch."""
    axes = normalize_dims(dim, input.ndim, "sum")
    out = _accumulate_dtype(_dt.from_numpy(input.dtype), dtype).np
    if out.kind == BFLOAT16_KIND:
        return accumulated(xp.sum, input, out, axis=axes, keepdims=keepdim)
    if axes is not None and axes == _PER_CHANNEL.get(input.ndim) and input.flags.c_contiguous:
        # The per-channel sum of (N, C, *) (a conv bias's gradient): numpy's reduction over axes 0, 2, 3
        # walks the small trailing axes one by one (5x slower at 4x4 maps); the batch is summed first.
        rows = input.reshape(input.shape[0], input.shape[1], math.prod(input.shape[2:]))
        per_channel = rows.sum(axis=0, dtype=out).sum(axis=-1)
        return per_channel.reshape((1, -1) + (1,) * (input.ndim - 2)) if keepdim else per_channel
    # NOTE: the array's method, not xp.sum: numpy's wrapper costs more than the sum of a small tensor.
    return input.sum(axis=axes, keepdims=keepdim, dtype=out)


_PER_CHANNEL = {ndim: (0,) + tuple(range(2, ndim)) for ndim in range(3, 9)}


def _prod_rule(input, dim=None, keepdim=False, dtype=None):  # noqa: A002
    return _reduced(input, dim, keepdim, "prod", _accumulate_dtype(input.dtype, dtype))


@op("prod", kind="reduction", shape_rule=_prod_rule)
def prod(xp, input, dim=None, keepdim=False, dtype=None):  # noqa: A002
    """Product over ``dim``; the product of nothing is 1; integers and bools give int64."""
    axes = normalize_dims(dim, input.ndim, "prod")
    out = _accumulate_dtype(_dt.from_numpy(input.dtype), dtype).np
    if out.kind == BFLOAT16_KIND:
        return accumulated(xp.prod, input, out, axis=axes, keepdims=keepdim)
    return input.prod(axis=axes, keepdims=keepdim, dtype=out)


def _mean_dtype(dtype, explicit):
    out = _dt.as_dtype(explicit) or dtype
    if out.category < 2:
        raise DTypeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point "
                         f"or complex dtype. Got: {out.name}; pass dtype=fxkit.float32 or cast with .float()")
    return out


def _mean_rule(input, dim=None, keepdim=False, dtype=None):  # noqa: A002
    return _reduced(input, dim, keepdim, "mean", _mean_dtype(input.dtype, dtype))


@op("mean", kind="reduction", shape_rule=_mean_rule)
def mean(xp, input, dim=None, keepdim=False, dtype=None):  # noqa: A002
    """Mean over ``dim``; ``dtype=`` casts the input first (needed for integer tensors).

    The mean of nothing is NaN, as in PyTorch.
    """
    out = _mean_dtype(_dt.from_numpy(input.dtype), dtype).np
    axes = normalize_dims(dim, input.ndim, "mean")
    if input.size == 0:
        return xp.full(reduced_shape(input.shape, dim, keepdim, "mean"), xp.nan, dtype=out)
    if out.kind == BFLOAT16_KIND:
        return accumulated(xp.mean, input, out, axis=axes, keepdims=keepdim)
    if input.dtype != out:
        input = input.astype(out)
    return xp.mean(input, axis=axes, keepdims=keepdim)


# -- max, min (values and indices), amax, amin, argmax, argmin ------------------
def _extremum(name, binary_op, result, several):
    """``max``/``min``: the whole-tensor value, ``(values, indices)`` along ``dim``, or
    the elementwise ``binary_op`` when the second argument is a tensor (``max(a, b)``)."""

    def rule(input, dim=None, keepdim=False, *, other=None):  # noqa: A002
        if other is not None or isinstance(dim, TensorMeta):
            return binary_op.shape_rule(input, dim if other is None else other)
        if dim is None:
            return TensorMeta((), input.dtype, input.device)
        single_dim(dim, len(input.shape), name, several)
        shape = reduced_shape(input.shape, dim, keepdim, name)
        return result(TensorMeta(shape, input.dtype, input.device), TensorMeta(shape, _dt.int64, input.device))

    def impl(xp, input, dim=None, keepdim=False, *, other=None):  # noqa: A002
        if other is not None or isinstance(dim, xp.ndarray):
            # NOTE: Op.run promotes only for elementwise ops; this form is one, so promote here.
            b = dim if other is None else other
            if not (hasattr(input, "dtype") and (hasattr(b, "dtype") or type(b) in (int, float, bool))):
                raise DTypeError(f"{name}: the elementwise form takes a tensor and a tensor or number, got "
                                 f"{type(input).__name__} and {type(b).__name__}")
            input, b = binary_op._promote_inputs([input, b])
            return binary_op.impl(xp, input, b)
        if dim is None:
            _need_elements(input.shape, None, name)
            return getattr(input, name)()
        axis = single_dim(dim, input.ndim, name, several)
        if input.ndim == 0:
            return result(input.copy(), xp.zeros((), dtype=np.int64))
        _need_elements(input.shape, (axis,), name)
        return result(getattr(input, name)(axis=axis, keepdims=keepdim),
                      getattr(input, "arg" + name)(axis=axis, keepdims=keepdim))

    impl.__name__ = name
    impl.__doc__ = (f"``{name}(x)``: the {name}imum as a 0-d tensor; ``{name}(x, dim, keepdim=False)``: "
                    f"the named tuple ``(values, indices)`` along ``dim`` (NaN wins, first index on ties); "
                    f"``{name}(x, y)``: the elementwise ``{binary_op.name}``.")
    return op(name, kind="reduction", shape_rule=rule)(impl)


max = _extremum("max", maximum, MaxResult, "amax")  # noqa: A001
min = _extremum("min", minimum, MinResult, "amin")  # noqa: A001


def _amax_rule(name):
    def rule(input, dim=(), keepdim=False):  # noqa: A002
        return _reduced(input, dim, keepdim, name, input.dtype)

    return rule


@op("amax", kind="reduction", shape_rule=_amax_rule("amax"))
def amax(xp, input, dim=(), keepdim=False):  # noqa: A002
    """Maximum over ``dim`` (an int or tuple; all dims by default), values only."""
    axes = normalize_dims(dim, input.ndim, "amax")
    if input.size == 0:
        _need_elements(input.shape, axes, "amax")
    return input.max(axis=axes, keepdims=keepdim)


@op("amin", kind="reduction", shape_rule=_amax_rule("amin"))
def amin(xp, input, dim=(), keepdim=False):  # noqa: A002
    """Minimum over ``dim`` (an int or tuple; all dims by default), values only."""
    axes = normalize_dims(dim, input.ndim, "amin")
    if input.size == 0:
        _need_elements(input.shape, axes, "amin")
    return input.min(axis=axes, keepdims=keepdim)


def _argmax_rule(name):
    def rule(input, dim=None, keepdim=False):  # noqa: A002
        if dim is not None:
            single_dim(dim, len(input.shape), name)
        return _reduced(input, dim, keepdim, name, _dt.int64)

    return rule


def _arg_extremum(xp, fn, name, a, dim, keepdim):
    if dim is None:
        _need_elements(a.shape, None, name)
        return fn(a, keepdims=keepdim)
    axis = single_dim(dim, a.ndim, name)
    if a.ndim == 0:
        return xp.zeros((), dtype=np.int64)
    _need_elements(a.shape, (axis,), name)
    return fn(a, axis=axis, keepdims=keepdim)


@op("argmax", kind="reduction", shape_rule=_argmax_rule("argmax"))
def argmax(xp, input, dim=None, keepdim=False):  # noqa: A002
    """int64 index of the maximum along ``dim``; of the flattened tensor when ``dim`` is None."""
    return _arg_extremum(xp, xp.argmax, "argmax", input, dim, keepdim)


@op("argmin", kind="reduction", shape_rule=_argmax_rule("argmin"))
def argmin(xp, input, dim=None, keepdim=False):  # noqa: A002
    """int64 index of the minimum along ``dim``; of the flattened tensor when ``dim`` is None."""
    return _arg_extremum(xp, xp.argmin, "argmin", input, dim, keepdim)


# -- all, any ------------------------------------------------------------------
def _truth_rule(name):
    def rule(input, dim=None, keepdim=False):  # noqa: A002
        return _reduced(input, dim, keepdim, name, input.dtype if input.dtype is _dt.uint8 else _dt.bool_)

    return rule


@op("all", kind="reduction", shape_rule=_truth_rule("all"))
def all(xp, input, dim=None, keepdim=False):  # noqa: A001, A002
    """Whether every element along ``dim`` is non-zero; bool (uint8 for uint8 input, like PyTorch)."""
    out = xp.all(input, axis=normalize_dims(dim, input.ndim, "all"), keepdims=keepdim)
    return out.astype(np.uint8) if input.dtype == np.uint8 else out


@op("any", kind="reduction", shape_rule=_truth_rule("any"))
def any(xp, input, dim=None, keepdim=False):  # noqa: A001, A002
    """Whether some element along ``dim`` is non-zero; bool (uint8 for uint8 input, like PyTorch)."""
    out = xp.any(input, axis=normalize_dims(dim, input.ndim, "any"), keepdims=keepdim)
    return out.astype(np.uint8) if input.dtype == np.uint8 else out


# -- cumsum --------------------------------------------------------------------
def _cumsum_rule(input, dim, dtype=None):  # noqa: A002
    single_dim(dim, len(input.shape), "cumsum")
    return TensorMeta(input.shape, _accumulate_dtype(input.dtype, dtype), input.device)


@op("cumsum", kind="reduction", shape_rule=_cumsum_rule)
def cumsum(xp, input, dim, dtype=None):  # noqa: A002
    """Running sum along ``dim``; integer and bool inputs accumulate in int64."""
    axis = single_dim(dim, input.ndim, "cumsum")
    out = _accumulate_dtype(_dt.from_numpy(input.dtype), dtype).np
    if input.ndim == 0:
        return input.astype(out)
    if out.kind == BFLOAT16_KIND:
        return accumulated(xp.cumsum, input, out, axis=axis)
    return xp.cumsum(input, axis=axis, dtype=out)


# -- var, std ------------------------------------------------------------------
def _ddof(name, dim, unbiased, correction):
    """PyTorch's two spellings: ``correction=`` (default 1) or the older ``unbiased=`` bool,
    also as the first positional argument (``x.var(False)``)."""
    if isinstance(dim, bool):
        if unbiased is not None:
            raise DTypeError(f"{name}: got unbiased={dim} positionally and unbiased={unbiased}")
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise DTypeError(f"{name}: pass either unbiased= or correction=, not both "
                         f"(unbiased=True is correction=1, unbiased=False is correction=0)")
    if unbiased is not None:
        return dim, 1 if unbiased else 0
    return dim, 1 if correction is None else correction


def _variance_rule(name):
    def rule(input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
        require_float(input.dtype, name)
        dim, _ = _ddof(name, dim, unbiased, correction)
        return _reduced(input, dim, keepdim, name, input.dtype)

    return rule


def _variance(xp, fn, name, a, dim, unbiased, keepdim, correction):
    require_float(_dt.from_numpy(a.dtype), name)
    if a.dtype.kind == BFLOAT16_KIND:
        return run_in_float32(_variance, xp, fn, name, a, dim, unbiased, keepdim, correction)
    dim, ddof = _ddof(name, dim, unbiased, correction)
    axes = normalize_dims(dim, a.ndim, name)
    count = a.size if axes is None else math.prod(a.shape[i] for i in axes)
    if count - ddof > 0:
        return fn(a, axis=axes, keepdims=keepdim, ddof=ddof)
    warnings.warn(f"{name}(): degrees of freedom is <= 0 (correction={ddof} with {count} elements "
                  f"reduced); the result is nan or inf", UserWarning, stacklevel=5)
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(a, axis=axes, keepdims=keepdim, ddof=ddof)


@op("var", kind="reduction", shape_rule=_variance_rule("var"))
def var(xp, input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
    """Variance over ``dim``: ``sum((x - mean)**2) / max(N - correction, 0)``, correction 1
    by default (Bessel's); ``unbiased=False`` is ``correction=0``."""
    return _variance(xp, xp.var, "var", input, dim, unbiased, keepdim, correction)


@op("std", kind="reduction", shape_rule=_variance_rule("std"))
def std(xp, input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
    """Standard deviation: the square root of `var` with the same arguments."""
    return _variance(xp, xp.std, "std", input, dim, unbiased, keepdim, correction)


def _moments_rule(name):
    single = _variance_rule(name)

    def rule(input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
        out = single(input, dim, unbiased, keepdim, correction=correction)
        return out, out

    return rule


def _moments(xp, name, fn, input, dim, unbiased, keepdim, correction):
    """``(fn(input), mean(input))`` over the same dims; the mean is numpy's, as `var` computes it."""
    spread = _variance(xp, fn, name, input, dim, unbiased, keepdim, correction)
    dim, _ = _ddof(name, dim, unbiased, correction)
    wide = input if input.dtype.kind != BFLOAT16_KIND else input.astype(np.float32)
    mean = xp.mean(wide, axis=normalize_dims(dim, input.ndim, name), keepdims=keepdim)
    return spread, xp.asarray(mean).astype(spread.dtype, copy=False)


@op("var_mean", kind="reduction", shape_rule=_moments_rule("var_mean"))
def var_mean(xp, input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
    """``(var(input, ...), mean(input, dim, keepdim))`` in one call, as ``torch.var_mean``."""
    return _moments(xp, "var_mean", xp.var, input, dim, unbiased, keepdim, correction)


@op("std_mean", kind="reduction", shape_rule=_moments_rule("std_mean"))
def std_mean(xp, input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
    """``(std(input, ...), mean(input, dim, keepdim))`` in one call, as ``torch.std_mean``."""
    return _moments(xp, "std_mean", xp.std, input, dim, unbiased, keepdim, correction)


# -- norm ----------------------------------------------------------------------
def _norm_dims(p, dim, ndim):
    """The axes ``norm`` reduces, following ``torch.norm``: a number or ``'fro'`` is a
    vector norm over ``dim`` (all dims by default); ``'nuc'`` needs exactly two dims."""
    if p == "nuc":
        axes = tuple(range(ndim)) if dim is None else normalize_dims(dim, ndim, "norm")
        if axes is None or len(axes) != 2:
            raise ShapeError(f"norm: p='nuc' is a matrix norm and needs exactly 2 dims, got dim={dim!r} "
                             f"for a {ndim}-d tensor; pass dim=(row_dim, col_dim)")
        return tuple(sorted(axes))
    if isinstance(p, str) and p != "fro":
        raise ShapeError(f"norm: p={p!r} is not supported; use 'fro', 'nuc' or a number (2, 1, inf, ...)")
    if p == "fro" and isinstance(dim, (tuple, list)) and len(dim) > 2:
        raise ShapeError(f"norm: p='fro' takes at most 2 dims, got dim={tuple(dim)}; "
                         f"use p=2 for a vector norm over more dims")
    return normalize_dims(dim, ndim, "norm")


def _norm_rule(input, p="fro", dim=None, keepdim=False, dtype=None):  # noqa: A002
    out = _dt.as_dtype(dtype) or input.dtype
    require_float(out, "norm", "cast with .float() or pass dtype=fxkit.float32")
    axes = _norm_dims(p, dim, len(input.shape))
    return _reduced(input, axes, keepdim, "norm", out)


@op("norm", kind="reduction", shape_rule=_norm_rule)
def norm(xp, input, p="fro", dim=None, keepdim=False, dtype=None):  # noqa: A002
    """``torch.norm``: ``(sum |x|**p)**(1/p)`` over ``dim``; ``'fro'`` is p=2, ``inf``/``-inf``
    the largest/smallest ``|x|``, 0 counts non-zeros, ``'nuc'`` sums singular values.

    ``dtype=`` casts the input first.
    """
    explicit = _dt.as_dtype(dtype)
    if explicit is not None and input.dtype != explicit.np:
        input = input.astype(explicit.np)
    require_float(_dt.from_numpy(input.dtype), "norm")
    if input.dtype.kind == BFLOAT16_KIND:
        return run_in_float32(norm.impl, xp, input, p, dim, keepdim)
    axes = _norm_dims(p, dim, input.ndim)
    if p == "nuc":
        matrices = xp.moveaxis(input, axes, (-2, -1))
        out = xp.sum(xp.linalg.svd(matrices, compute_uv=False), axis=-1)
        return xp.expand_dims(out, axes) if keepdim else out
    p = 2 if p in ("fro", None) else p
    if p == 2:
        return xp.sqrt(xp.sum(xp.multiply(input, input), axis=axes, keepdims=keepdim))
    if p in (math.inf, -math.inf):
        if input.size == 0:
            _need_elements(input.shape, axes, "norm")
        return (xp.amax if p > 0 else xp.amin)(xp.abs(input), axis=axes, keepdims=keepdim)
    if p == 0:
        return xp.sum(input != 0, axis=axes, keepdims=keepdim, dtype=input.dtype)
    if p == 1:
        return xp.sum(xp.abs(input), axis=axes, keepdims=keepdim)
    powered = xp.abs(input)
    powered **= p
    return xp.sum(powered, axis=axes, keepdims=keepdim) ** (1.0 / p)
