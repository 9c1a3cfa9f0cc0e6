"""The ``numba`` engine of the integer kernels: int8 linear and conv2d as cache-blocked compiled loops.

Registered by ``fxkit/backends/__init__.py`` with
`fxkit.runtime.ops.quantized_ops.register_quantized_engine` and chosen with
``set_quantized_engine("numba")``; numba is imported only then. The results are
bit-identical to the reference engine (tests/quantization/test_int8_kernels.py).

Two product paths, both exact:

- On CPUs with AVX-512 VNNI (where numba compiles for one), `fxkit.backends.numba_int8_vnni`:
  raw bytes, unsigned activations by signed weights through ``vpdpbusd`` in an
  outer-product tile, zero points moved out of the loop into per-channel and
  per-row sums. It is the faster path (2-3x float32 at ResNet-18's and BERT's
  shapes); grouped convolutions and activation zero points beyond a byte keep the
  int16 path.
- Everywhere else, the int16 tiles below.

Where the int16 path's time goes, and why it is laid out this way:

- Both operands are *centred* int16: ``x - x_zp`` and ``w - w_zp``, so the zero
  points cost nothing in the inner loop. The register tile (`_tile`, 4 rows x 4
  output channels, 16 vector accumulators) is LLVM IR written here: 32 int16 of a
  row and of a weight, widened, multiplied, and adjacent products added in pairs,
  which is the pattern LLVM's x86 back end selects as one ``vpmaddwd`` (SSE2,
  AVX2, AVX-512BW), fused with the accumulation into ``vpdpwssd`` on AVX-512 VNNI;
  other CPUs get the same exact arithmetic as plain vector code. It is exact everywhere:
  int16 products fit int32 and so does a pair sum, as no operand is -32768
  (`_supported`). numba's own loops cannot express it: numba widens int32
  arithmetic to int64, and LLVM vectorises the narrowed loop with ``vpmulld`` or
  half-used ``vpdpwssd`` lanes, at or below float32 BLAS speed. LLVM does not select
  the u8 x s8 instructions (``vpdpbusd``, ``vpmaddubsw``) from generic IR (the 4-way
  pattern becomes shuffles and ``vpmaddwd`` at a sixth of the speed): the VNNI path
  calls ``vpdpbusd`` by its intrinsic's name, and ``vpmaddubsw`` saturates on 255 * 127 pairs.
- The weight is packed once per weight array into centred int16 rows padded to
  ``(N rounded up to 4, K rounded up to 32)`` (`_pack`); later calls reuse it after
  an exact, memcmp-speed check that the int8 weight did not change in place.
- Rows are processed in chunks of at most 64 that one thread centres (or
  im2col's, for a convolution: no im2col matrix of the whole batch is ever built)
  into a small int16 buffer that stays in L2 while the weight quads stream past it.
- The tiles of a chunk land in a small int32 block; requantization (gemmlowp's
  fixed-point multiply and rounding shift) then runs channel by channel over it and
  writes the output directly (NCHW for a convolution: no transpose afterwards).

Chunks of rows (and, when there are too few of them to occupy every thread, of
output channels) are spread over numba's threads with ``prange``.
"""
import threading
import weakref

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from fxkit.backends import numba_int8_vnni as vnni
from fxkit.backends.numba_int8_columns import gather_pixel
from fxkit.backends.numba_requantize import write_outputs
from fxkit.runtime.blas_threads import share_blas_threads

share_blas_threads()  # NOTE: before numba's pool starts (see fxkit.runtime.blas_threads)

_JIT = {"cache": True, "nogil": True}
_INT16_LIMIT = 32767  # centred operands stay within +-32767: no pair of products overflows int32
_TILE = 4  # rows x output channels of one register tile
_LANES = 32  # int16 per vector step of the tile (one 512-bit register); rows are padded to a multiple
_CHUNK_BYTES = 1 << 17  # one thread's centred rows (<= 128 KiB: stays in L2 next to the weight quads)


@intrinsic
def _tile(typingctx, a0, a1, a2, a3, b0, b1, b2, b3):
    """The 16 int32 dot products ``a_i . b_j`` (row-major) of four int16 rows ``a`` with four int16
    rows ``b``, all C-contiguous with a length that is a multiple of `_LANES` (the packing pads them).

    Each step loads 32 int16 of every row, sign-extends them to int32, multiplies, and adds the
    even and odd products: ``add(shuffle_even(a * b), shuffle_odd(a * b))`` is ``pmaddwd``."""
    signature = types.UniTuple(types.int32, 16)(a0, a1, a2, a3, b0, b1, b2, b3)

    def codegen(context, builder, sig, args):
        i32 = ir.IntType(32)
        row, wide, half = (ir.VectorType(ir.IntType(16), _LANES), ir.VectorType(i32, _LANES),
                           ir.VectorType(i32, _LANES // 2))
        arrays = [context.make_array(t)(context, builder, v) for t, v in zip(sig.args, args)]
        pointers = [builder.bitcast(a.data, row.as_pointer()) for a in arrays]
        steps = builder.udiv(builder.extract_value(arrays[0].shape, 0), ir.Constant(ir.IntType(64), _LANES))
        sums = [cgutils.alloca_once_value(builder, ir.Constant(half, None)) for _ in range(16)]
        even = ir.Constant(half, list(range(0, _LANES, 2)))
        odd = ir.Constant(half, list(range(1, _LANES, 2)))
        with cgutils.for_range(builder, steps) as loop:
            values = [builder.sext(builder.load(builder.gep(p, [loop.index]), align=2), wide) for p in pointers]
            for i in range(_TILE):
                for j in range(_TILE):
                    product = builder.mul(values[i], values[_TILE + j])
                    pairs = builder.add(builder.shuffle_vector(product, product, even),
                                        builder.shuffle_vector(product, product, odd))
                    slot = sums[_TILE * i + j]
                    builder.store(builder.add(builder.load(slot), pairs), slot)
        total = _sum_lanes(builder, [builder.load(s) for s in sums])
        return context.make_tuple(builder, sig.return_type,
                                  [builder.extract_element(total, ir.Constant(i32, i)) for i in range(16)])

    return signature, codegen


def _sum_lanes(builder, vectors):
    """One vector whose lane ``i`` is the sum of the lanes of ``vectors[i]`` (as many vectors as lanes).

    A tree of pairwise shuffle-and-adds (15 for 16 vectors, where 16 separate reductions take 64):
    combining two vectors that each hold ``s`` sums in ``p`` partial lanes gives one holding ``2 s``
    sums in ``p / 2`` lanes."""
    i32 = ir.IntType(32)
    width = vectors[0].type.count
    partials = width
    while len(vectors) > 1:
        partials //= 2
        sources = width // (2 * partials)  # sums held by each input vector
        low = [side * width + j * 2 * partials + q for side in range(2) for j in range(sources)
               for q in range(partials)]
        mask_low = ir.Constant(ir.VectorType(i32, width), low)
        mask_high = ir.Constant(ir.VectorType(i32, width), [i + partials for i in low])
        vectors = [builder.add(builder.shuffle_vector(a, b, mask_low), builder.shuffle_vector(a, b, mask_high))
                   for a, b in zip(vectors[::2], vectors[1::2])]
    return vectors[0]


@numba.njit(inline="always", **_JIT)
def _chunk_product(rows, m0, count, w, n0, n1, n_out, bias, multiplier, left, right, factor, dequantize,
                   output_zero_point, low, high, pixels, out):
    """The products of the centred ``rows`` (global rows ``m0 .. m0 + count``) with the packed
    channels ``n0 .. n1``, as `write_outputs` stores them into the flat ``out``.

    The tiles land in a small int32 block first; requantization then runs channel by channel
    over it, a loop free of divisions and branches that vectorises."""
    acc = np.empty((n1 - n0, rows.shape[0]), np.int32)
    for n in range(n0, n1, _TILE):
        w0, w1, w2, w3 = w[n], w[n + 1], w[n + 2], w[n + 3]
        for r in range(0, count, _TILE):
            tile = _tile(rows[r], rows[r + 1], rows[r + 2], rows[r + 3], w0, w1, w2, w3)
            for i in range(_TILE):
                for j in range(_TILE):
                    acc[n - n0 + j, r + i] = tile[_TILE * i + j]
    write_outputs(acc, m0, count, n0, n1, n_out, bias, multiplier, left, right, factor, dequantize,
                  output_zero_point, low, high, pixels, out)


@numba.njit(parallel=True, **_JIT)
def _linear_kernel(x, x_zp, w, n_out, bias, multiplier, left, right, factor, dequantize, output_zero_point, low,
                   high, chunk, n_split, out):
    """``out[m, n]`` of `linear` for 2-D ``x``; chunks of ``chunk`` rows times ``n_split`` channel ranges."""
    m_rows, k = x.shape
    n_pad, k_pad = w.shape
    m_chunks = (m_rows + chunk - 1) // chunk
    span = (n_pad // _TILE + n_split - 1) // n_split * _TILE
    for job in prange(m_chunks * n_split):
        mc, nc = job // n_split, job % n_split
        m0 = mc * chunk
        count = min(chunk, m_rows - m0)
        # NOTE: not zeroed: the padding columns meet zero weights, and the padding rows' sums are dropped.
        rows = np.empty(((count + _TILE - 1) // _TILE * _TILE, k_pad), np.int16)
        for r in range(count):
            for i in range(k):
                rows[r, i] = np.int16(np.int32(x[m0 + r, i]) - x_zp)
        _chunk_product(rows, m0, count, w, nc * span, min((nc + 1) * span, n_pad), n_out, bias, multiplier, left,
                       right, factor, dequantize, output_zero_point, low, high, 1, out)


@numba.njit(parallel=True, **_JIT)
def _conv_kernel(x, w, n_out, bias, multiplier, left, right, factor, dequantize, output_zero_point, low, high, chunk,
                 n_split, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, out):
    """`conv2d` of one group on the centred NHWC int16 ``x``: im2col of ``chunk`` output pixels at a
    time into int16 rows (columns ``(ky, kx, channel)``: each tap is one contiguous copy of the
    channels; taps in the padding are 0, the centred zero point), then the requantized product
    written to the flat NCHW ``out`` of ``n_out`` channels."""
    n_images = x.shape[0]
    n_pad, k_pad = w.shape
    pixels = oh * ow
    m_rows = n_images * pixels
    m_chunks = (m_rows + chunk - 1) // chunk
    span = (n_pad // _TILE + n_split - 1) // n_split * _TILE
    for job in prange(m_chunks * n_split):
        mc, nc = job // n_split, job % n_split
        m0 = mc * chunk
        count = min(chunk, m_rows - m0)
        # NOTE: not zeroed: the padding columns meet zero weights, and the padding rows' sums are dropped.
        rows = np.empty(((count + _TILE - 1) // _TILE * _TILE, k_pad), np.int16)
        for r in range(count):
            gather_pixel(x, m0 + r, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, np.int16(0), rows, r)
        _chunk_product(rows, m0, count, w, nc * span, min((nc + 1) * span, n_pad), n_out, bias, multiplier, left,
                       right, factor, dequantize, output_zero_point, low, high, pixels, out)


_SAME_BLOCKS = 64  # ranges of words compared in parallel


@numba.njit(parallel=True, **_JIT)
def _same(a, b):
    """Whether two equally shaped C-contiguous int8/uint8 arrays hold the same bytes.

    NOTE: an OR of XORs of 8-byte words, with no early exit, over ranges spread on the threads: that
    loop vectorises and reads memory at the speed of both cores (BERT's 768x3072 weight: 0.33 ms byte
    by byte, 0.11 ms so); a comparing loop does not vectorise."""
    fa, fb = a.ravel(), b.ravel()
    whole = fa.shape[0] // 8 * 8
    wa, wb = fa[:whole].view(np.uint64), fb[:whole].view(np.uint64)
    span = (wa.shape[0] + _SAME_BLOCKS - 1) // _SAME_BLOCKS
    differ = np.zeros(_SAME_BLOCKS + 1, np.uint64)
    for block in prange(_SAME_BLOCKS):
        bits = np.uint64(0)
        for i in range(block * span, min(wa.shape[0], (block + 1) * span)):
            bits |= wa[i] ^ wb[i]
        differ[block] = bits
    for i in range(whole, fa.shape[0]):
        differ[_SAME_BLOCKS] |= np.uint64(fa[i] ^ fb[i])
    return differ.max() == 0


class _PackCache:
    """Packed weights by weight array: ``id -> (weakref to the array, a copy of its values, packed)``.

    The copy makes reuse exact: a weight changed in place (``load_state_dict`` into a converted
    model, a user's write) no longer matches and is packed again. Entries leave with their array."""

    def __init__(self, pack):
        self._pack = pack
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
        packed = self._pack(weight, weight_zero_point)
        try:
            ref = weakref.ref(weight, lambda _, key=key: self._entries.pop(key, None))
        except TypeError:  # an array type without weak references: pack each call
            return packed
        with self._lock:
            self._entries[key] = (ref, weight.copy(), weight_zero_point.copy(), packed)
        return packed


def _pack(weight, weight_zero_point):
    """``(N, K)`` int8/uint8 weights, or a convolution's ``(N, C, kH, kW)`` flattened as ``(ky, kx, c)``
    (`_conv_kernel`'s columns), as centred int16 rows ``w - w_zp`` zero-padded to ``(N, K)`` rounded
    up to ``(4, 32)``: the layout `_tile` streams."""
    weight2d = (weight if weight.ndim == 2 else weight.transpose(0, 2, 3, 1)).reshape(weight.shape[0], -1)
    n, k = weight2d.shape
    packed = vnni.aligned_empty((-(-n // _TILE) * _TILE, -(-k // _LANES) * _LANES), np.int16)
    packed[...] = 0
    np.subtract(weight2d, weight_zero_point.astype(np.int16)[:, None], out=packed[:n, :k], dtype=np.int16)
    return packed


_PACKED = _PackCache(_pack)
_PACKED_BYTES = _PackCache(vnni.pack)
_VNNI = vnni.available()
"""Whether products run `numba_int8_vnni`'s byte tiles (else the int16 tiles, exact on any x86-64)."""


def _centred_fit(dtype, zero_points):
    """Whether every ``v - zp`` of this dtype's values fits +-32767 (so `_tile` is exact)."""
    info = np.iinfo(dtype)
    zp = np.asarray(zero_points, np.int64)
    return bool(zp.size == 0 or (info.max - zp.min() <= _INT16_LIMIT and zp.max() - info.min <= _INT16_LIMIT))


def _supported(x_dtype, input_zero_point, weight_dtype, weight_zero_point):
    """Whether this engine's int16 operands hold; otherwise the reference engine runs."""
    return _centred_fit(x_dtype, [input_zero_point]) and _centred_fit(weight_dtype, weight_zero_point)


def _epilogue(bias, multiplier, shift, dequantize):
    """The per-channel vectors of the output pass: bias, multiplier and the shifts split in two (int64),
    and the real factor the pair encodes (float64, for float outputs; zeros, unread, otherwise: it
    took 8 of the 66 us of a 512->1000 layer on 8 rows)."""
    from fxkit.runtime.ops.quantized_ops import real_factor

    shift = shift.astype(np.int64)
    factor = real_factor(np, multiplier, shift) if dequantize else np.zeros(len(shift))
    return bias.astype(np.int64), multiplier.astype(np.int64), np.maximum(shift, 0), np.maximum(-shift, 0), factor


def _schedule(m_rows, k_pad, n_pad):
    """Rows per chunk (a multiple of 4 whose int16 rows fit `_CHUNK_BYTES`) and how many channel
    ranges split each chunk so that every thread has work."""
    chunk = max(_TILE, min(64, _CHUNK_BYTES // (2 * k_pad) // _TILE * _TILE))
    m_chunks = -(-m_rows // chunk)
    threads = numba.get_num_threads()
    n_split = max(1, min(n_pad // _TILE, -(-threads // m_chunks)))
    return chunk, n_split


def linear(x, weight, bias, input_zero_point, weight_zero_point, multiplier, shift, output_zero_point, low, high,
           dtype):
    """The integer linear layer on 2-D ``x`` (arguments as `quantized_ops.reference_linear`, without ``xp``)."""
    vnni_path = _VNNI
    if not vnni_path and not _supported(x.dtype, input_zero_point, weight.dtype, weight_zero_point):
        from fxkit.runtime.ops.quantized_ops import reference_linear
        return reference_linear(np, x, weight, bias, input_zero_point, weight_zero_point, multiplier, shift,
                                output_zero_point, low, high, dtype)
    m_rows, n_out = x.shape[0], weight.shape[0]
    out = np.empty((m_rows, n_out), dtype)
    if not m_rows:
        return out
    x, weight = np.ascontiguousarray(x), np.ascontiguousarray(weight)
    outputs = (out.dtype == np.float32, output_zero_point, low, high)
    vectors = _epilogue(bias, multiplier, shift, outputs[0])
    if vnni_path:
        panels, n_padded, column_sums, w_zp = _PACKED_BYTES.get(weight, weight_zero_point)
        chunk, n_split = vnni.schedule(m_rows, x.shape[1], n_padded)
        flip = _unsigned_flip(x.dtype)
        constant = vnni.constants(vectors[0], np.int64(input_zero_point) + flip, x.shape[1], column_sums, w_zp)
        vnni.linear_kernel(x, flip, panels, n_padded, constant, w_zp, n_out, *vectors[1:], *outputs, chunk, n_split,
                           out.ravel())
    else:
        packed = _PACKED.get(weight, weight_zero_point)
        chunk, n_split = _schedule(m_rows, packed.shape[1], packed.shape[0])
        _linear_kernel(x, np.int32(input_zero_point), packed, n_out, *vectors, *outputs, chunk, n_split, out.ravel())
    return out


def _unsigned_flip(dtype):
    """The top bit for int8 (XORing it adds 128: the bytes become uint8), 0 for uint8."""
    return np.uint8(vnni.TOP_BIT if dtype == np.int8 else 0)


def conv2d(x, weight, bias, input_zero_point, weight_zero_point, multiplier, shift, output_zero_point, low, high,
           dtype, stride, padding, dilation, groups):
    """The integer convolution of a batched ``x`` (arguments as `quantized_ops.reference_conv2d`, without
    ``xp``): per group, im2col by chunks of output pixels and the requantizing product into NCHW."""
    flip = _unsigned_flip(x.dtype)
    # NOTE: the byte tiles pad with the zero point as an unsigned byte; grouped convs keep the int16 tiles.
    vnni_path = _VNNI and groups == 1 and 0 <= int(input_zero_point) + int(flip) <= 255
    if not vnni_path and not _supported(x.dtype, input_zero_point, weight.dtype, weight_zero_point):
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
    vectors = _epilogue(bias, multiplier, shift, out.dtype == np.float32)
    geometry = (kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)
    if vnni_path:
        if out.size:
            panels, n_padded, column_sums, w_zp = _PACKED_BYTES.get(weight, weight_zero_point)
            xb = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).view(np.uint8)  # channels last: a copy
            np.bitwise_xor(xb, flip, out=xb)
            chunk, n_split = vnni.schedule(n * oh * ow, kh * kw * cg, n_padded)
            x_zp = np.int64(input_zero_point) + flip
            constant = vnni.constants(vectors[0], x_zp, kh * kw * cg, column_sums, w_zp)
            vnni.conv_kernel(xb, x_zp, panels, n_padded, constant, w_zp, oc, *vectors[1:], out.dtype == np.float32,
                             output_zero_point, low, high, chunk, n_split, *geometry, out.ravel())
        return out.reshape(n, oc, oh, ow)
    packed = _PACKED.get(weight, weight_zero_point)
    for g in range(groups):
        channels = slice(g * per_group, (g + 1) * per_group)
        # NOTE: the tile reads weight rows four at a time: a group's rows are padded to a multiple of 4.
        group_w = packed if groups == 1 else _pad_rows(packed[channels])
        xg = np.empty((n, h, w, cg), np.int16)  # the group's input, centred, channels last
        np.subtract(x[:, g * cg:(g + 1) * cg].transpose(0, 2, 3, 1), np.int16(input_zero_point), out=xg,
                    dtype=np.int16)
        target = out if groups == 1 else np.empty((n, per_group, oh * ow), dtype)
        if target.size:
            chunk, n_split = _schedule(n * oh * ow, group_w.shape[1], group_w.shape[0])
            _conv_kernel(xg, group_w, per_group, *(v[channels] for v in vectors), out.dtype == np.float32,
                         output_zero_point, low, high, chunk, n_split, *geometry, target.ravel())
        if groups != 1:
            out[:, channels] = target
    return out.reshape(n, oc, oh, ow)


def _pad_rows(rows):
    """``rows`` with zero rows appended up to a multiple of the tile height."""
    padded = np.zeros((-(-rows.shape[0] // _TILE) * _TILE, rows.shape[1]), rows.dtype)
    padded[:rows.shape[0]] = rows
    return padded


KERNELS = {"linear": linear, "conv2d": conv2d}
