"""``maximum`` and ``minimum`` of an array and a number, at the speed of numpy's vector loops.

numpy's SIMD loops for ``maximum``/``minimum`` take two arrays; against a number
(a broadcast scalar) they run element by element: ``maximum(x, 0)`` of a
32x32x8x8 float32 took 21 us, of an 8x64x32x32 one 162 us. ReLU and its relatives
(relu6, the hard activations, one-sided clamp, the compiled numpy backend's ReLU)
meet their bounds as an array instead: a contiguous input as rows of 256 to 16384
elements against one cached row of the number (4.6 us for the first case, nothing
allocated, so in place stays in place), any other layout against a copy of the
number as large as the input (8 and 77 us). The result has the same bits as the
plain call: the input goes first, so NaN and the signs of zeros come out as they did.
"""
import functools

import numpy as np

_MIN_SIZE = 4096
"""Below this many elements numpy's scalar loop is as fast as any of this."""

_ROWS = (16384, 8192, 4096, 2048, 1024, 512, 256)
"""Row lengths a contiguous input is cut into, longest first: each row runs one vector loop
against the cached row of the number, so rows shorter than this pay a call per few elements.
Rows of 16384 (64 KB of float32, in L2) beat 4096 by a third: ReLU of 32x32x8x8 6.8 -> 4.6 us,
of 8x64x32x32 66 -> 49 us, as fast as against a full array of zeros."""

_VECTOR_KINDS = frozenset("iuf")


def maximum_of(xp, a, value, out=None):
    """``xp.maximum(a, value, out=out)``; a ``value`` that is not a Python number goes to that call as it is."""
    return _bounded(xp, xp.maximum, a, value, out)


def minimum_of(xp, a, value, out=None):
    """``xp.minimum(a, value, out=out)``; a ``value`` that is not a Python number goes to that call as it is."""
    return _bounded(xp, xp.minimum, a, value, out)


def _bounded(xp, ufunc, a, value, out):
    if xp is not np or a.size < _MIN_SIZE or not _exact_in(a.dtype, value):
        return ufunc(a, value) if out is None else ufunc(a, value, out=out)
    target = np.empty_like(a) if out is None else out
    length = next((n for n in _ROWS if a.size % n == 0), None)
    if length is not None and a.flags.c_contiguous and target.flags.c_contiguous and target.shape == a.shape:
        row = _row(a.dtype, np.full((), value, a.dtype).tobytes())[:length]
        ufunc(a.reshape(-1, length), row, out=target.reshape(-1, length))
        return target
    bound = np.empty_like(a) if target is a else target
    bound.fill(value)
    return ufunc(a, bound, out=target)


@functools.lru_cache(maxsize=64)
def _row(dtype, bits):
    """A read-only row of ``max(_ROWS)`` copies of the value whose bytes in ``dtype`` are ``bits``
    (keyed by bits, so ``-0.0`` and ``0.0`` get rows of their own)."""
    row = np.full(max(_ROWS), np.frombuffer(bits, dtype)[0], dtype)
    row.flags.writeable = False
    return row


def _exact_in(dtype, value):
    """Whether ``dtype`` has a vector loop and holds the number ``value`` as numpy's own scalar
    conversion would (float16 has no vector loop; an out-of-range value keeps numpy's error)."""
    if dtype.kind not in _VECTOR_KINDS or dtype.itemsize < 4 and dtype.kind == "f":
        return False
    kind = type(value)
    if kind is bool:
        return True
    if kind is int:
        if dtype.kind == "f":
            return abs(value) <= 2 ** 24
        info = np.iinfo(dtype)
        return info.min <= value <= info.max
    return kind is float and dtype.kind == "f" and abs(value) <= float(np.finfo(dtype).max)
