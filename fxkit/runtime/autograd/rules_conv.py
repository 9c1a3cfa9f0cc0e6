"""Derivative rules of convolutions, pooling and interpolation.

conv2d's input gradient is a transposed convolution of the output's gradient
(col2im on BLAS) cropped to the input, its weight gradient ``conv2d_weight_grad``
(im2col and one matrix product, as the forward); conv1d runs through them
with a height of one, conv_transpose2d swaps the two roles. max_pool2d and
adaptive_max_pool2d send each gradient to the input element it picked, by the
indices a recording forward keeps (max_pool2d by ATen's one op,
``max_pool2d_with_indices_backward``). avg_pool2d spreads each gradient over its
window (a transposed convolution with a kernel of ones); the 1-D pools reuse these
over a height of one. adaptive_avg_pool2d and interpolate are separable linear maps
(``R @ x @ C`` for images); their gradient applies the transposes, which the op
itself computes when run on identity images.
"""
import math

from fxkit.runtime.autograd.backward_ops import conv_pads
from fxkit.runtime.autograd.function import defgrad
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.ops.conv import ntuple
from fxkit.runtime.registry import get_op

_arange = get_op("arange")
_avg_pool2d = get_op("avg_pool2d")
_adaptive_avg_pool2d = get_op("adaptive_avg_pool2d")
_conv2d = get_op("conv2d")
_conv_transpose2d = get_op("conv_transpose2d")
_interpolate = get_op("interpolate")
_max_pool2d_backward = get_op("max_pool2d_with_indices_backward")
_ones = get_op("ones")
_pad = get_op("pad")
_scatter_add = get_op("scatter_add")
_weight_grad = get_op("conv2d_weight_grad")
_zeros = get_op("zeros")


def _crop(x, top, left, height, width):
    """Rows ``top..top+height`` and columns ``left..left+width`` of ``x``, zeros where
    they reach past its end (pad with negative amounts crops)."""
    h, w = x.shape[-2:]
    amounts = [-left, left + width - w, -top, top + height - h]
    return _pad(x, amounts) if any(amounts) else x


def _conv2d_grads(g, x, weight, needs_x, needs_w, stride, padding, dilation, groups):
    """Input and weight gradients of a batched conv2d."""
    stride, dilation = ntuple(stride, 2, "conv2d", "stride"), ntuple(dilation, 2, "conv2d", "dilation")
    gx = gw = None
    if needs_x:
        gx = _conv2d_input_grad(g, x, weight, stride, padding, dilation, groups)
    if needs_w:
        gw = _weight_grad(x, tuple(weight.shape), g, stride, padding, dilation, groups)
    return gx, gw


def _conv2d_input_grad(g, x, weight, stride, padding, dilation, groups):
    """conv2d's input gradient: the transposed convolution of ``g`` with the forward's padding, so it
    computes only the input's pixels; ``output_padding`` gives back the rows and columns a strided
    forward skipped. Asymmetric ('same') or symbolic padding computes the full transposed
    convolution and crops it to the input."""
    kernel = tuple(weight.shape[2:])
    pads = conv_pads(padding, kernel, dilation)
    sizes = tuple(x.shape[-2:]) + tuple(g.shape[-2:])
    if all(type(v) is int for v in sizes) and all(lo == hi for lo, hi in pads):
        extra = tuple(size - ((o - 1) * s - 2 * lo + d * (k - 1) + 1) for size, o, s, (lo, _), d, k in
                      zip(sizes[:2], sizes[2:], stride, pads, dilation, kernel))
        if all(0 <= e < max(s, d) for e, s, d in zip(extra, stride, dilation)):
            return _conv_transpose2d(g, weight, None, stride, tuple(lo for lo, _ in pads), extra, groups, dilation)
    (top, _), (left, _) = pads
    full = _conv_transpose2d(g, weight, None, stride, 0, 0, groups, dilation)
    return _crop(full, top, left, x.shape[-2], x.shape[-1])


@defgrad("conv2d", saves=("input", "weight"))
def _conv2d_grad(ctx, g, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    batched = input.ndim == 4
    x, g4 = (input, g) if batched else (input.unsqueeze(0), g.unsqueeze(0))
    gx, gw = _conv2d_grads(g4, x, weight, ctx.needs(input), ctx.needs(weight), stride, padding, dilation,
                           groups)
    if gx is not None and not batched:
        gx = gx.squeeze(0)
    gb = g4.sum((0, 2, 3)) if bias is not None and ctx.needs(bias) else None
    return gx, gw, gb


@defgrad("conv1d", saves=("input", "weight"))
def _conv1d_grad(ctx, g, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    batched = input.ndim == 3
    x = (input if batched else input.unsqueeze(0)).unsqueeze(2)
    g4 = (g if batched else g.unsqueeze(0)).unsqueeze(2)
    if not isinstance(padding, str):
        padding = (0, ntuple(padding, 1, "conv1d", "padding")[0])
    gx, gw = _conv2d_grads(g4, x, weight.unsqueeze(2), ctx.needs(input), ctx.needs(weight),
                           (1, ntuple(stride, 1, "conv1d", "stride")[0]), padding,
                           (1, ntuple(dilation, 1, "conv1d", "dilation")[0]), groups)
    if gx is not None:
        gx = gx.squeeze(2) if batched else gx.squeeze(2).squeeze(0)
    gb = g4.sum((0, 2, 3)) if bias is not None and ctx.needs(bias) else None
    return gx, (gw.squeeze(2) if gw is not None else None), gb


@defgrad("conv_transpose2d", saves=("input", "weight"))
def _conv_transpose2d_grad(ctx, g, input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                           dilation=1):
    batched = input.ndim == 4
    x, g4 = (input, g) if batched else (input.unsqueeze(0), g.unsqueeze(0))
    h, w = x.shape[-2:]
    gx = gw = None
    if ctx.needs(input) or ctx.needs(weight):
        # conv2d with the same weight is the adjoint; its output may be longer than the input
        # when output_padding >= stride: those rows saw no input, so x extends with zeros.
        back = _conv2d(g4, weight, None, stride, padding, dilation, groups)
        if ctx.needs(input):
            gx = _crop(back, 0, 0, h, w)
            gx = gx if batched else gx.squeeze(0)
        if ctx.needs(weight):
            gw = _weight_grad(g4, tuple(weight.shape), _crop(x, 0, 0, back.shape[-2], back.shape[-1]), stride,
                              padding, dilation, groups)
    gb = g4.sum((0, 2, 3)) if bias is not None and ctx.needs(bias) else None
    return gx, gw, gb


def _max_pool_forward(op, args, kwargs):
    """Record max_pool2d with its indices (kept for backward) whether or not they were asked for."""
    kwargs = dict(kwargs)
    wanted = kwargs.pop("return_indices", args[6] if len(args) > 6 else False)
    values, indices = op(*args[:6], return_indices=True, **kwargs)
    return ((values, indices) if wanted else values), indices


@defgrad("max_pool2d", forward=_max_pool_forward)
def _max_pool2d(ctx, g, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                return_indices=False):
    return _max_pool2d_backward(g[0] if return_indices else g, tuple(input.shape), kernel_size, stride, padding,
                                dilation, ceil_mode, ctx.extra)


def _spread_to_indices(values, indices, input, spatial=2):
    """Each output gradient sent to the input element its flat index (into the last ``spatial``
    dims: ``H * W``, or ``D * H * W``) names, summed where several name one (max_pool2d's own
    gradient is one op, ``max_pool2d_with_indices_backward``)."""
    lead = tuple(input.shape[:-spatial])
    outputs = lead + (math.prod(values.shape[-spatial:]),)
    planes = _zeros(lead + (math.prod(input.shape[-spatial:]),), dtype=values.dtype, device=values.device)
    spread = _scatter_add(planes, -1, indices.reshape(outputs), values.reshape(outputs))
    return spread.reshape(tuple(input.shape))


def _adaptive_max_forward(op, args, kwargs):
    """Record adaptive_max_pool2d with its indices (kept for backward), as max_pool2d."""
    kwargs = dict(kwargs)
    wanted = kwargs.pop("return_indices", args[2] if len(args) > 2 else False)
    values, indices = op(*args[:2], return_indices=True, **kwargs)
    return ((values, indices) if wanted else values), indices


@defgrad("adaptive_max_pool2d", forward=_adaptive_max_forward)
def _adaptive_max_pool2d(ctx, g, input, output_size, return_indices=False):
    return _spread_to_indices(g[0] if return_indices else g, ctx.extra, input)


@defgrad("max_pool1d", forward=_max_pool_forward)
def _max_pool1d(ctx, g, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                return_indices=False):
    # NOTE: the indices count along L, the last axis: one summing scatter puts every gradient back.
    planes = _zeros(tuple(input.shape), dtype=g[0].dtype if return_indices else g.dtype, device=ctx.extra.device)
    return _scatter_add(planes, -1, ctx.extra, g[0] if return_indices else g)


@defgrad("avg_pool1d")
def _avg_pool1d_grad(ctx, g, input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """avg_pool2d's gradient over a height of one."""
    tall = TensorMeta(tuple(input.shape[:-1]) + (1, input.shape[-1]), input.dtype, input.device)
    kernel = ntuple(kernel_size, 1, "avg_pool1d", "kernel_size")[0]
    step = kernel if stride is None or stride == () or stride == [] else ntuple(stride, 1, "avg_pool1d", "stride")[0]
    pad = ntuple(padding, 1, "avg_pool1d", "padding")[0]
    grad = _avg_pool2d_grad(ctx, g.unsqueeze(-2), tall, (1, kernel), (1, step), (0, pad), ceil_mode,
                            count_include_pad)
    return grad.squeeze(-2)


@defgrad("avg_pool2d")
def _avg_pool2d_grad(ctx, g, input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                     divisor_override=None):
    kernel = ntuple(kernel_size, 2, "avg_pool2d", "kernel_size")
    stride = kernel if stride is None or stride == () or stride == [] else ntuple(stride, 2, "avg_pool2d", "stride")
    ph, pw = ntuple(padding, 2, "avg_pool2d", "padding")
    h, w = input.shape[-2:]
    oh, ow = g.shape[-2:]
    if divisor_override is not None:
        g = g / divisor_override
    else:
        # the divisor of every window, from the op itself: its sum of ones over the real
        # input, and (with count_include_pad) that sum over its average
        ones = _ones(1, 1, h, w, dtype=g.dtype, device=g.device)
        count = _avg_pool2d(ones, kernel, stride, (ph, pw), ceil_mode, True, 1)
        divisor = count / _avg_pool2d(ones, kernel, stride, (ph, pw), ceil_mode, True) if count_include_pad else count
        g = g / divisor.reshape(oh, ow)
    spread = _conv_transpose2d(g.reshape(-1, 1, oh, ow), _ones(1, 1, *kernel, dtype=g.dtype, device=g.device),
                               None, stride)
    return _crop(spread, ph, pw, h, w).reshape(tuple(input.shape))


def _separable_adjoint(g, input, apply, spatial=2):
    """The gradient of a per-image map that is linear and separable over the last ``spatial``
    axes, ``apply`` computing it: along each axis, the transpose of that axis's matrix. The
    matrix comes from ``apply`` run on identity images (the eye along the axis, constant along
    the others: every resize here has rows summing to 1, so the other axes leave it alone)."""
    dev, dtype = g.device, g.dtype
    sizes = tuple(input.shape[-spatial:])
    rank = len(g.shape)
    for k, n in enumerate(sizes):
        axis = rank - spatial + k
        place = [1] * spatial
        place[k] = n
        images = _eye(n, dtype, dev).reshape((n, 1) + tuple(place)).expand((n, 1) + sizes)
        picked = apply(images)[(slice(None), 0) + tuple(slice(None) if i == k else 0 for i in range(spatial))]
        g = g.transpose(axis, -1).matmul(picked.t()).transpose(axis, -1)  # picked: (in, out)
    return g


def _eye(n, dtype, device):
    return (_arange(n, device=device).unsqueeze(1) == _arange(n, device=device)).to(dtype)


@defgrad("adaptive_avg_pool2d")
def _adaptive_avg_pool2d_grad(ctx, g, input, output_size):
    if output_size in (1, (1, 1), [1, 1]):
        # global average pooling (a classifier's head): every pixel gets its plane's gradient over H * W
        h, w = input.shape[-2:]
        return (g / (h * w)).expand(tuple(input.shape)).contiguous()
    return _separable_adjoint(g, input, lambda images: _adaptive_avg_pool2d(images, output_size))


@defgrad("interpolate")
def _interpolate_grad(ctx, g, input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                      recompute_scale_factor=None, antialias=False):
    return _separable_adjoint(g, input, lambda images: _interpolate(images, size, scale_factor, mode, align_corners,
                                                                    recompute_scale_factor, antialias),
                              len(input.shape) - 2)
