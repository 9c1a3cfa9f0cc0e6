"""The ``numba`` engine of the integer kernels: int8 linear and conv2d as cache-blocked compiled loops.

Registered by ``fxkit/backends/__init__.py`` with
`fxkit.runtime.ops.quantized_ops.register_quantized_engine` and chosen with
``set_quantized_engine("numba")``; numba is imported only then. The results are
bit-identical to the reference engine (tests/quantization/test_int8_kernels.py).

Where the time goes, and why it is laid out this way:

- Activations are uint8 (int8 ones flipped by +128, their zero point with them) and
  weights centred int16 ``w - w_zp``. A zero-extended byte times an int16 summed in
  int32 is the pattern LLVM turns into ``vpdpwssd`` (AVX-512 VNNI) or ``vpmaddwd``
  + ``vpaddd`` (AVX2, AVX-512BW) on int32 lanes whose upper halves are zero: exact
  on every x86-64 CPU (no saturation anywhere), 16 multiply-adds per 512-bit
  instruction. Two int16 operands would compile to ``vpmulld`` (4x slower), and the
  u8 x s8 instructions (``vpdpbusd``, ``vpmaddubsw``) LLVM never forms from loops
  (``vpmaddubsw`` would also saturate on 255 * 127 pairs). The input's zero point
  is one constant per channel, ``x_zp * sum(w - w_zp)``, folded with the bias.
- The weight is packed once per weight array into ``(N padded to 4, K padded to
  32)`` centred int16 rows (`_pack`); later calls reuse it after an
  exact, memcmp-speed check that the int8 weight did not change in place.
- The product is register-tiled 4 rows x 4 output channels (`_tile`): 16 int32
  vector accumulators, each row load feeding four multiply-adds. Rows are
  processed in chunks of at most 64 that one thread centres (or im2col's, for a
  convolution: no im2col matrix of the whole batch is ever built) into a small
  uint8 buffer that stays in L2 while every weight quad streams past it.
- Requantization (gemmlowp's fixed-point multiply and rounding shift) runs on
  each finished 4x4 tile, written straight to the output (NCHW for a convolution:
  no transpose afterwards).

Chunks of rows (and, when there are too few of them to occupy every thread, of
output channels) are spread over numba's threads with ``prange``.
"""
import threading
import weakref

import numba
import numpy as np
from numba import prange

_JIT = {"cache": True, "nogil": True}
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT16_LIMIT = 32767
_TILE = 4  # rows x output channels of one register tile
_K_ALIGN = 32  # int16 lanes of a 512-bit vector: rows padded so the inner loop has no remainder
_CHUNK_BYTES = 1 << 17  # one thread's uint8 rows (<= 128 KiB: stays in L2 next to the weight quads)


@numba.njit(inline="always", **_JIT)
def _requantize(acc, multiplier, left, right, output_zero_point, low, high):
    """gemmlowp's ``MultiplyByQuantizedMultiplier`` of one int32 accumulator, then zero point and
    clamp; written with selects, not branches."""
    x = np.int64(acc) << left
    x = min(max(x, _INT32_MIN), _INT32_MAX)
    product = x * multiplier
    product += (1 << 30) if product >= 0 else (1 - (1 << 30))
    top = (product >> 31) if product >= 0 else -((-product) >> 31)  # C division truncates toward zero
    mask = (np.int64(1) << right) - 1
    threshold = (mask >> 1) + (top < 0)
    out = (top >> right) + ((top & mask) > threshold) + output_zero_point
    return min(max(out, low), high)


@numba.njit(inline="always", **_JIT)
def _tile(a0, a1, a2, a3, b0, b1, b2, b3):
    """The 16 int32 dot products of four uint8 rows ``a`` with four int16 rows ``b``.

    NOTE: every sum is cast back to int32 at once: numba widens int32 arithmetic to int64,
    and only int32 accumulators let LLVM use the int16 multiply-add instructions."""
    c00 = c01 = c02 = c03 = c10 = c11 = c12 = c13 = np.int32(0)
    c20 = c21 = c22 = c23 = c30 = c31 = c32 = c33 = np.int32(0)
    for k in range(a0.shape[0]):
        w0, w1, w2, w3 = np.int32(b0[k]), np.int32(b1[k]), np.int32(b2[k]), np.int32(b3[k])
        v = np.int32(a0[k])
        c00, c01 = np.int32(c00 + v * w0), np.int32(c01 + v * w1)
        c02, c03 = np.int32(c02 + v * w2), np.int32(c03 + v * w3)
        v = np.int32(a1[k])
        c10, c11 = np.int32(c10 + v * w0), np.int32(c11 + v * w1)
        c12, c13 = np.int32(c12 + v * w2), np.int32(c13 + v * w3)
        v = np.int32(a2[k])
        c20, c21 = np.int32(c20 + v * w0), np.int32(c21 + v * w1)
        c22, c23 = np.int32(c22 + v * w2), np.int32(c23 + v * w3)
        v = np.int32(a3[k])
        c30, c31 = np.int32(c30 + v * w0), np.int32(c31 + v * w1)
        c32, c33 = np.int32(c32 + v * w2), np.int32(c33 + v * w3)
    return ((c00, c01, c02, c03), (c10, c11, c12, c13), (c20, c21, c22, c23), (c30, c31, c32, c33))


@numba.njit(inline="always", **_JIT)
def _chunk_product(rows, m0, count, w, n0, n1, n_out, bias, multiplier, left, right, output_zero_point, low,
                   high, pixels, out):
    """Requantized products of the uint8 ``rows`` (global rows ``m0 .. m0 + count``) with the
    packed channels ``n0 .. n1``, written to the flat ``out``: row ``m`` and channel ``n`` go to
    ``(m // pixels, n, m % pixels)`` of an ``(images, n_out, pixels)`` array (pixels 1: ``(m, n)``)."""
    for n in range(n0, n1, _TILE):
        w0, w1, w2, w3 = w[n], w[n + 1], w[n + 2], w[n + 3]
        for r in range(0, count, _TILE):
            tile = _tile(rows[r], rows[r + 1], rows[r + 2], rows[r + 3], w0, w1, w2, w3)
            for i in range(_TILE):
                m = m0 + r + i
                if r + i < count:
                    base = (m // pixels) * n_out * pixels + m % pixels
                    for j in range(_TILE):
                        c = n + j
                        if c < n_out:
                            total = np.int32(np.int64(tile[i][j]) + bias[c])  # int32 wrap, as the reference
                            out[base + c * pixels] = _requantize(total, multiplier[c], left[c], right[c],
                                                                 output_zero_point, low, high)


@numba.njit(parallel=True, **_JIT)
def _linear_kernel(x, flip, w, n_out, bias, multiplier, left, right, output_zero_point, low, high, chunk,
                   n_split, out):
    """``out[m, n]`` of `linear` for 2-D ``x``; chunks of ``chunk`` rows times ``n_split`` channel ranges."""
    m_rows, k = x.shape
    n_pad, k_pad = w.shape
    m_chunks = (m_rows + chunk - 1) // chunk
    span = (n_pad // _TILE + n_split - 1) // n_split * _TILE
    for job in prange(m_chunks * n_split):
        mc, nc = job // n_split, job % n_split
        m0 = mc * chunk
        count = min(chunk, m_rows - m0)
        rows = np.zeros(((count + _TILE - 1) // _TILE * _TILE, k_pad), np.uint8)
        for r in range(count):
            xr, dst = x[m0 + r], rows[r]
            for i in range(k):
                dst[i] = np.uint8(xr[i] ^ flip)
        _chunk_product(rows, m0, count, w, nc * span, min((nc + 1) * span, n_pad), n_out, bias, multiplier, left,
                       right, output_zero_point, low, high, 1, out)


@numba.njit(parallel=True, **_JIT)
def _conv_kernel(x, flip, pad_value, w, n_out, bias, multiplier, left, right, output_zero_point, low, high, chunk, n_split,
                 kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, out):
    """`conv2d` of one group: im2col of ``chunk`` output pixels at a time into uint8 rows
    (columns ``(channel, ky, kx)``; taps in the padding read the zero point), then the
    requantized product written to the flat NCHW ``out`` of ``n_out`` channels."""
    n_images, channels, h, width = x.shape
    n_pad, k_pad = w.shape
    pixels = oh * ow
    m_rows = n_images * pixels
    m_chunks = (m_rows + chunk - 1) // chunk
    span = (n_pad // _TILE + n_split - 1) // n_split * _TILE
    for job in prange(m_chunks * n_split):
        mc, nc = job // n_split, job % n_split
        m0 = mc * chunk
        count = min(chunk, m_rows - m0)
        rows = np.zeros(((count + _TILE - 1) // _TILE * _TILE, k_pad), np.uint8)
        for r in range(count):
            m = m0 + r
            image, pixel = m // pixels, m % pixels
            oy, ox = pixel // ow, pixel % ow
            dst = rows[r]
            col = 0
            for c in range(channels):
                plane = x[image, c]
                for i in range(kh):
                    y = oy * sh - ph + i * dh
                    inside = 0 <= y < h
                    for j in range(kw):
                        xx = ox * sw - pw + j * dw
                        dst[col] = np.uint8(plane[y, xx] ^ flip) if inside and 0 <= xx < width else pad_value
                        col += 1
        _chunk_product(rows, m0, count, w, nc * span, min((nc + 1) * span, n_pad), n_out, bias, multiplier, left,
                       right, output_zero_point, low, high, pixels, out)


@numba.njit(**_JIT)
def _same(a, b):
    """Whether two equally shaped C-contiguous int8/uint8 arrays hold the same bytes (early exit)."""
    fa, fb = a.ravel(), b.ravel()
    for i in range(fa.shape[0]):
        if fa[i] != fb[i]:
            return False
    return True


class _PackCache:
    """Packed weights by weight array: ``id -> (weakref to the array, a copy of its values, packed)``.

    The copy makes reuse exact: a weight changed in place (``load_state_dict`` into a converted
    model, a user's write) no longer matches and is packed again. Entries leave with their array."""

    def __init__(self):
        self._entries = {}
        self._lock = threading.Lock()

    def get(self, weight, weight_zero_point):
        key = id(weight)
        entry = self._entries.get(key)
        if entry is not None:
            ref, values, zero_points, packed = entry
            if (ref() is weight and values.shape == weight.shape and values.dtype == weight.dtype
                    and np.array_equal(zero_points, weight_zero_point) and _same(values, weight)):
                return packed
        packed = _pack(weight, weight_zero_point)
        try:
            ref = weakref.ref(weight, lambda _, key=key: self._entries.pop(key, None))
        except TypeError:  # an array type without weak references: pack each call
            return packed
        with self._lock:
            self._entries[key] = (ref, weight.copy(), weight_zero_point.copy(), packed)
        return packed


def _pack(weight, weight_zero_point):
    """``(N, ...)`` int8/uint8 weights (a convolution's flattened per output channel) as centred int16
    rows ``w - w_zp`` zero-padded to ``(N, K)`` rounded up to ``(4, 32)`` (the layout the tile loop
    streams), and each row's int64 sum (the input zero point's term)."""
    weight2d = weight.reshape(weight.shape[0], -1)
    n, k = weight2d.shape
    packed = np.zeros((-(-n // _TILE) * _TILE, -(-k // _K_ALIGN) * _K_ALIGN), np.int16)
    np.subtract(weight2d, weight_zero_point.astype(np.int16)[:, None], out=packed[:n, :k], dtype=np.int16)
    return packed, packed[:n].sum(axis=1, dtype=np.int64)


_PACKED = _PackCache()


def _supported(x_dtype, input_zero_point, weight_zero_point):
    """Whether this engine's operands hold: the uint8 input zero point (int8 inputs are flipped by
    +128) is a byte and every ``w - w_zp`` fits int16; otherwise the reference engine runs."""
    shifted = input_zero_point + (128 if x_dtype == np.int8 else 0)
    w_zp = np.asarray(weight_zero_point, np.int64)
    return 0 <= shifted <= 255 and (w_zp.size == 0 or (w_zp.min() >= -32767 + 255 and w_zp.max() <= 32767 - 255))


def _epilogue(x_dtype, input_zero_point, bias, row_sums, multiplier, shift):
    """The int64 vectors of `_chunk_product`: the per-channel constant ``bias - x_zp * sum(w - w_zp)``
    (uint8 zero point) and the shifts split in two."""
    shifted = input_zero_point + (128 if x_dtype == np.int8 else 0)
    constant = bias.astype(np.int64) - shifted * row_sums
    shift = shift.astype(np.int64)
    return constant, multiplier.astype(np.int64), np.maximum(shift, 0), np.maximum(-shift, 0)


def _flip(x_dtype):
    return np.int64(0x80 if x_dtype == np.int8 else 0)


def _schedule(m_rows, k_pad, n_pad):
    """Rows per chunk (a multiple of 4 whose uint8 rows fit `_CHUNK_BYTES`) and how many channel
    ranges split each chunk so that every thread has work."""
    chunk = max(_TILE, min(64, _CHUNK_BYTES // k_pad // _TILE * _TILE))
    m_chunks = -(-m_rows // chunk)
    threads = numba.get_num_threads()
    n_split = max(1, min(n_pad // _TILE, -(-threads // m_chunks)))
    return chunk, n_split


def linear(x, weight, bias, input_zero_point, weight_zero_point, multiplier, shift, output_zero_point, low, high,
           dtype):
    """The integer linear layer on 2-D ``x`` (arguments as `quantized_ops.reference_linear`, without ``xp``)."""
    if not _supported(x.dtype, input_zero_point, weight_zero_point):
        from fxkit.runtime.ops.quantized_ops import reference_linear
        return reference_linear(np, x, weight, bias, input_zero_point, weight_zero_point, multiplier, shift,
                                output_zero_point, low, high, dtype)
    packed, row_sums = _PACKED.get(np.ascontiguousarray(weight), weight_zero_point)
    m_rows, n_out = x.shape[0], weight.shape[0]
    out = np.empty((m_rows, n_out), dtype)
    if m_rows:
        chunk, n_split = _schedule(m_rows, packed.shape[1], packed.shape[0])
        _linear_kernel(np.ascontiguousarray(x), _flip(x.dtype), packed, n_out,
                       *_epilogue(x.dtype, input_zero_point, bias, row_sums, multiplier, shift), output_zero_point,
                       low, high, chunk, n_split, out.ravel())
    return out


def conv2d(x, weight, bias, input_zero_point, weight_zero_point, multiplier, shift, output_zero_point, low, high,
           dtype, stride, padding, dilation, groups):
    """The integer convolution of a batched ``x`` (arguments as `quantized_ops.reference_conv2d`, without
    ``xp``): per group, im2col by chunks of output pixels and the requantizing product into NCHW."""
    if not _supported(x.dtype, input_zero_point, weight_zero_point):
        from fxkit.runtime.ops.quantized_ops import reference_conv2d
        return reference_conv2d(np, x, weight, bias, input_zero_point, weight_zero_point, multiplier, shift,
                                output_zero_point, low, high, dtype, stride, padding, dilation, groups)
    n, c, h, w = x.shape
    oc, cg, kh, kw = weight.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    weight = np.ascontiguousarray(weight)
    per_group = oc // groups
    out = np.empty((n, oc, oh * ow), dtype)
    packed, row_sums = _PACKED.get(weight, weight_zero_point)
    vectors = _epilogue(x.dtype, input_zero_point, bias, row_sums, multiplier, shift)
    pad_value = np.uint8(input_zero_point + (128 if x.dtype == np.int8 else 0))
    for g in range(groups):
        channels = slice(g * per_group, (g + 1) * per_group)
        # NOTE: a group's channels start at a multiple of 4 only when per_group is one; otherwise
        # the group's rows are repacked (zero-padded to 4) from the packed whole.
        group_w = packed if groups == 1 else _pad_rows(packed[channels])
        xg = np.ascontiguousarray(x[:, g * cg:(g + 1) * cg])
        target = out if groups == 1 else np.empty((n, per_group, oh * ow), dtype)
        if target.size:
            chunk, n_split = _schedule(n * oh * ow, group_w.shape[1], group_w.shape[0])
            _conv_kernel(xg, _flip(x.dtype), pad_value, group_w, per_group, *(v[channels] for v in vectors),
                         output_zero_point, low, high, chunk, n_split, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow,
                         target.ravel())
        if groups != 1:
            out[:, channels] = target
    return out.reshape(n, oc, oh, ow)


def _pad_rows(rows):
    """``rows`` with zero rows appended up to a multiple of the tile height."""
    padded = np.zeros((-(-rows.shape[0] // _TILE) * _TILE, rows.shape[1]), rows.dtype)
    padded[:rows.shape[0]] = rows
    return padded


KERNELS = {"linear": linear, "conv2d": conv2d}
