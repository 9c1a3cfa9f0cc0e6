"""Tensor factories: ``tensor, zeros, ones, empty, full, arange, rand, randn``
and the ``*_like`` forms, plus the random generator they share.

Factories are ops (kind ``other`` or ``random``) so that
``fxkit.zeros(x.shape[0], 3)`` inside a traced forward records a node.
"""
import numbers

import numpy as np

from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.device import Device, cpu
from fxkit.runtime.alloc_limit import charge
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.tensor import Tensor

_SEED = [None]
_GENERATORS = {}


def manual_seed(seed):
    """Seed every device's random generator, like ``torch.manual_seed``."""
    if not isinstance(seed, numbers.Integral):
        raise TypeError(f"manual_seed expects an int, got {type(seed).__name__}")
    _SEED[0] = int(seed)
    _GENERATORS.clear()


def generator(xp):
    """The random generator of array module ``xp`` (numpy or cupy)."""
    gen = _GENERATORS.get(xp.__name__)
    if gen is None:
        gen = xp.random.default_rng(_SEED[0])
        _GENERATORS[xp.__name__] = gen
    return gen


def size_args(size, name):
    """Normalise ``f(2, 3)``, ``f((2, 3))`` and ``f([2, 3])`` to a tuple of ints."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    out = []
    for s in size:
        if isinstance(s, Tensor):
            s = s.item()
        if not isinstance(s, numbers.Integral) and not hasattr(s, "free_symbols") and not isinstance(s, str):
            raise TypeError(f"{name}: sizes must be ints, got {s!r} in {tuple(size)}")
        if isinstance(s, numbers.Integral) and s < 0:
            raise ShapeError(f"{name}: negative dimension {s} in size {tuple(size)}")
        out.append(int(s) if isinstance(s, numbers.Integral) else s)
    return tuple(out)


def _dtype_or(dtype, default):
    return (dtype or default).np


def _sized(size, name, np_dtype):
    """``size`` as a tuple of ints, charged to the current `allocation_limit` (if any)."""
    shape = size_args(size, name)
    charge(shape, np.dtype(np_dtype).itemsize, name)
    return shape


def _leaf(array, requires_grad):
    """``array`` as an impl returns it, or a leaf Tensor that requires grad (``requires_grad=True``)."""
    if not requires_grad:
        return array
    return Tensor(array).requires_grad_()


def _factory_rule(name, default=None):
    def rule(*size, dtype=None, device=None, requires_grad=False):
        return TensorMeta(size_args(size, name), _dt.as_dtype(dtype) or default or _dt.default_float,
                          Device(device) if device else cpu)

    return rule


@op("zeros", kind="other", factory=True, method=False, shape_rule=_factory_rule("zeros"))
def zeros(xp, *size, dtype=None, requires_grad=False):
    """A tensor of zeros: ``fxkit.zeros(2, 3)``."""
    np_dtype = _dtype_or(dtype, _dt.default_float)
    return _leaf(xp.zeros(_sized(size, "zeros", np_dtype), dtype=np_dtype), requires_grad)


@op("ones", kind="other", factory=True, method=False, shape_rule=_factory_rule("ones"))
def ones(xp, *size, dtype=None, requires_grad=False):
    """A tensor of ones."""
    np_dtype = _dtype_or(dtype, _dt.default_float)
    return _leaf(xp.ones(_sized(size, "ones", np_dtype), dtype=np_dtype), requires_grad)


@op("empty", kind="other", factory=True, method=False, shape_rule=_factory_rule("empty"))
def empty(xp, *size, dtype=None, requires_grad=False):
    """An uninitialised tensor (its values are arbitrary)."""
    np_dtype = _dtype_or(dtype, _dt.default_float)
    return _leaf(xp.empty(_sized(size, "empty", np_dtype), dtype=np_dtype), requires_grad)


def _full_rule(size, fill_value, dtype=None, device=None, requires_grad=False):
    dtype = _dt.as_dtype(dtype) or _dt.scalar_dtype(fill_value)
    return TensorMeta(size_args((size,), "full"), dtype, Device(device) if device else cpu)


@op("full", kind="other", factory=True, method=False, shape_rule=_full_rule)
def full(xp, size, fill_value, dtype=None, requires_grad=False):
    """A tensor filled with ``fill_value``; dtype follows the value like PyTorch."""
    dtype = dtype or _dt.scalar_dtype(fill_value)
    return _leaf(xp.full(_sized((size,), "full", dtype.np), fill_value, dtype=dtype.np), requires_grad)


def _arange_bounds(start, end, step):
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if all(isinstance(v, numbers.Real) for v in (start, end, step)) and (end - start) * step < 0:
        raise ShapeError(f"arange: upper bound and lower bound inconsistent with step sign "
                         f"(start={start}, end={end}, step={step})")
    return start, end, step


def _arange_dtype(start, end, step, dtype):
    if dtype is not None:
        return _dt.as_dtype(dtype)
    values = [v for v in (start, end, step) if v is not None]
    return _dt.default_float if any(isinstance(v, float) for v in values) else _dt.int64


def _arange_rule(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    s, e, st = _arange_bounds(start, end, step)
    if any(isinstance(v, float) for v in (s, e, st)):
        n = int(np.ceil((e - s) / st))
    else:  # ints or symbolic dims (``arange(x.shape[1])`` with a dynamic length): ceiling division
        n = -(-(e - s) // st)
    return TensorMeta((max(n, 0) if isinstance(n, int) else n,), _arange_dtype(start, end, step, dtype), Device(device) if device else cpu)


@op("arange", kind="other", factory=True, method=False, shape_rule=_arange_rule)
def arange(xp, start, end=None, step=1, dtype=None, requires_grad=False):
    """``arange(end)``, ``arange(start, end, step)``; int64 unless a bound is a float."""
    out_dtype = _arange_dtype(start, end, step, dtype)
    s, e, st = _arange_bounds(start, end, step)
    return _leaf(xp.arange(s, e, st, dtype=np.float64 if out_dtype.is_floating_point else np.int64
                           ).astype(out_dtype.np), requires_grad)


def _random_floats(xp, name, size, dtype, sample):
    """``sample`` ("random" or "standard_normal") draws of ``dtype``, drawn in float32
    (float64 for float64) without a float64 detour; integer dtypes are refused like PyTorch."""
    if not dtype.is_floating_point:
        raise DTypeError(f"{name}: dtype must be floating point, got {dtype.name}")
    charge(size, dtype.itemsize, name)
    draw = getattr(generator(xp), sample)
    return draw(size, dtype=np.float32 if dtype.itemsize <= 4 else np.float64).astype(dtype.np, copy=False)


@op("rand", kind="random", factory=True, method=False, pure=False, shape_rule=_factory_rule("rand"))
def rand(xp, *size, dtype=None, requires_grad=False):
    """Uniform samples in [0, 1)."""
    return _leaf(_random_floats(xp, "rand", size_args(size, "rand"), dtype or _dt.default_float, "random"),
                 requires_grad)


@op("randn", kind="random", factory=True, method=False, pure=False, shape_rule=_factory_rule("randn"))
def randn(xp, *size, dtype=None, requires_grad=False):
    """Standard normal samples."""
    return _leaf(_random_floats(xp, "randn", size_args(size, "randn"), dtype or _dt.default_float,
                                "standard_normal"), requires_grad)


def _like_rule(input, *args, dtype=None, device=None, requires_grad=False, **kw):  # noqa: A002
    return TensorMeta(input.shape, _dt.as_dtype(dtype) or input.dtype, Device(device) if device else input.device)


def _make_like(name, fn):
    def like(xp, input, args, dtype, requires_grad):  # noqa: A002
        if not name.startswith("rand"):  # NOTE: _random_floats charges the random ones
            charge(input.shape, np.dtype(dtype.np if dtype else input.dtype).itemsize, name)
        return _leaf(fn(xp, input.shape, *args, dtype=(dtype.np if dtype else input.dtype)), requires_grad)

    if name == "full_like":
        def impl(xp, input, fill_value, *, dtype=None, requires_grad=False):  # noqa: A002
            return like(xp, input, (fill_value,), dtype, requires_grad)
    else:
        def impl(xp, input, *, dtype=None, requires_grad=False):  # noqa: A002
            return like(xp, input, (), dtype, requires_grad)

    impl.__doc__ = f"``{name}(x)``: like ``{name[:-5]}`` with the shape and dtype of ``x``."
    kind = "random" if name.startswith("rand") else "other"
    return op(name, kind=kind, shape_rule=_like_rule, pure=kind != "random")(impl)


zeros_like = _make_like("zeros_like", lambda xp, s, dtype: xp.zeros(s, dtype=dtype))
ones_like = _make_like("ones_like", lambda xp, s, dtype: xp.ones(s, dtype=dtype))
empty_like = _make_like("empty_like", lambda xp, s, dtype: xp.empty(s, dtype=dtype))
full_like = _make_like("full_like", lambda xp, s, v, dtype: xp.full(s, v, dtype=dtype))
rand_like = _make_like("rand_like", lambda xp, s, dtype: _random_floats(xp, "rand_like", s, _dt.from_numpy(dtype),
                                                                        "random"))
randn_like = _make_like("randn_like", lambda xp, s, dtype: _random_floats(xp, "randn_like", s, _dt.from_numpy(dtype),
                                                                          "standard_normal"))


def tensor(data, dtype=None, device=None, requires_grad=False):
    """Build a tensor from Python values or an array, copying it (PyTorch's rules:
    Python floats become float32, ints int64, bools bool); ``requires_grad=True``
    makes it a leaf of autograd."""
    dtype = _dt.as_dtype(dtype)
    if isinstance(data, Tensor):
        array = data._host().copy()
    else:
        array = np.array(data)
        if array.dtype == object:
            raise TypeError(f"tensor(): could not infer a dtype from {type(data).__name__} {data!r:.80}; "
                            f"pass numbers or nested lists of numbers of equal length")
    if dtype is None:
        kind = array.dtype.kind
        if kind == "f":
            dtype = _dt.default_float if not isinstance(data, (np.ndarray, np.generic, Tensor)) else _dt.from_numpy(array.dtype)
        elif kind in "iu":
            dtype = _dt.int64 if not isinstance(data, (np.ndarray, np.generic, Tensor)) else _dt.from_numpy(array.dtype)
        elif kind == "b":
            dtype = _dt.bool_
        else:
            raise DTypeError(f"tensor(): unsupported element type {array.dtype}")
    array = np.asarray(array.astype(dtype.np, copy=False), order="C")  # ascontiguousarray would make 0-d 1-d
    t = Tensor._make(array, cpu)
    if device is not None and Device(device) is not cpu:
        t = t.to(device)
    return t.requires_grad_() if requires_grad else t


def from_numpy(array):
    """Wrap a numpy array without copying: both share memory."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(array).__name__}")
    _dt.from_numpy(array.dtype)
    return Tensor._make(array, cpu)
