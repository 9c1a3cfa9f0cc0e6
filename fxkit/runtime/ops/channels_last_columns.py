"""Convolutions over channels-last columns, for the mid-sized maps of a training step.

In NCHW memory a window's taps lie in rows of the map: im2col copies runs as long as an
output row (16 values on a 16x16 map) and spends its time stepping between them. Copied
once to channels-last ``(N, H, W, C)``, every tap is a run of ``C`` contiguous values, and
the columns ``(N*OH*OW, KH*KW*C)`` gather at memory speed; their product with the weight,
``(N*OH*OW, K) @ (K, OC)``, is also the orientation OpenBLAS runs fastest at these shapes.
On ResNet-18's 64-channel 3x3 layer (batch 8, 16x16 maps, 2 cores) the forward goes from
0.84 to 0.62 ms, the weight gradient from 0.78 to 0.57 and the input gradient (a stride-1
transposed convolution: the conv of the padded gradient by the flipped, swapped weight)
from 0.99 to 0.56.

The weight is reordered to ``(KH, KW, C, OC)`` for every call, so large weights keep the
NCHW forms (`channels_last_pays`): at 256 channels that copy costs more than the columns
save. Results are new NCHW arrays, like the other forms'; everything else lives in scratch.
"""
import numpy as np

from fxkit.runtime.ops.scratch import gathered, scratch

MIN_CHANNELS = 16
"""Channels per window tap from which its run is long enough to pay for the channels-last copy."""
MAX_WEIGHTS = 1 << 18
"""Weights (``OC * C * KH * KW``) up to which reordering the weight every call costs less than it saves:
128x128x3x3 (147k) gains, 256x128x3x3 (295k) loses (2 cores)."""
MAX_MAP_PIXELS = 256
"""Output pixels per image up to which the forward and the weight gradient gain: at 32x32 the NCHW columns'
rows are long enough and their per-image products win (batch 8, 64 channels: 3.2 against 3.9 ms)."""
MIN_COLUMNS = 512
"""Columns (``N * OH * OW``) from which they gain: a single 14x14 image ties or loses."""
MAX_COLUMN_ELEMENTS = 1 << 24
"""Column elements (64 MB in float32) above which the transposed convolution keeps its per-tap form."""


def channels_last_pays(xp, images, channels, weight_shape, out_sizes):
    """Whether a groups=1 2-D convolution (or its weight gradient) of ``images`` inputs with ``channels``
    channels, a ``weight_shape`` weight and ``out_sizes`` output maps runs faster over channels-last columns."""
    pixels = out_sizes[0] * out_sizes[1]
    return (_fits(xp, channels, weight_shape) and pixels <= MAX_MAP_PIXELS
            and images * pixels >= MIN_COLUMNS)


def channels_last_transposed_pays(xp, x_shape, weight_shape, padding):
    """Whether a stride-1, undilated, groups=1 transposed convolution of an ``x_shape`` input by a
    ``weight_shape`` weight with ``padding`` runs as the conv of channels-last columns (any map size
    whose columns fit `MAX_COLUMN_ELEMENTS`; a padding past the kernel would crop, which it does not do)."""
    n, c, h, w = x_shape
    kh, kw = weight_shape[2:]
    return (_fits(xp, c, weight_shape) and padding[0] < kh and padding[1] < kw
            and n * h * w * c * kh * kw <= MAX_COLUMN_ELEMENTS)


def _fits(xp, channels, weight_shape):
    kh, kw = weight_shape[2:]
    weights = weight_shape[0] * weight_shape[1] * kh * kw
    # NOTE: numpy only: the thresholds are OpenBLAS's on CPU cores; cupy keeps its own forms
    return xp is np and channels >= MIN_CHANNELS and (kh, kw) != (1, 1) and weights <= MAX_WEIGHTS


def channels_last_input(xp, x, pads):
    """``x`` ``(N, C, H, W)`` (any layout) copied into scratch as ``(N, H + pads, W + pads, C)``, the border
    (``pads``: a ``(before, after)`` pair per spatial dim) zero."""
    n, c, h, w = x.shape
    (top, bottom), (left, right) = pads
    out = scratch(xp, "channels-last input", (n, top + h + bottom, left + w + right, c), x.dtype)
    if top or bottom or left or right:
        out[:, :top] = 0
        out[:, top + h:] = 0
        out[:, top:top + h, :left] = 0
        out[:, top:top + h, left + w:] = 0
    out[:, top:top + h, left:left + w] = x.transpose(0, 2, 3, 1)
    return out


def channels_last_columns(xp, xl, kernel, stride, dilation, out_sizes):
    """im2col of a channels-last input ``xl`` (`channels_last_input`): ``(N*OH*OW, KH*KW*C)`` in scratch,
    row ``(image, out row, out column)``, column ``(tap row, tap column, channel)``."""
    n, _, _, c = xl.shape
    s_n, s_h, s_w, s_c = xl.strides
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_sizes
    windows = xp.lib.stride_tricks.as_strided(xl, (n, oh, ow, kh, kw, c),
                                              (s_n, s_h * sh, s_w * sw, s_h * dh, s_w * dw, s_c))
    return gathered(xp, "channels-last columns", windows, (n * oh * ow, kh * kw * c))


def _planes(xp, product, n, out_sizes, bias=None):
    """A channels-last product ``(N*OH*OW, C)`` as a new NCHW array, plus ``bias`` per channel."""
    c = product.shape[1]
    pixels = out_sizes[0] * out_sizes[1]
    out = xp.empty((n, c) + tuple(out_sizes), product.dtype)
    moved = product.reshape(n, pixels, c).transpose(0, 2, 1)
    if bias is None:
        out.reshape(n, c, pixels)[...] = moved
    else:
        xp.add(moved, bias.reshape(c, 1), out=out.reshape(n, c, pixels))
    return out


def conv2d_channels_last(xp, x, weight, bias, stride, pads, dilation, out_sizes):
    """``conv2d`` (groups=1) of an ``(N, C, H, W)`` input over channels-last columns: a new NCHW result."""
    n, c = x.shape[:2]
    oc, _, kh, kw = weight.shape
    cols = channels_last_columns(xp, channels_last_input(xp, x, pads), (kh, kw), stride, dilation, out_sizes)
    # NOTE: (OC, KH, KW, C) copied and read transposed: 36 us for 128x128x3x3 where (KH, KW, C, OC) takes 84
    out_by_taps = xp.ascontiguousarray(weight.transpose(0, 2, 3, 1)).reshape(oc, kh * kw * c)
    product = xp.matmul(cols, out_by_taps.T, out=scratch(xp, "channels-last product", (cols.shape[0], oc), x.dtype))
    return _planes(xp, product, n, out_sizes, bias)


def conv_transpose2d_channels_last(xp, x, weight, padding, out_hw):
    """The stride-1 transposed convolution (groups=1, no dilation, no bias) of ``x`` ``(N, C, H, W)`` by
    ``weight`` ``(C, OC, KH, KW)``: the conv of ``x`` padded by ``K - 1 - padding`` with the weight flipped
    and its channel roles swapped."""
    n, c = x.shape[:2]
    _, oc, kh, kw = weight.shape
    (ph, pw) = padding
    pads = ((kh - 1 - ph, kh - 1 - ph), (kw - 1 - pw, kw - 1 - pw))
    cols = channels_last_columns(xp, channels_last_input(xp, x, pads), (kh, kw), (1, 1), (1, 1), out_hw)
    flipped = xp.ascontiguousarray(weight[:, :, ::-1, ::-1].transpose(2, 3, 0, 1)).reshape(kh * kw * c, oc)
    product = xp.matmul(cols, flipped, out=scratch(xp, "channels-last product", (cols.shape[0], oc), x.dtype))
    return _planes(xp, product, n, out_hw)


def weight_grad_channels_last(xp, x, weight_size, grad_output, stride, pads, dilation):
    """``conv2d_weight_grad`` (groups=1) over channels-last columns: the columns' product with the output
    gradient, moved channels-last too, as a new ``weight_size`` array."""
    n, c = x.shape[:2]
    oc, _, kh, kw = weight_size
    out_sizes = tuple(grad_output.shape[2:])
    cols = channels_last_columns(xp, channels_last_input(xp, x, pads), (kh, kw), stride, dilation, out_sizes)
    rows = gathered(xp, "channels-last rows", grad_output.transpose(0, 2, 3, 1), (cols.shape[0], oc))
    if c < 64:
        # Few channels: (K, OC) in BLAS's faster orientation for a short K (32 channels: 0.22 against 0.26 ms).
        by_tap = xp.matmul(cols.T, rows).reshape(kh, kw, c, oc).transpose(3, 2, 0, 1)
    else:
        by_tap = xp.matmul(rows.T, cols).reshape(oc, kh, kw, c).transpose(0, 3, 1, 2)
    # NOTE: always one copy, into an array of its own (ascontiguousarray would hand back a view of the product
    # where the reorder is trivial): `.grad` takes it as it is (engine._sole_owner)
    return xp.array(by_tap, order="C")
