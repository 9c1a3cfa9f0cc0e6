"""Cases for fxkit/runtime/ops/reductions.py and softmax.py.

numpy float64 references for every op, PyTorch (`torch_ref`) for the
spellings where PyTorch's definition is the point: ``correction``/``unbiased``,
``logsumexp`` at infinities, ``norm`` orders, the legacy implicit softmax dim
and ``max``/``min`` named tuples.
"""
import warnings

import numpy as np

import fxkit
from tests.runtime.opcheck import case, randf, randi, torch_ref


def _torch(name, **fixed):
    """``torch.<name>(*args, **kwargs, **fixed)`` as a reference."""

    def call(*args, **kwargs):
        import torch

        kwargs = {k: (getattr(torch, v.name) if isinstance(v, fxkit.DType) else v) for k, v in kwargs.items()}
        return getattr(torch, name)(*args, **kwargs, **fixed)

    return torch_ref(call)


def _scalar(rng):
    """A random 0-d float32 array."""
    return randf(rng, 1).reshape(())


def _nan_tail(rng, *shape):
    """Floats with NaN at two places of the last row (NaN must win max/min, first NaN's index)."""
    a = randf(rng, *shape)
    a[-1, 1] = a[-1, 3] = np.nan
    return a


# -- sum -----------------------------------------------------------------------------
case("sum", lambda r: ((randf(r, 3, 4),), {}), lambda a: a.sum(), id="all")
case("sum", lambda r: ((randf(r, 3, 4, 5),), {"dim": -1, "keepdim": True}),
     lambda a, dim, keepdim: a.sum(axis=dim, keepdims=keepdim), id="neg_dim_keepdim")
case("sum", lambda r: ((randf(r, 3, 4, 5),), {"dim": (0, 2)}), lambda a, dim: a.sum(axis=dim), id="tuple_dim")
case("sum", lambda r: ((randf(r, 3, 4),), {"dim": ()}), lambda a, dim: a.sum(), id="empty_tuple_is_all")
case("sum", lambda r: ((randi(r, 3, 4, dtype=np.int32),), {"dim": 1}), lambda a, dim: a.sum(axis=1, dtype=np.int64),
     id="int32_to_int64")
case("sum", lambda r: ((randi(r, 3, 4) > 0,), {}), lambda a: np.int64(a.sum()), id="bool_to_int64")
case("sum", lambda r: ((randf(r, 3, 4),), {"dim": 0, "dtype": fxkit.float64}), lambda a, dim, dtype: a.sum(axis=0),
     id="dtype_float64", dtype=fxkit.float64)
case("sum", lambda r: ((np.zeros((0, 3), np.float32),), {}), lambda a: np.float64(0.0), id="empty")
case("sum", lambda r: ((np.zeros((0, 3), np.float32),), {"dim": 0}), lambda a, dim: np.zeros(3), id="empty_dim")
case("sum", lambda r: ((randf(r, 4, 6).T[:, ::2],), {"dim": 0}), lambda a, dim: a.sum(axis=0), id="noncontiguous")
case("sum", lambda r: ((randi(r, 2, 3, 4, dtype=np.int32),), {"dim": (0, -1), "keepdim": True}),
     _torch("sum"), id="torch_int")

# -- mean ----------------------------------------------------------------------------
case("mean", lambda r: ((randf(r, 3, 4),), {}), lambda a: a.mean(), id="all")
case("mean", lambda r: ((randf(r, 3, 4, 5),), {"dim": (0, -1), "keepdim": True}),
     lambda a, dim, keepdim: a.mean(axis=(0, 2), keepdims=True), id="tuple_keepdim")
case("mean", lambda r: ((randf(r, 5, 4).T,), {"dim": 1}), lambda a, dim: a.mean(axis=1), id="noncontiguous")
case("mean", lambda r: ((randi(r, 3, 4),), {"dim": 0, "dtype": fxkit.float32}),
     lambda a, dim, dtype: a.mean(axis=0), id="int_with_dtype", dtype=fxkit.float32)
case("mean", lambda r: ((randf(r, 3, 4, dtype=np.float64),), {"dim": 1}), lambda a, dim: a.mean(axis=1), id="float64")
case("mean", lambda r: ((np.zeros((0, 3), np.float32),), {"dim": 0}), lambda a, dim: np.full(3, np.nan),
     id="empty_is_nan")
case("mean", lambda r: ((randf(r, 2, 3, 4),), {"dim": [1, 2]}), _torch("mean"), id="torch_list_dim")

# -- prod ----------------------------------------------------------------------------
case("prod", lambda r: ((randf(r, 3, 4),), {}), lambda a: a.prod(), id="all")
case("prod", lambda r: ((randf(r, 3, 4),), {"dim": -1, "keepdim": True}),
     lambda a, dim, keepdim: a.prod(axis=-1, keepdims=True), id="neg_dim")
case("prod", lambda r: ((randi(r, 3, 4, dtype=np.int32),), {"dim": 0}), lambda a, dim: a.prod(axis=0, dtype=np.int64),
     id="int32_to_int64")
case("prod", lambda r: ((randi(r, 3, 4) > -3,), {}), lambda a: np.int64(a.all()), id="bool_to_int64")
case("prod", lambda r: ((np.zeros((0, 3), np.float32),), {"dim": 0}), lambda a, dim: np.ones(3), id="empty_is_one")
case("prod", lambda r: ((randf(r, 3, 4),), {"dim": 1, "dtype": fxkit.float64}), lambda a, dim, dtype: a.prod(axis=1),
     id="dtype", dtype=fxkit.float64)

# -- max, min ------------------------------------------------------------------------
for _name, _elementwise in (("max", np.maximum), ("min", np.minimum)):
    _red, _arg = getattr(np, _name), getattr(np, "arg" + _name)
    case(_name, lambda r: ((randf(r, 3, 4),), {}), lambda a, _red=_red: _red(a), id="all")
    case(_name, lambda r: ((randf(r, 3, 4, 5),), {"dim": 1}),
         lambda a, dim, _red=_red, _arg=_arg: (_red(a, axis=1), _arg(a, axis=1)), id="dim_values_indices")
    case(_name, lambda r: ((randf(r, 3, 4), -1, True), {}),
         lambda a, dim, keepdim, _red=_red, _arg=_arg: (_red(a, -1, keepdims=True), _arg(a, -1, keepdims=True)),
         id="positional_keepdim")
    case(_name, lambda r: ((randi(r, 4, 6),), {"dim": 0}),
         lambda a, dim, _red=_red, _arg=_arg: (_red(a, axis=0), _arg(a, axis=0)), id="int_first_index_on_ties")
    case(_name, lambda r: ((randf(r, 6, 4).T,), {"dim": 1}),
         lambda a, dim, _red=_red, _arg=_arg: (_red(a, axis=1), _arg(a, axis=1)), id="noncontiguous")
    case(_name, lambda r: ((np.zeros((0, 3), np.float32),), {"dim": 1}),
         lambda a, dim: (np.zeros(0), np.zeros(0, np.int64)), id="empty_other_dim")
    case(_name, lambda r: ((_scalar(r),), {"dim": 0}),
         lambda a, dim: (a, np.int64(0)), id="zero_dim")
    case(_name, lambda r: ((randf(r, 3, 4), randf(r, 4)), {}),
         lambda a, b, _f=_elementwise: _f(a, b), id="binary_is_elementwise")
    case(_name, lambda r: ((randi(r, 3, 4, dtype=np.int32),), {"other": randf(r, 3, 1)}),
         lambda a, other, _f=_elementwise: _f(a, other), id="other_kwarg_promotes")
    case(_name, lambda r: ((randf(r, 3, 4, 5),), {"dim": -2, "keepdim": True}), _torch(_name),
         id="torch_named_tuple")
    case(_name, lambda r: ((_nan_tail(r, 3, 5),), {"dim": 1}), _torch(_name), id="torch_nan")

# -- amax, amin, argmax, argmin ----------------------------------------------------------
for _name in ("amax", "amin"):
    _red = getattr(np, _name)
    case(_name, lambda r: ((randf(r, 3, 4, 5),), {}), lambda a, _red=_red: _red(a), id="default_all")
    case(_name, lambda r: ((randf(r, 3, 4, 5),), {"dim": (0, -1), "keepdim": True}),
         lambda a, dim, keepdim, _red=_red: _red(a, axis=(0, 2), keepdims=True), id="tuple_keepdim")
    case(_name, lambda r: ((randi(r, 3, 4),), {"dim": 1}), lambda a, dim, _red=_red: _red(a, axis=1), id="int")
    case(_name, lambda r: ((np.zeros((0, 3), np.float32),), {"dim": 1}), lambda a, dim: np.zeros(0),
         id="empty_other_dim")
    case(_name, lambda r: ((randf(r, 2, 3, 4),), {"dim": (1, 2)}), _torch(_name), id="torch")

for _name in ("argmax", "argmin"):
    _arg = getattr(np, _name)
    case(_name, lambda r: ((randf(r, 3, 4),), {}), lambda a, _arg=_arg: _arg(a), id="flattened")
    case(_name, lambda r: ((randf(r, 3, 4),), {"keepdim": True}),
         lambda a, keepdim, _arg=_arg: _arg(a, keepdims=True), id="flattened_keepdim")
    case(_name, lambda r: ((randf(r, 3, 4, 5),), {"dim": -1}), lambda a, dim, _arg=_arg: _arg(a, axis=-1),
         id="neg_dim")
    case(_name, lambda r: ((randi(r, 5, 3).T,), {"dim": 1, "keepdim": True}),
         lambda a, dim, keepdim, _arg=_arg: _arg(a, axis=1, keepdims=True), id="int_noncontiguous")
    case(_name, lambda r: ((randf(r, 3, 4, 5),), {"dim": 1, "keepdim": True}), _torch(_name), id="torch")

# -- all, any --------------------------------------------------------------------------
for _name in ("all", "any"):
    _red = getattr(np, _name)
    case(_name, lambda r: ((randi(r, 3, 4) > -3,), {}), lambda a, _red=_red: _red(a), id="bool")
    case(_name, lambda r: ((randi(r, 3, 4, 5),), {"dim": (0, 2), "keepdim": True}),
         lambda a, dim, keepdim, _red=_red: _red(a, axis=dim, keepdims=True), id="int_tuple_dim")
    case(_name, lambda r: ((randf(r, 3, 4),), {"dim": -1}), lambda a, dim, _red=_red: _red(a, axis=-1), id="float")
    case(_name, lambda r: ((randi(r, 3, 4, low=0, high=3, dtype=np.uint8),), {"dim": 1}),
         lambda a, dim, _red=_red: _red(a, axis=1).astype(np.uint8), id="uint8_stays_uint8")
    case(_name, lambda r: ((np.zeros((0, 3), bool),), {}), lambda a, _red=_red: _red(a), id="empty")
    case(_name, lambda r: ((randi(r, 3, 4, low=0, high=2, dtype=np.uint8),), {}), _torch(_name), id="torch_uint8")

# -- cumsum ----------------------------------------------------------------------------
case("cumsum", lambda r: ((randf(r, 3, 4),), {"dim": -1}), lambda a, dim: np.cumsum(a, axis=-1), id="neg_dim")
case("cumsum", lambda r: ((randf(r, 5, 4).T,), {"dim": 1}), lambda a, dim: np.cumsum(a, axis=1), id="noncontiguous")
case("cumsum", lambda r: ((randi(r, 3, 4, dtype=np.int32), 0), {}),
     lambda a, dim: np.cumsum(a, axis=0, dtype=np.int64), id="int32_to_int64")
case("cumsum", lambda r: ((randf(r, 3, 4),), {"dim": 0, "dtype": fxkit.float64}),
     lambda a, dim, dtype: np.cumsum(a, axis=0), id="dtype", dtype=fxkit.float64)
case("cumsum", lambda r: ((_scalar(r),), {"dim": 0}), lambda a, dim: a, id="zero_dim")
case("cumsum", lambda r: ((np.zeros((0, 3), np.float32),), {"dim": 0}), lambda a, dim: np.zeros((0, 3)), id="empty")
case("cumsum", lambda r: ((randi(r, 3, 4) > 0,), {"dim": 1}), _torch("cumsum"), id="torch_bool")

# -- var, std ------------------------------------------------------------------------
for _name in ("var", "std"):
    _red = getattr(np, _name)
    case(_name, lambda r: ((randf(r, 3, 4),), {}), lambda a, _red=_red: _red(a, ddof=1), id="default_bessel")
    case(_name, lambda r: ((randf(r, 3, 4, 5),), {"dim": (0, -1), "correction": 0, "keepdim": True}),
         lambda a, dim, correction, keepdim, _red=_red: _red(a, axis=(0, 2), keepdims=True), id="correction0_tuple")
    case(_name, lambda r: ((randf(r, 4, 6).T,), {"dim": 1, "unbiased": False}),
         lambda a, dim, unbiased, _red=_red: _red(a, axis=1), id="unbiased_false_noncontiguous")
    case(_name, lambda r: ((randf(r, 3, 4), 0, True, True), {}),
         lambda a, dim, unbiased, keepdim, _red=_red: _red(a, axis=0, ddof=1, keepdims=True),
         id="positional_dim_unbiased_keepdim")
    case(_name, lambda r: ((randf(r, 3, 4), False), {}), lambda a, unbiased, _red=_red: _red(a),
         id="positional_unbiased")
    case(_name, lambda r: ((randf(r, 3, 4, 5),), {"dim": -1, "correction": 2}), _torch(_name),
         id="torch_correction2")
    case(_name, lambda r: ((randf(r, 3, 6, dtype=np.float64),), {"dim": 1, "unbiased": True, "keepdim": True}),
         _torch(_name), id="torch_unbiased_float64")

for _name in ("var_mean", "std_mean"):
    case(_name, lambda r: ((randf(r, 3, 4),), {}), _torch(_name), id="torch_default")
    case(_name, lambda r: ((randf(r, 3, 4, 5),), {"dim": (0, -1), "correction": 0, "keepdim": True}),
         _torch(_name), id="torch_correction0_tuple")
    case(_name, lambda r: ((randf(r, 4, 6).T, 1, False), {}), _torch(_name), id="torch_positional_unbiased")
    case(_name, lambda r: ((randf(r, 3, 6, dtype=np.float64),), {"dim": [1], "correction": 2}), _torch(_name),
         id="torch_correction2_float64")

# -- logsumexp -------------------------------------------------------------------------


def _logsumexp(a, dim, keepdim=False):
    m = a.max(axis=dim, keepdims=True)
    out = np.log(np.exp(a - m).sum(axis=dim, keepdims=True)) + m
    return out if keepdim else np.squeeze(out, axis=dim)


def _inf_rows(rng):
    a = randf(rng, 3, 4)
    a[0] = -np.inf
    a[1, 2] = np.inf
    return a


case("logsumexp", lambda r: ((randf(r, 3, 4), 1), {}), _logsumexp, id="dim")
case("logsumexp", lambda r: ((randf(r, 3, 4, 5) * 500, (0, -1)), {"keepdim": True}), _logsumexp,
     id="large_tuple_keepdim", rtol=1e-5)
case("logsumexp", lambda r: ((randi(r, 3, 4), 0), {}), lambda a, dim: _logsumexp(a.astype(np.float64), dim),
     id="int_to_float32", dtype=fxkit.float32)
case("logsumexp", lambda r: ((_scalar(r), 0), {"keepdim": True}), lambda a, dim, keepdim: a, id="zero_dim")
case("logsumexp", lambda r: ((np.zeros((0, 3), np.float32), 0), {}), lambda a, dim: np.full(3, -np.inf), id="empty")
case("logsumexp", lambda r: ((_inf_rows(r), 1), {}), _torch("logsumexp"), id="torch_infinities")
case("logsumexp", lambda r: ((randf(r, 5, 4).T * 100, -1), {"keepdim": True}), _torch("logsumexp"),
     id="torch_noncontiguous")

# -- softmax, log_softmax ------------------------------------------------------------------


def _softmax(a, dim=None, dtype=None):
    e = np.exp(a - a.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


def _log_softmax(a, dim=None, dtype=None):
    s = a - a.max(axis=dim, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=dim, keepdims=True))


def _torch_f(name):
    """``F.<name>``; its deprecation warning for the implicit dim is the point of these cases."""

    def call(*args, **kwargs):
        import torch.nn.functional as F

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return getattr(F, name)(*args, **kwargs)

    return torch_ref(call)


for _name, _ref in (("softmax", _softmax), ("log_softmax", _log_softmax)):
    case(_name, lambda r: ((randf(r, 3, 4),), {"dim": 1}), _ref, id="dim")
    case(_name, lambda r: ((randf(r, 3, 4, 5) * 300,), {"dim": -2}), _ref, id="large_neg_dim")
    case(_name, lambda r: ((randf(r, 6, 4).T,), {"dim": 0}), _ref, id="noncontiguous")
    case(_name, lambda r: ((randi(r, 3, 4),), {"dim": 1, "dtype": fxkit.float64}),
         lambda a, dim, dtype, _ref=_ref: _ref(a.astype(np.float64), dim), id="int_with_dtype", dtype=fxkit.float64)
    case(_name, lambda r: ((randf(r, 3, 4),), {"dim": -1, "dtype": fxkit.float64}), _ref, id="dtype_float64",
         dtype=fxkit.float64)
    case(_name, lambda r: ((randf(r, 3, 4),), {}), lambda a, _ref=_ref: _ref(a, 1), id="legacy_dim_2d")
    case(_name, lambda r: ((randf(r, 2, 3, 4),), {}), lambda a, _ref=_ref: _ref(a, 0), id="legacy_dim_3d")
    case(_name, lambda r: ((randf(r, 5),), {}), lambda a, _ref=_ref: _ref(a, 0), id="legacy_dim_1d")
    case(_name, lambda r: ((_scalar(r),), {"dim": 0}),
         lambda a, dim, _ref=_ref: _ref(a.reshape(1), 0).reshape(()), id="zero_dim")
    case(_name, lambda r: ((np.zeros((0, 3), np.float32),), {"dim": 0}), lambda a, dim: np.zeros((0, 3)), id="empty")
    case(_name, lambda r: ((randf(r, 2, 3, 4, 5),), {}), _torch_f(_name), id="torch_legacy_dim_4d")
    case(_name, lambda r: ((randf(r, 2, 3, 4),), {}), _torch_f(_name), id="torch_legacy_dim_3d")

# -- norm ------------------------------------------------------------------------------
case("norm", lambda r: ((randf(r, 3, 4),), {}), lambda a: np.sqrt((a * a).sum()), id="fro_default")
case("norm", lambda r: ((randf(r, 3, 4, 5),), {"p": 1, "dim": -1}), lambda a, p, dim: np.abs(a).sum(axis=-1),
     id="p1_dim")
case("norm", lambda r: ((randf(r, 3, 4),), {"p": float("inf"), "dim": 0, "keepdim": True}),
     lambda a, p, dim, keepdim: np.abs(a).max(axis=0, keepdims=True), id="inf_keepdim")
case("norm", lambda r: ((randf(r, 3, 4),), {"p": -float("inf")}), lambda a, p: np.abs(a).min(), id="neg_inf")
case("norm", lambda r: ((randf(r, 3, 4) * (randi(r, 3, 4) > 0),), {"p": 0, "dim": 1}),
     lambda a, p, dim: (a != 0).sum(axis=1).astype(np.float64), id="p0_counts")
case("norm", lambda r: ((randf(r, 3, 4, 5),), {"p": 3, "dim": (0, 2)}),
     lambda a, p, dim: (np.abs(a) ** 3).sum(axis=(0, 2)) ** (1 / 3), id="p3_tuple")
case("norm", lambda r: ((randf(r, 2, 3, 4),), {"p": "nuc", "dim": (0, 2)}),
     lambda a, p, dim: np.linalg.svd(np.moveaxis(a, (0, 2), (-2, -1)), compute_uv=False).sum(-1), id="nuc",
     rtol=1e-4)
case("norm", lambda r: ((randf(r, 4, 6).T,), {"dtype": fxkit.float64}), lambda a, dtype: np.sqrt((a * a).sum()),
     id="dtype_noncontiguous", dtype=fxkit.float64)
case("norm", lambda r: ((np.zeros((0, 3), np.float32),), {"p": 2}), lambda a, p: np.float64(0.0), id="empty_p2")
case("norm", lambda r: ((randf(r, 3, 4, 5),), {"p": "fro", "dim": (1, 2), "keepdim": True}), _torch("norm"),
     id="torch_fro_dims")
case("norm", lambda r: ((randf(r, 3, 4),), {"p": 2.5, "dim": 1}), _torch("norm"), id="torch_p2.5")
case("norm", lambda r: ((randf(r, 3, 4),), {"p": "nuc", "keepdim": True}), _torch("norm"), id="torch_nuc_keepdim",
     rtol=1e-4)
case("norm", lambda r: ((randf(r, 3, 4),), {"p": float("inf"), "dim": (0, 1)}), _torch("norm"), id="torch_inf")
