"""Winograd convolution for 3x3, stride-1, undilated, single-group convs in channels-last memory.

im2col multiplies ``9 * C`` taps per output pixel and channel; Winograd's
minimal filtering F(m x m, 3 x 3) computes an ``m x m`` output tile from an
``(m + 2) x (m + 2)`` input tile with ``(m + 2)**2`` products instead of
``9 * m * m``: F(2x2, 3x3) does 16 where direct does 36 (2.25x fewer), F(4x4,
3x3) 36 where direct does 144 (4x fewer). Across channels the products are
``T = (m + 2)**2`` independent matrix products, one per tile position::

    V[t] = (B^T d B)[t]   input tiles,       (T, tiles, C)
    U[t] = (G g G^T)[t]   filters, once,     (T, C, OC)
    M[t] = V[t] @ U[t]                        (T, tiles, OC)   numpy's matmul, BLAS
    y    = A^T M A + bias  output tiles,      written channels-last (N, OH, OW, OC)

The input and output transforms are numba kernels over rows of tiles on
numba's threads; their inner loops run along the channels, contiguous in the
channels-last input, in ``V`` and ``M`` and in the output, so they vectorise.
Padding is a bounds test while a tile is gathered (zeros outside the image),
never a padded copy; the last row and column of tiles may reach past the
output and write only what lies inside it.

Numerics: the transforms' coefficients are not all powers of two (F(4x4)'s
``G`` holds 1/6 and 1/24, its ``A^T`` 8 and its ``B^T`` 5), so the float32
rounding error grows with the transforms' norms on top of direct
convolution's ``sqrt(9 C) eps`` (`transform_growth` bounds the growth; the
tests scale their tolerance by it). Measured against a float64 conv, as the
largest error over the largest output, on ResNet and VGG shapes
(``benchmarks/winograd_layers.py``): PyTorch float32 2-4e-7, F(2x2) 1-6e-7,
F(4x4) 3e-6 to 1.3e-5. `TRANSFORMS` holds both; the numba backend uses
F(2x2) only (`lower_winograd`).

Imported by `fxkit.backends.conv_lowering` only when a conv is lowered to it:
numba takes ~0.5 s to import.
"""
import numba
import numpy as np

from fxkit.backends.conv_lowering import _ChannelsLast, scratch
from fxkit.backends.cost_model import Decision
from fxkit.backends.packed_weight import packed_weight

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}
# NOTE: the kernels of both tile sizes share a qualified name; numba's cache tells them apart by a
# hash of their closure variables (numba.core.caching's index key).


class Transforms:
    """The three matrices of F(m x m, 3 x 3): ``bt`` (a x a, input), ``g`` (a x 3, filter), ``at`` (m x a, output)."""

    def __init__(self, m, bt, g, at):
        self.m, self.a = m, m + 2
        self.bt, self.g, self.at = (np.asarray(v, np.float64) for v in (bt, g, at))

    def filters(self, weight, dtype):
        """``U`` as ``(a*a, C, OC)`` in ``dtype``: ``G g G^T`` of each ``(OC, C, 3, 3)`` filter, in float64."""
        u = self.g @ weight.astype(np.float64) @ self.g.T  # (OC, C, a, a)
        return np.ascontiguousarray(u.transpose(2, 3, 1, 0).reshape(self.a * self.a, *u.shape[1::-1]), dtype)

    def coefficients(self, dtype):
        """``(B^T, A^T)`` in ``dtype``, the kernels' arguments (float64 coefficients would promote
        float32 arithmetic)."""
        return self.bt.astype(dtype), self.at.astype(dtype)

    def __repr__(self):
        return f"F({self.m}x{self.m}, 3x3)"


F2 = Transforms(2,
                bt=[[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
                g=[[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]],
                at=[[1, 1, 1, 0], [0, 1, -1, -1]])
F4 = Transforms(4,
                bt=[[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                    [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
                g=[[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                   [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
                at=[[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]])
TRANSFORMS = {2: F2, 4: F4}
"""Output tile size m -> its F(m x m, 3 x 3)."""


def transform_growth(transforms):
    """How much larger than direct convolution's the rounding error of ``transforms`` can grow.

    Direct convolution rounds sums of ``|x| |w|``; Winograd rounds sums of the transformed tiles and
    filters, whose magnitudes per output are at most ``sum_t |A^T[i, t]| (sum_j |B^T[t, j]|)
    (sum_k |G[t, k]|)`` times larger along each of the two dimensions: that factor squared (64 for
    F(2x2, 3x3), 2304 for F(4x4, 3x3)). The tests scale their float32 tolerance by it.
    """
    per_step = np.abs(transforms.bt).sum(axis=1) * np.abs(transforms.g).sum(axis=1)
    return float((np.abs(transforms.at) @ per_step).max()) ** 2


def input_kernel(a):
    """The parallel kernel writing ``V`` for tiles of ``a x a`` input pixels (`input_tiles`)."""
    m = a - 2

    @numba.njit(parallel=True, **_JIT)
    def input_tiles(v, x, bt, tiles_h, tiles_w, ph, pw):
        """``v[t, tile] = (B^T d B)[t]`` for every input tile ``d`` of a channels-last ``x``.

        The tile size is a constant of the kernel (a closure variable): the loops over a tile's
        rows unroll, leaving one loop along the channels per transformed row (``a`` loads, one
        store), which LLVM vectorises.

        Args:
            v: ``(a*a, N*tiles_h*tiles_w, C)``, C-contiguous, overwritten; tile ``(n*tiles_h + i)*tiles_w + j``
                starts at input pixel ``(i*m - ph, j*m - pw)``.
            x: ``(N, H, W, C)``, C-contiguous, unpadded (zeros are read outside it).
            bt: ``(a, a)`` ``B^T`` in ``x``'s dtype (`Transforms.coefficients`).
            tiles_h, tiles_w, ph, pw: tiles per column and row, leading padding.
        """
        n, h, w, c = x.shape
        for row in numba.prange(n * tiles_h):
            image = row // tiles_h
            top = (row - image * tiles_h) * m - ph
            patch = np.empty((a, a, c), x.dtype)
            half = np.empty((a, a, c), x.dtype)
            for j in range(tiles_w):
                left = j * m - pw
                # NOTE: the tile is read as src[y:y + a, x:x + a] of a C-contiguous (H, W, C) array, never
                # as a slice: numba types a slice's layout "any", whose unknown strides stop vectorising
                src, y, x0 = x[image], top, left
                if not (top >= 0 and left >= 0 and top + a <= h and left + a <= w):
                    # NOTE: a tile over the padding or past the edge reads a zero-filled copy of its part of x
                    for p in range(a):
                        for q in range(a):
                            if 0 <= top + p < h and 0 <= left + q < w:
                                patch[p, q] = x[image, top + p, left + q]
                            else:
                                patch[p, q] = 0
                    src, y, x0 = patch, 0, 0
                for r in range(a):  # half = B^T d
                    for q in range(a):
                        out = half[r, q]
                        for k in range(c):
                            acc = bt[r, 0] * src[y, x0 + q, k]
                            for p in range(1, a):
                                acc += bt[r, p] * src[y + p, x0 + q, k]
                            out[k] = acc
                tile = row * tiles_w + j
                for r in range(a):  # v = half B
                    for s in range(a):
                        out = v[r * a + s, tile]
                        for k in range(c):
                            acc = bt[s, 0] * half[r, 0, k]
                            for q in range(1, a):
                                acc += bt[s, q] * half[r, q, k]
                            out[k] = acc

    return input_tiles


def output_kernel(a):
    """The parallel kernel writing the output from products of ``a x a`` tiles (`output_tiles`)."""
    m = a - 2

    @numba.njit(parallel=True, **_JIT)
    def output_tiles(out, mt, at, bias, tiles_h, tiles_w):
        """``out`` = ``A^T M A`` of every tile of products ``mt``, plus ``bias``, where it lies in ``out``.

        Args:
            out: ``(N, OH, OW, OC)``, C-contiguous, overwritten.
            mt: ``(a*a, N*tiles_h*tiles_w, OC)`` products (tiles numbered as in `input_kernel`'s).
            at: ``(m, a)`` ``A^T`` in ``out``'s dtype.
            bias: ``(OC,)`` (zeros for a conv without one).
            tiles_h, tiles_w: tiles per column and row.
        """
        n, oh, ow, oc = out.shape
        for row in numba.prange(n * tiles_h):
            image = row // tiles_h
            top = (row - image * tiles_h) * m
            half = np.empty((m, a, oc), out.dtype)
            part = np.empty((m, m, oc), out.dtype)
            for j in range(tiles_w):
                tile = row * tiles_w + j
                left = j * m
                for r in range(m):  # half = A^T M
                    for s in range(a):
                        dst = half[r, s]
                        for k in range(oc):
                            acc = at[r, 0] * mt[s, tile, k]
                            for p in range(1, a):
                                acc += at[r, p] * mt[p * a + s, tile, k]
                            dst[k] = acc
                inside = top + m <= oh and left + m <= ow
                # NOTE: a tile reaching past the output's edge is computed whole into part, its inside
                # copied; both are C-contiguous (H, W, OC) arrays written at an offset (as in input_tiles)
                dst_image, y, x0 = (out[image], top, left) if inside else (part, 0, 0)
                for r in range(m):  # y = half A + bias
                    for s in range(m):
                        dst = dst_image[y + r, x0 + s]
                        for k in range(oc):
                            acc = bias[k]
                            for q in range(a):
                                acc += at[s, q] * half[r, q, k]
                            dst[k] = acc
                if not inside:
                    for r in range(min(m, oh - top)):
                        for s in range(min(m, ow - left)):
                            out[image, top + r, left + s] = part[r, s]

    return output_tiles


F2.input_tiles, F2.output_tiles = input_kernel(F2.a), output_kernel(F2.a)
F4.input_tiles, F4.output_tiles = input_kernel(F4.a), output_kernel(F4.a)


class WinogradConv(_ChannelsLast):
    """A 3x3, stride-1, undilated, single-group conv by F(m x m, 3 x 3): the input tiles transformed
    into a shared ``(T, tiles, C)`` buffer, ``T`` products with the filters transformed once, the
    output tiles transformed back with the bias into the ``(N, OH, OW, OC)`` result."""

    __slots__ = ("transforms", "pads", "tiles", "_coefficients", "_zeros")

    def __init__(self, name, out_meta, pads, transforms):
        super().__init__(name, out_meta)
        n, oh, ow, oc = self.shape
        self.transforms, self.pads = transforms, (pads[0][0], pads[1][0])
        self.tiles = (-(-oh // transforms.m), -(-ow // transforms.m))
        self._coefficients = transforms.coefficients(self.dtype)
        self._zeros = np.zeros(oc, self.dtype)
        warm(self.dtype, transforms)

    def __call__(self, x, weight, bias=None, *geometry):
        rows = self._input(x)
        n, h, w, c = rows.shape
        oc = self.shape[-1]
        tiles_h, tiles_w = self.tiles
        steps, count = self.transforms.a ** 2, n * tiles_h * tiles_w
        # NOTE: tiles and products are dead once the output is transformed: they live in the columns every conv
        # shares (`conv_lowering.scratch`), not in buffers of each call (VGG-11's three Winograd convs at batch 8
        # kept 0.6 GB of their own).
        tiles_in = scratch((steps, count, c), self.dtype)
        products = scratch((steps, count, oc), self.dtype)
        bt, at = self._coefficients
        self.transforms.input_tiles(tiles_in, rows, bt, tiles_h, tiles_w, *self.pads)
        filters = packed_weight(self, weight, lambda v: self.transforms.filters(v, self.dtype))
        np.matmul(tiles_in, filters, out=products)
        out = self._output()
        self.transforms.output_tiles(out, products, at, self._zeros if bias is None else bias, tiles_h, tiles_w)
        return out.transpose(0, 3, 1, 2)


def warm(dtype, transforms):
    """Compile ``transforms``' kernels for ``dtype`` now (the specialisation's compile time, not its first call)."""
    bt, at = transforms.coefficients(dtype)
    x = np.zeros((1, 1, 1, 1), dtype)
    products = np.zeros((transforms.a ** 2, 1, 1), dtype)
    transforms.input_tiles(products, x, bt, 1, 1, 1, 1)
    transforms.output_tiles(x, products, at, np.zeros(1, dtype), 1, 1)


MIN_CHANNELS = 128
"""Input and output channels from which Winograd runs: below them the products' inner dimension is too
short for BLAS to make up for the transforms (see `lower_winograd`)."""
MIN_PIXELS = 196
"""Output pixels (``N * OH * OW``; one 14x14 image, four 7x7 ones) from which Winograd runs: with fewer,
its 16 products are too small for BLAS (see `lower_winograd`)."""


def lower_winograd(name, x, out, pads):
    """``(WinogradConv, Decision)`` for a 3x3, stride-1, undilated, single-group conv where F(2x2, 3x3)
    beats the im2col rules, else None (the caller's rules decide).

    Measured with ``benchmarks/winograd_layers.py`` on the reference machine (2 threads, medians of
    11 interleaved calls, load average 0.2-0.6), F(2x2)'s time over the im2col rule's: 128->128 at
    28x28 0.70 (batch 1) to 0.77 (batch 8), 256->256 at 14x14 0.54-0.71, 512->512 at 7x7 1.06
    (batch 1, 49 output pixels), 0.92 (batch 2), 0.76-0.79 (batch 4 and 8), VGG's 256-512 channel
    layers 0.49-0.72; it lost at 64->64 on 56x56 at batch 8 (1.17: its 25 MB of tiles leave the
    cache that the rule's 4 MiB blocks stay in). In the model (ResNet-18 and ResNet-50 from
    torchvision at batch 8, 224x224, interleaved with PyTorch), taking the 128-512 channel layers
    moved the numba backend from 0.95 to 0.80 and from 0.85 to 0.78 of PyTorch's time; at batch 1
    the two moved by less than their run-to-run noise (1.07 -> 1.02, 0.98-1.10 -> 1.04-1.09).
    An earlier measurement under a load average of 2.5-6 (other jobs on the 2 cores) saw Winograd
    lose at batch 1 and below 256 channels: its two transforms are parallel passes that wait for
    the busier core. F(4x4, 3x3) was faster still at some shapes (0.33-0.80x) but its float32 error
    is 20-50x PyTorch's, so it is not chosen. Inside VGG-11 at batch 8 the three convs it takes ran
    in 221, 140 and 181 ms against im2col's 296, 130 and 260 ms.
    """
    batch, channels = x.shape[:2]
    out_channels = out.shape[1]
    pixels = batch * out.shape[2] * out.shape[3]
    if x.dtype.name != "float32" or min(channels, out_channels) < MIN_CHANNELS or pixels < MIN_PIXELS:
        return None
    return WinogradConv(f"{name}_winograd", out, pads, F2), Decision(
        name, "Winograd F(2x2, 3x3), channels-last",
        f"3x3 stride 1, {channels}->{out_channels} channels, {pixels} output pixels: 16 products of "
        f"(tiles, C) @ (C, OC) instead of 36 multiply-adds per 2x2 tile; tiles and products in the shared columns")
