"""Derivative rules of the reductions and the exp-sum family (PyTorch's formulas).

Values picked by max/min with a ``dim`` send their gradient to the saved
indices; whole-tensor max/min and amax/amin share it equally among ties,
as PyTorch does.
"""
import math

from fxkit.runtime.autograd.function import defgrad
from fxkit.runtime.ops.dims import normalize_dims, single_dim
from fxkit.runtime.ops.reductions import _ddof, _norm_dims
from fxkit.runtime.ops.softmax import softmax_dim
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor

_where = get_op("where")
_zeros = get_op("zeros")
_zeros_like = get_op("zeros_like")


def unreduce(g, shape, dim, keepdim):
    """``g``, the result of reducing a tensor of ``shape`` over ``dim``, broadcast back to ``shape``."""
    if not keepdim:
        axes = normalize_dims(dim, len(shape), "backward")
        g = g.reshape(tuple(1 if axes is None or i in axes else n for i, n in enumerate(shape)))
    return g.expand(tuple(shape))


def reduced_count(shape, dim):
    """How many elements of a tensor of ``shape`` each value of a reduction over ``dim`` reads."""
    axes = normalize_dims(dim, len(shape), "backward")
    return math.prod(shape) if axes is None else math.prod(shape[i] for i in axes)


@defgrad("sum")
def _sum(ctx, g, input, dim=None, keepdim=False, dtype=None):  # noqa: A002
    return unreduce(g, input.shape, dim, keepdim)


@defgrad("mean")
def _mean(ctx, g, input, dim=None, keepdim=False, dtype=None):  # noqa: A002
    return unreduce(g, input.shape, dim, keepdim) / reduced_count(input.shape, dim)


@defgrad("prod", saves=("input",))
def _prod(ctx, g, input, dim=None, keepdim=False, dtype=None):  # noqa: A002
    # Exact with zeros: an element's gradient is the product of the others.
    zero = input == 0
    nonzero = _where(zero, 1.0, input)
    others = nonzero.prod(dim, True) if dim is not None else nonzero.prod().reshape((1,) * input.ndim)
    zeros = zero.sum(dim, True) if dim is not None else zero.sum().reshape((1,) * input.ndim)
    factor = _where(zero, _where(zeros == 1, others, 0.0), _where(zeros == 0, others / nonzero, 0.0))
    return unreduce(g, input.shape, dim, keepdim) * factor


def _ties(g, a, out, dim, keepdim):
    """``g`` shared equally among the elements of ``a`` equal to their reduction ``out``."""
    picked = (a == unreduce(out, a.shape, dim, keepdim)).to(g.dtype)
    count = picked.sum(dim, True) if normalize_dims(dim, a.ndim, "backward") is not None else picked.sum()
    return unreduce(g, a.shape, dim, keepdim) * picked / unreduce(count, a.shape, dim, True)


def _extremum_rule(name):
    @defgrad(name, saves=("input", "dim", "other"), out=True)
    def rule(ctx, g, input, dim=None, keepdim=False, *, other=None):  # noqa: A002
        if other is not None or hasattr(dim, "shape"):
            b = dim if other is None else other
            wins = (input > b) if name == "max" else (input < b)
            share = (input == b).to(g.dtype) * 0.5 + wins.to(g.dtype)
            gb = g - g * share
            return g * share, (gb if other is None else None), None, (gb if other is not None else None)
        if dim is None:
            return _ties(g, input, ctx.out, None, False)
        values, indices = g[0], ctx.out[1]
        if input.ndim == 0:
            return values
        d = single_dim(dim, input.ndim, name)
        if not keepdim:
            values, indices = values.unsqueeze(d), indices.unsqueeze(d)
        return _zeros(input.shape, dtype=values.dtype, device=values.device).scatter(d, indices, values)

    return rule


_extremum_rule("max")
_extremum_rule("min")


def _amax_rule(name):
    @defgrad(name, saves=("input",), out=True)
    def rule(ctx, g, input, dim=(), keepdim=False):  # noqa: A002
        return _ties(g, input, ctx.out, dim, keepdim)

    return rule


_amax_rule("amax")
_amax_rule("amin")


@defgrad("cumsum")
def _cumsum(ctx, g, input, dim, dtype=None):  # noqa: A002
    if input.ndim == 0:
        return g
    return g.flip(dim).cumsum(dim).flip(dim)


def _variance_grad(a, dim, unbiased, correction, name):
    """``(a - mean, reduced dim, N - correction)`` of ``var``/``std`` with these arguments."""
    dim, ddof = _ddof(name, dim, unbiased, correction)
    centered = a - a.mean(dim, True) if normalize_dims(dim, a.ndim, name) is not None else a - a.mean()
    return centered, dim, reduced_count(a.shape, dim) - ddof


@defgrad("var", saves=("input",))
def _var(ctx, g, input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
    centered, dim, n = _variance_grad(input, dim, unbiased, correction, "var")
    return unreduce(g, input.shape, dim, keepdim) * centered * (2.0 / n)


@defgrad("std", saves=("input",), out=True)
def _std(ctx, g, input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
    centered, dim, n = _variance_grad(input, dim, unbiased, correction, "std")
    std = unreduce(ctx.out, input.shape, dim, keepdim)
    return _where(std == 0, 0.0, unreduce(g, input.shape, dim, keepdim) * centered / (std * n))


@defgrad("var_mean", saves=("input",))
def _var_mean(ctx, g, input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
    centered, dim, n = _variance_grad(input, dim, unbiased, correction, "var_mean")
    g_var, g_mean = g
    return (unreduce(g_var, input.shape, dim, keepdim) * centered * (2.0 / n)
            + unreduce(g_mean, input.shape, dim, keepdim) / reduced_count(input.shape, dim))


@defgrad("std_mean", saves=("input",), out=True)
def _std_mean(ctx, g, input, dim=None, unbiased=None, keepdim=False, *, correction=None):  # noqa: A002
    centered, dim, n = _variance_grad(input, dim, unbiased, correction, "std_mean")
    g_std, g_mean = g
    std = unreduce(ctx.out[0], input.shape, dim, keepdim)
    spread = _where(std == 0, 0.0, unreduce(g_std, input.shape, dim, keepdim) * centered / (std * n))
    return spread + unreduce(g_mean, input.shape, dim, keepdim) / reduced_count(input.shape, dim)


@defgrad("norm", saves=("input",), out=True)
def _norm(ctx, g, input, p="fro", dim=None, keepdim=False, dtype=None):  # noqa: A002
    if dtype is not None:
        input = input.to(dtype)
    axes = _norm_dims(p, dim, input.ndim)
    out = ctx.out
    if p == "nuc":
        return _nuclear(g, input, axes, keepdim)
    p = 2 if p in ("fro", None) else p
    if p == 0:
        return _zeros_like(input)
    if p in (math.inf, -math.inf):
        return _ties(g, input.abs(), out, axes, keepdim) * input.sign()
    gout = unreduce(g, input.shape, axes, keepdim)
    norm = unreduce(out, input.shape, axes, keepdim)
    if p == 1:
        return gout * input.sign()
    if p == 2:
        return _where(norm == 0, 0.0, gout * input / norm)
    return _where(norm == 0, 0.0, gout * input * input.abs() ** (p - 2) / norm ** (p - 1))


def _nuclear(g, a, axes, keepdim):
    """d(sum of singular values)/da = U V^T, moved back to ``axes``."""
    # NOTE: no SVD op in the registry; this rule computes it with the array module directly.
    xp = a.device.xp
    matrices = xp.moveaxis(a._data, axes, (-2, -1))
    u, _, vh = xp.linalg.svd(matrices, full_matrices=False)
    grad = Tensor._make(xp.moveaxis(xp.matmul(u, vh), (-2, -1), axes), a.device)
    return grad * unreduce(g, a.shape, axes, keepdim)


@defgrad("softmax", out=True)
def _softmax(ctx, g, input, dim=None, dtype=None):  # noqa: A002
    d = softmax_dim(dim, input.ndim)
    out = ctx.out
    return out * (g - (g * out).sum(d, True))


@defgrad("log_softmax", out=True)
def _log_softmax(ctx, g, input, dim=None, dtype=None):  # noqa: A002
    d = softmax_dim(dim, input.ndim)
    return g - ctx.out.exp() * g.sum(d, True)


@defgrad("logsumexp", saves=("input",), out=True)
def _logsumexp(ctx, g, input, dim, keepdim=False):  # noqa: A002
    return unreduce(g, input.shape, dim, keepdim) * (input - unreduce(ctx.out, input.shape, dim, keepdim)).exp()


def _picked_rule(name):
    """sort and topk: each value's gradient goes back to the position it was picked from."""

    @defgrad(name, out=True)
    def rule(ctx, g, input, *args, **kwargs):  # noqa: A002
        values, indices = g[0], ctx.out[1]
        if input.ndim == 0:
            return values
        d = single_dim(_dim_of(name, args, kwargs), input.ndim, name)
        return _zeros(input.shape, dtype=values.dtype, device=values.device).scatter(d, indices, values)

    return rule


def _dim_of(name, args, kwargs):
    """The ``dim`` argument of a sort (``sort(input, dim)``) or topk (``topk(input, k, dim)``) call."""
    at = 0 if name == "sort" else 1
    return kwargs.get("dim", args[at] if len(args) > at else -1)


_picked_rule("sort")
_picked_rule("topk")
