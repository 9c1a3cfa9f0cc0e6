"""bfloat16: computed in float32 and rounded once at the end, as PyTorch does.

ml_dtypes gives numpy a bfloat16 dtype whose elementwise ufuncs compute in
float32 and round each result, which is what PyTorch does for one elementwise
op. Anything more needs help, because with it

- ``np.matmul`` has no bfloat16 loop (it returns float32, off BLAS) and
  ``np.einsum`` refuses the dtype;
- Python floats are not weak scalars: ``bf16_array * 0.5`` is float32;
- reductions accumulate in bfloat16 (the sum of 10000 ones is 256);
- an op made of several numpy steps rounds after every step.

PyTorch computes such ops in float32 (its "opmath" type) and rounds the
result once. The helpers here do the same: `in_float32` wraps an op's impl
that way, `run_in_float32` does it for one call, `accumulated` for a
reduction. Hot impls test for bfloat16 inline first (one dtype attribute,
``a.dtype.kind == BFLOAT16_KIND``), so the float32, float16 and float64 paths
run as before.
"""
import functools
import inspect

import numpy as np

# NOTE: bfloat16 is the only numpy dtype of kind "V" (void) that fxkit accepts
# (`dtypes.from_numpy` refuses the others), so the kind alone identifies it.
BFLOAT16_KIND = "V"
_FLOAT32 = np.dtype(np.float32)


def kind(dtype):
    """numpy's kind letter of ``dtype``, with ``'f'`` for bfloat16 (numpy says ``'V'``)."""
    k = dtype.kind
    return "f" if k == BFLOAT16_KIND else k


def widen(a):
    """``a`` as float32 when it is a bfloat16 array; anything else unchanged."""
    dtype = getattr(a, "dtype", None)
    return a.astype(_FLOAT32) if dtype is not None and dtype.kind == BFLOAT16_KIND else a


def narrow(out, dtype):
    """``out``, computed in float32, rounded to ``dtype`` when that is bfloat16.

    ``out`` may be an array, a numpy scalar, or a tuple or list of them (a
    named tuple stays one); only its float32 parts are rounded.
    """
    if dtype.kind != BFLOAT16_KIND:
        return out
    return _restore(out, dtype, {})


def scalar(value, dtype):
    """A Python float as a 0-d array of the bfloat16 ``dtype``, so numpy does not read it as
    float64 and upcast the bfloat16 operand; other values and dtypes unchanged."""
    if type(value) is float and dtype.kind == BFLOAT16_KIND:
        return np.asarray(value, dtype)
    return value


def accumulated(reduce, a, dtype, **kwargs):
    """``reduce(a, **kwargs)`` (``xp.sum``, ``xp.mean``, ``xp.cumsum``, ...) into the
    bfloat16 ``dtype``: ``a`` is cast to ``dtype`` first (PyTorch's ``dtype=``), then
    accumulated in float32 and rounded once."""
    if a.dtype != dtype:
        a = a.astype(dtype)
    return reduce(a, dtype=_FLOAT32, **kwargs).astype(dtype)


def run_in_float32(impl, xp, *args, **kwargs):
    """``impl(xp, *args, **kwargs)`` with its bfloat16 arrays cast to float32 and its float32
    results rounded to bfloat16, as `in_float32` does. For impls that test for bfloat16
    inline after checking their arguments' dtypes (they call this with themselves)."""
    dtype = next(a.dtype for a in _arrays((*args, *kwargs.values())) if a.dtype.kind == BFLOAT16_KIND)
    return _call(impl, xp, args, kwargs, dtype, {})


def in_float32(impl=None, *, writes=()):
    """Decorator: run an op ``impl`` on bfloat16 tensors in float32, rounding its results once.

    When the first argument after ``xp`` is a bfloat16 array and no other
    array argument is of another floating-point dtype, the bfloat16 arrays
    (also inside list arguments and keyword arguments) are cast to float32,
    ``impl`` runs, and its float32 results are rounded to bfloat16. An input
    the impl returns itself (``inplace=True``) gets the result written back
    and is returned; ``writes`` names the parameters the impl updates in
    place without returning them (batch_norm's running statistics), which get
    their new values written back too. Mixed floating dtypes run unchanged,
    so the impl's own dtype checks still refuse them. Other dtypes cost one
    dtype test.

    Example:
        >>> @op("avg_pool2d", kind="conv", shape_rule=rule)
        ... @in_float32
        ... def avg_pool2d(xp, input, kernel_size, ...): ...
    """
    if impl is None:
        return functools.partial(in_float32, writes=writes)
    names = list(inspect.signature(impl).parameters)[1:]
    positions = {name: names.index(name) for name in writes}

    @functools.wraps(impl)
    def run(xp, *args, **kwargs):
        first = args[0] if args else None
        if (getattr(first, "dtype", _FLOAT32).kind != BFLOAT16_KIND or _mixed(args)
                or _mixed(kwargs.values())):
            return impl(xp, *args, **kwargs)
        return _call(impl, xp, args, kwargs, first.dtype, positions)

    return run


def _call(impl, xp, args, kwargs, dtype, writes):
    originals = {}
    wide_args = [_widen_arg(a, originals) for a in args]
    wide_kwargs = {k: _widen_arg(v, originals) for k, v in kwargs.items()}
    out = impl(xp, *wide_args, **wide_kwargs)
    for name, i in writes.items():
        wide = wide_args[i] if i < len(args) else wide_kwargs.get(name)
        if id(wide) in originals:
            originals[id(wide)][...] = wide
    return _restore(out, dtype, originals)


def _arrays(values):
    """The arrays among ``values`` and inside their list or tuple items."""
    for v in values:
        if type(v) in (list, tuple):
            yield from (x for x in v if hasattr(x, "dtype"))
        elif hasattr(v, "dtype"):
            yield v


def _mixed(values):
    """Whether an array of a floating-point dtype other than bfloat16 is among ``values``."""
    return any(a.dtype.kind == "f" for a in _arrays(values))


def _widen_arg(value, originals):
    """``value`` with its bfloat16 arrays (itself, or the items of a list or tuple) cast to
    float32; ``originals`` maps each float32 copy's id to its source."""
    if type(value) in (list, tuple):
        return type(value)(_widen_arg(v, originals) for v in value)
    if getattr(value, "dtype", None) is None or value.dtype.kind != BFLOAT16_KIND:
        return value
    wide = value.astype(_FLOAT32)
    originals[id(wide)] = value
    return wide


def _restore(out, dtype, originals):
    """``out`` with its float32 parts rounded to ``dtype``; a returned (widened) input is
    written back into its source, which is returned instead (an in-place op)."""
    if isinstance(out, (tuple, list)):
        items = [_restore(o, dtype, originals) for o in out]
        if isinstance(out, list):
            return items
        return type(out)(*items) if hasattr(out, "_fields") else tuple(items)
    source = originals.get(id(out))
    if source is not None:
        source[...] = out
        return source
    if hasattr(out, "dtype") and out.dtype == _FLOAT32:
        return out.astype(dtype)
    return out
