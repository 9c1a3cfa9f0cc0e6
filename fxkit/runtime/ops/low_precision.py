"""bfloat16: computed in float32 and rounded once at the end, as PyTorch does.

ml_dtypes gives numpy a bfloat16 dtype whose elementwise ufuncs compute in
float32 and round each result, which is what PyTorch does for one elementwise
op. Anything more needs help, because with it

- ``np.matmul`` has no bfloat16 loop (it returns float32, off BLAS), and
  neither has ``np.clip``; ``np.einsum`` refuses the dtype;
- Python floats are not weak scalars: ``bf16_array * 0.5`` is float32;
- reductions accumulate in bfloat16 (the sum of 10000 ones is 256);
- an op made of several numpy steps rounds after every step.

PyTorch computes such ops in float32 (its "opmath" type) and rounds the
result once. So do fxkit's: an impl tests its input for bfloat16 inline, after
checking its arguments (``if x.dtype.kind == BFLOAT16_KIND``: one attribute
test, so the float32, float16 and float64 paths run as before), and then
reruns itself through `run_in_float32`; reductions use `accumulated`.

Example:
    >>> def conv_like(xp, x, weight):
    ...     check(x, weight)
    ...     if x.dtype.kind == BFLOAT16_KIND:
    ...         return run_in_float32(conv_like, xp, x, weight)
    ...     return compute(xp, x, weight)
"""
import numpy as np

# NOTE: bfloat16 is the only numpy dtype of kind "V" (void) that fxkit accepts
# (`dtypes.from_numpy` refuses the others), so the kind alone identifies it.
BFLOAT16_KIND = "V"
_FLOAT32 = np.dtype(np.float32)


def widen(a):
    """``a`` as float32 when it is a bfloat16 array; anything else unchanged."""
    dtype = getattr(a, "dtype", None)
    return a.astype(_FLOAT32) if dtype is not None and dtype.kind == BFLOAT16_KIND else a


def scalar(value, dtype):
    """A Python float as a 0-d array of the bfloat16 ``dtype``, so numpy does not read it as
    float64 and upcast the bfloat16 operand; other values and dtypes unchanged."""
    if type(value) is float and dtype.kind == BFLOAT16_KIND:
        return np.asarray(value, dtype)
    return value


def rounded(value, dtype):
    """A Python number rounded to the bfloat16 ``dtype``, as PyTorch converts a scalar
    argument such as ``alpha`` to the tensor's dtype."""
    return float(np.asarray(value, dtype))


def accumulated(reduce, a, dtype, **kwargs):
    """``reduce(a, **kwargs)`` (``xp.sum``, ``xp.mean``, ``xp.cumsum``, ...) into the
    bfloat16 ``dtype``: ``a`` is cast to ``dtype`` first (PyTorch's ``dtype=``), then
    accumulated in float32 and rounded once."""
    if a.dtype != dtype:
        a = a.astype(dtype)
    return reduce(a, dtype=_FLOAT32, **kwargs).astype(dtype)


def run_in_float32(impl, xp, *args, **kwargs):
    """``impl(xp, *args, **kwargs)`` with its bfloat16 array arguments cast to float32 and its
    float32 results rounded to bfloat16.

    The caller has checked the arguments' dtypes: an impl passes itself after refusing
    the mixes it refuses, so the rerun sees float32 where it saw bfloat16.
    """
    dtype = next(v.dtype for v in (*args, *kwargs.values())
                 if getattr(v, "dtype", None) is not None and v.dtype.kind == BFLOAT16_KIND)
    out = impl(xp, *[widen(a) for a in args], **{k: widen(v) for k, v in kwargs.items()})
    # NOTE: only float32 results are rounded; any other dtype is the impl's own choice.
    return out.astype(dtype) if getattr(out, "dtype", None) == _FLOAT32 else out
