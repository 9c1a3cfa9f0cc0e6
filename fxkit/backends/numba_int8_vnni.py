"""The numba int8 engine's products on CPUs with AVX-512 VNNI: unsigned by signed bytes, four at a time.

``vpdpbusd`` multiplies 64 unsigned bytes by 64 signed bytes and adds each four
adjacent products into one of 16 int32 lanes: 64 multiply-adds an instruction,
twice the int16 path's ``vpdpwssd`` (`fxkit.backends.numba_int8`), on operands
half the size. LLVM does not select it from generic IR, so `_make_tile` calls
the intrinsic ``llvm.x86.avx512.vpdpbusd.512`` by name; this path is taken
only where `available` says numba compiles for such a CPU, and the int16 path
(exact on every x86-64) runs elsewhere.

The register tile is an outer product, as BLAS kernels are: 4 rows times one
weight panel of up to 64 channels. Per step it broadcasts 4 bytes of each row,
loads 4 bytes of each of the panel's channels (4 vectors), and updates 16
accumulators, each holding 16 channels of one row; no horizontal sums, and the
accumulators are stored as they are. One thread ran 461 G multiply-adds a
second (768x768 weights, 96 rows) against the int16 path's ~180 and float32
BLAS's ~80.

Operands are raw bytes, so zero points move out of the loop:
``sum (x - zx)(w - zw) = sum x w - zx sum w - zw sum x + K zx zw``. ``sum w`` per
channel is packed with the weight; ``sum x`` per row is taken only when a weight
zero point is not 0 (per-channel symmetric weights: never). int8 activations
become unsigned by flipping the top bit (``x + 128``, zero point ``+ 128``);
uint8 weights become signed the same way. Every term wraps modulo 2**32, as
the int32 accumulator of the reference engine does, so results are bit-identical.
"""
import numba
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils, config
from numba.extending import intrinsic

from fxkit.backends.numba_int8_columns import gather_pixel
from fxkit.backends.numba_requantize import requantize

_JIT = {"cache": True, "nogil": True}
_ROWS = 4  # rows of one register tile
_LANES = 16  # int32 channels of one vector
_PANEL = 4 * _LANES  # channels of one weight panel: 4 rows x 4 vectors = 16 accumulators
_QUAD = 4  # bytes each lane sums per instruction
_CHUNK_BYTES = 1 << 16  # one thread's rows of bytes (64 KiB: in L2 beside a 48 KiB panel)
TOP_BIT = 0x80
_LINE = 64  # bytes of a cache line


def available():
    """Whether numba compiles for a CPU with AVX-512 VNNI (the host's, or ``NUMBA_CPU_FEATURES``)."""
    if config.CPU_FEATURES:
        return "+avx512vnni" in config.CPU_FEATURES.split(",")
    if config.CPU_NAME not in (None, "host"):
        return False
    features = llvm.get_host_cpu_features()
    return all(features.get(name, False) for name in ("avx512f", "avx512bw", "avx512vnni"))


def _make_tile(vectors):
    """The tile intrinsic for a panel of ``vectors`` x 16 channels: ``tile(rows, r, panels, offset,
    acc, c)`` adds nothing, it sets ``acc[r + i, c + j] = rows[r + i] . channel j`` for ``i < 4``, where
    the panel's bytes start at ``panels[offset]``, laid out ``(quad, channel, 4 bytes)``."""

    @intrinsic
    def tile(typingctx, rows, row, panels, offset, acc, column):
        signature = types.void(rows, row, panels, offset, acc, column)

        def codegen(context, builder, sig, args):
            i32, i64 = ir.IntType(32), ir.IntType(64)
            vector = ir.VectorType(i32, _LANES)
            dot = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector] * 3),
                                                 "llvm.x86.avx512.vpdpbusd.512")
            rows_array = context.make_array(sig.args[0])(context, builder, args[0])
            panels_array = context.make_array(sig.args[2])(context, builder, args[2])
            acc_array = context.make_array(sig.args[4])(context, builder, args[4])
            first_row, start, first_column = (context.cast(builder, args[i], sig.args[i], types.int64)
                                              for i in (1, 3, 5))
            row_bytes = builder.extract_value(rows_array.shape, 1)
            quads = builder.udiv(row_bytes, ir.Constant(i64, _QUAD))
            row_words = [builder.bitcast(builder.gep(rows_array.data, [
                builder.mul(builder.add(first_row, ir.Constant(i64, i)), row_bytes)]), i32.as_pointer())
                for i in range(_ROWS)]
            weights = builder.bitcast(builder.gep(panels_array.data, [start]), vector.as_pointer())
            sums = [[cgutils.alloca_once_value(builder, ir.Constant(vector, None)) for _ in range(vectors)]
                    for _ in range(_ROWS)]
            everywhere = ir.Constant(ir.VectorType(i32, _LANES), [0] * _LANES)
            with cgutils.for_range(builder, quads) as loop:
                step = builder.mul(loop.index, ir.Constant(i64, vectors))
                panel = [builder.load(builder.gep(weights, [builder.add(step, ir.Constant(i64, v))]), align=1)
                         for v in range(vectors)]
                for i in range(_ROWS):
                    word = builder.load(builder.gep(row_words[i], [loop.index]), align=1)
                    broadcast = builder.shuffle_vector(
                        builder.insert_element(ir.Constant(vector, ir.Undefined), word, ir.Constant(i32, 0)),
                        ir.Constant(vector, ir.Undefined), everywhere)
                    for v in range(vectors):
                        builder.store(builder.call(dot, [builder.load(sums[i][v]), broadcast, panel[v]]), sums[i][v])
            width = builder.extract_value(acc_array.shape, 1)
            for i in range(_ROWS):
                base = builder.add(builder.mul(builder.add(first_row, ir.Constant(i64, i)), width), first_column)
                for v in range(vectors):
                    target = builder.gep(acc_array.data, [builder.add(base, ir.Constant(i64, _LANES * v))])
                    builder.store(builder.load(sums[i][v]), builder.bitcast(target, vector.as_pointer()), align=4)
            return context.get_dummy_value()

        return signature, codegen

    return tile


_TILE_1, _TILE_2, _TILE_3, _TILE_4 = (_make_tile(v) for v in (1, 2, 3, 4))


@numba.njit(inline="always", **_JIT)
def _panel_tile(rows, row, panels, offset, vectors, acc, column):
    if vectors == 4:
        _TILE_4(rows, row, panels, offset, acc, column)
    elif vectors == 3:
        _TILE_3(rows, row, panels, offset, acc, column)
    elif vectors == 2:
        _TILE_2(rows, row, panels, offset, acc, column)
    else:
        _TILE_1(rows, row, panels, offset, acc, column)


@numba.njit(inline="always", **_JIT)
def _chunk_product(rows, count, panels, n_padded, p0, p1, constant, w_zp, m0, n_out, multiplier, left, right, factor,
                   dequantize, output_zero_point, low, high, pixels, out):
    """The products of the byte ``rows`` (global rows ``m0 .. m0 + count``) with panels ``p0 .. p1``,
    stored into the flat ``out`` as `_write_panel` does.

    NOTE: one panel at a time, tiles then output: its (rows, 64) int32 block stays in L1."""
    quads = rows.shape[1] // _QUAD
    row_sums = np.zeros(count, np.int64)
    if np.any(w_zp[p0 * _PANEL:min(p1 * _PANEL, n_padded)] != 0):
        for r in range(count):
            total = 0
            for i in range(rows.shape[1]):
                total += np.int64(rows[r, i])
            row_sums[r] = total
    acc = np.empty((rows.shape[0], _PANEL), np.int32)
    block = np.empty((count if pixels > 1 else 0, _PANEL), out.dtype)
    for p in range(p0, p1):
        n0, n1 = p * _PANEL, min((p + 1) * _PANEL, n_padded)
        for r in range(0, count, _ROWS):
            _panel_tile(rows, r, panels, n0 * quads * _QUAD, (n1 - n0) // _LANES, acc, 0)
        _write_panel(acc, count, n0, min(n1, n_out), constant, w_zp, row_sums, m0, n_out, multiplier, left, right,
                     factor, dequantize, output_zero_point, low, high, pixels, block, out)


@numba.njit(inline="always", **_JIT)
def _write_panel(acc, count, n0, n1, constant, w_zp, row_sums, m0, n_out, multiplier, left, right, factor, dequantize,
                 output_zero_point, low, high, pixels, block, out):
    """Channels ``n0 .. n1`` of the sums ``acc[r, c - n0]`` into the flat ``out``: row ``m`` and channel
    ``c`` go to ``(m // pixels, c, m % pixels)`` of an ``(images, n_out, pixels)`` array (pixels 1:
    ``(m, c)``). ``acc + constant - w_zp * row_sums`` wraps to int32, as the reference engine's
    accumulator does (``constant``: bias and the zero points' terms), and is then requantized, or with
    ``dequantize`` (a float32 ``out``) multiplied by ``factor`` (float64, then float32).

    NOTE: row by row, across channels, in loops over ``j`` from 0 with no branch inside: the
    per-channel vectors load contiguously and the loop vectorises (1.8 ns a value). Loops down each
    channel's rows took 2.4 ns, and loops with a branch inside or indexed by ``c - n0`` (numba's
    negative-index wrap needs a select) ran scalar or gathered, 3.2-3.6 ns. A convolution's rows are
    pixels, so its values go through ``block`` and are stored channel by channel."""
    direct = pixels == 1
    width = n1 - n0
    constant, w_zp, factor = constant[n0:n1], w_zp[n0:n1], factor[n0:n1]
    multiplier, left, right = multiplier[n0:n1], left[n0:n1], right[n0:n1]
    requantized = np.empty(width, np.int64)
    dequantized = np.empty(width if dequantize else 0, np.float64)
    for r in range(count):
        at = (m0 + r) * n_out + n0
        row_sum = row_sums[r]
        if dequantize:
            for j in range(width):
                total = np.int32(np.int64(acc[r, j]) + constant[j] - w_zp[j] * row_sum)
                dequantized[j] = min(max(np.float64(total) * factor[j], low), high)
            _store_row(dequantized, direct, out, at, block, r)
        else:
            for j in range(width):
                total = np.int32(np.int64(acc[r, j]) + constant[j] - w_zp[j] * row_sum)
                requantized[j] = requantize(total, multiplier[j], left[j], right[j], output_zero_point, low, high)
            _store_row(requantized, direct, out, at, block, r)
    if not direct:
        for r in range(count):
            m = m0 + r
            at = (m // pixels) * n_out * pixels + m % pixels + n0 * pixels
            for j in range(width):
                out[at + j * pixels] = block[r, j]


@numba.njit(inline="always", **_JIT)
def _store_row(values, direct, out, at, block, r):
    """One row's results: into the flat ``out`` from ``at`` (``direct``), else into ``block[r]``."""
    if direct:
        for j in range(values.shape[0]):
            out[at + j] = values[j]
    else:
        for j in range(values.shape[0]):
            block[r, j] = values[j]


@numba.njit(inline="always", **_JIT)
def _job(job, n_split, chunk, m_rows, span):
    """Job ``job``'s first row, row count and first panel: chunk ``job // n_split`` of rows, panel
    range ``job % n_split``."""
    m0 = job // n_split * chunk
    return m0, min(chunk, m_rows - m0), job % n_split * span


@numba.njit(inline="always", **_JIT)
def _rows(count, row_bytes):
    """A job's byte rows, as many as the tiles read (a multiple of 4).

    NOTE: not initialised: rows past ``count`` are computed and dropped."""
    return np.empty(((count + _ROWS - 1) // _ROWS * _ROWS, row_bytes), np.uint8)


@numba.njit(parallel=True, **_JIT)
def linear_kernel(x, flip, panels, n_padded, constant, w_zp, n_out, multiplier, left, right, factor, dequantize,
                  output_zero_point, low, high, chunk, n_split, out):
    """``out[m, n]`` of `linear` for 2-D int8/uint8 ``x`` (``flip``: the byte XORed in to make it
    unsigned; ``constant``: `constants`); chunks of ``chunk`` rows times ``n_split`` panel ranges."""
    m_rows, k = x.shape
    row_bytes = (k + _QUAD - 1) // _QUAD * _QUAD
    n_panels = (n_padded + _PANEL - 1) // _PANEL
    m_chunks = (m_rows + chunk - 1) // chunk
    span = (n_panels + n_split - 1) // n_split
    for job in prange(m_chunks * n_split):
        m0, count, p0 = _job(job, n_split, chunk, m_rows, span)
        if p0 < n_panels:
            rows = _rows(count, row_bytes)
            for r in range(count):
                for i in range(k):
                    rows[r, i] = np.uint8(x[m0 + r, i]) ^ flip
                for i in range(k, row_bytes):
                    rows[r, i] = 0
            _chunk_product(rows, count, panels, n_padded, p0, min(p0 + span, n_panels), constant, w_zp, m0, n_out,
                           multiplier, left, right, factor, dequantize, output_zero_point, low, high, 1, out)


@numba.njit(parallel=True, **_JIT)
def conv_kernel(x, x_zp, panels, n_padded, constant, w_zp, n_out, multiplier, left, right, factor, dequantize,
                output_zero_point, low, high, chunk, n_split, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, out):
    """`conv2d` (one group) of the unsigned NHWC byte ``x`` (zero point ``x_zp``, 0..255): im2col of
    ``chunk`` output pixels at a time into byte rows (columns ``(ky, kx, channel)``; taps in the
    padding hold the zero point), then the product written to the flat NCHW ``out``."""
    n_images, channels = x.shape[0], x.shape[3]
    k = kh * kw * channels
    row_bytes = (k + _QUAD - 1) // _QUAD * _QUAD
    n_panels = (n_padded + _PANEL - 1) // _PANEL
    pixels = oh * ow
    m_rows = n_images * pixels
    m_chunks = (m_rows + chunk - 1) // chunk
    span = (n_panels + n_split - 1) // n_split
    pad = np.uint8(x_zp)
    for job in prange(m_chunks * n_split):
        m0, count, p0 = _job(job, n_split, chunk, m_rows, span)
        if p0 < n_panels:
            rows = _rows(count, row_bytes)
            for r in range(count):
                gather_pixel(x, m0 + r, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, pad, rows, r)
                for i in range(k, row_bytes):
                    rows[r, i] = 0
            _chunk_product(rows, count, panels, n_padded, p0, min(p0 + span, n_panels), constant, w_zp, m0, n_out,
                           multiplier, left, right, factor, dequantize, output_zero_point, low, high, pixels, out)


def pack(weight, weight_zero_point):
    """``(N, K)`` int8/uint8 weights, or a convolution's ``(N, C, kH, kW)`` flattened as ``(ky, kx, c)``,
    as signed bytes in panels of 64 channels (the last one: a multiple of 16), each laid out
    ``(quad of K, channel, 4 bytes)``; returns ``(panels, padded channels, column sums, zero points)``,
    sums and zero points int64 per padded channel, of the signed weight."""
    weight2d = (weight if weight.ndim == 2 else weight.transpose(0, 2, 3, 1)).reshape(weight.shape[0], -1)
    n, k = weight2d.shape
    zero_points = np.asarray(weight_zero_point, np.int64)
    if weight2d.dtype == np.uint8:
        weight2d, zero_points = (weight2d ^ np.uint8(TOP_BIT)).view(np.int8), zero_points - TOP_BIT
    quads = -(-k // _QUAD)
    n_padded = -(-n // _LANES) * _LANES
    padded = np.zeros((n_padded, quads * _QUAD), np.int8)
    padded[:n, :k] = weight2d
    panels = aligned_empty(padded.size, np.int8)
    np.concatenate([padded[p:p + _PANEL].reshape(-1, quads, _QUAD).transpose(1, 0, 2).ravel()
                    for p in range(0, n_padded, _PANEL)], out=panels)
    column_sums = padded.sum(axis=1, dtype=np.int64)
    padded_zero_points = np.zeros(n_padded, np.int64)
    padded_zero_points[:n] = zero_points
    return panels, n_padded, column_sums, padded_zero_points


def aligned_empty(shape, dtype):
    """An uninitialised C-contiguous array whose data starts on a 64-byte (cache line) boundary.

    NOTE: the tiles load 64 bytes of weights at a time; numpy's memory is aligned to 16 bytes only,
    and a panel starting off a line boundary split every load in two: BERT's 768x3072 layer took
    4.2 ms or 1.7 ms depending on where the heap placed its weight."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    raw = np.empty((count + 1) * dtype.itemsize + _LINE, np.uint8)
    start = -raw.ctypes.data % _LINE
    # NOTE: one element more, sliced off after the view: numpy moves the data of a view of no bytes.
    return raw[start:start + (count + 1) * dtype.itemsize].view(dtype)[:count].reshape(shape)


def constants(bias, x_zp, k, column_sums, w_zp):
    """Per padded channel, what `_write_panel` adds to each sum besides ``- w_zp * sum x``: the bias and
    ``K zx zw - zx sum w`` (int64; the sum wraps to int32 only once complete)."""
    constant = k * x_zp * w_zp - x_zp * column_sums
    constant[:len(bias)] += bias
    return constant


def schedule(m_rows, k, n_padded):
    """Rows per chunk and how many panel ranges split each chunk, so that every thread has an equal
    share: chunks of at most `_CHUNK_BYTES` of rows, as many as a multiple of the threads (BERT's 128
    tokens: 64 + 64 rows, not 84 + 44), or fewer chunks split by panels."""
    row_bytes = -(-k // _QUAD) * _QUAD
    threads = numba.get_num_threads()
    longest = max(_ROWS, min(128, _CHUNK_BYTES // row_bytes // _ROWS * _ROWS))
    m_chunks = -(-m_rows // longest)
    if m_chunks >= threads:
        m_chunks = -(-m_chunks // threads) * threads
    chunk = max(_ROWS, -(-(-(-m_rows // m_chunks)) // _ROWS) * _ROWS)
    m_chunks = -(-m_rows // chunk)
    n_split = max(1, min(-(-n_padded // _PANEL), -(-threads // m_chunks)))
    return chunk, n_split
