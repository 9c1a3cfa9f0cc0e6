"""Derivative rules of the 3-D convolution and pools (video models).

conv3d's input gradient is the adjoint convolution written with registry ops:
the output's gradient with ``stride - 1`` zeros inserted between its entries,
padded so every input position sees the taps that reached it, convolved with
the kernel flipped and its channels swapped per group. Its weight gradient is
``conv2d_weight_grad``, which takes the weight's rank. avg_pool3d's gradient
is that same adjoint with a kernel of ones, max_pool3d sends each gradient to
the element its index names (as max_pool2d), and adaptive_avg_pool3d is
separable (`rules_conv._separable_adjoint`).
"""
from fxkit.runtime.autograd.backward_ops import conv_pads
from fxkit.runtime.autograd.function import defgrad
from fxkit.runtime.autograd.rules_conv import _max_pool_forward, _separable_adjoint, _spread_to_indices
from fxkit.runtime.ops.conv import ntuple
from fxkit.runtime.registry import get_op

_adaptive_avg_pool3d = get_op("adaptive_avg_pool3d")
_avg_pool3d = get_op("avg_pool3d")
_conv3d = get_op("conv3d")
_ones = get_op("ones")
_pad = get_op("pad")
_weight_grad = get_op("conv2d_weight_grad")


def _adjoint(g, weight, sizes, stride, pads, dilation, groups):
    """The input gradient of a batched ``conv3d(x, weight)`` with input spatial ``sizes`` and
    ``(before, after)`` ``pads``, given the output's gradient ``g``."""
    for axis, s in enumerate(stride, start=2):
        if s > 1:  # s - 1 zeros after each entry: (..., O, ...) -> (..., O * s, ...)
            shape = tuple(g.shape)
            after_axis = len(shape) - axis  # dims from the new one to the last, which F.pad lists first
            g = _pad(g.unsqueeze(axis + 1), [0] * (2 * (after_axis - 1)) + [0, s - 1])
            g = g.reshape(shape[:axis] + (shape[axis] * s,) + shape[axis + 1:])
    amounts = []  # F.pad's order: the last dim's (before, after) first; negative amounts crop
    for axis in (4, 3, 2):
        size, (lo, _), k, d = sizes[axis - 2], pads[axis - 2], weight.shape[axis], dilation[axis - 2]
        before = d * (k - 1) - lo
        amounts += [before, size + d * (k - 1) - g.shape[axis] - before]
    g = _pad(g, amounts)
    oc, cg = weight.shape[:2]
    kernel = tuple(weight.shape[2:])
    swapped = (weight.flip((2, 3, 4)).reshape((groups, oc // groups, cg) + kernel).transpose(1, 2)
               .reshape((groups * cg, oc // groups) + kernel))
    return _conv3d(g, swapped, None, 1, 0, dilation, groups)


@defgrad("conv3d", saves=("input", "weight"))
def _conv3d_grad(ctx, g, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    batched = input.ndim == 5
    x, g5 = (input, g) if batched else (input.unsqueeze(0), g.unsqueeze(0))
    stride, dilation = ntuple(stride, 3, "conv3d", "stride"), ntuple(dilation, 3, "conv3d", "dilation")
    gx = gw = gb = None
    if ctx.needs(input):
        pads = conv_pads(padding, tuple(weight.shape[2:]), dilation, "conv3d")
        gx = _adjoint(g5, weight, tuple(x.shape[2:]), stride, pads, dilation, groups)
        gx = gx if batched else gx.squeeze(0)
    if ctx.needs(weight):
        gw = _weight_grad(x, tuple(weight.shape), g5, stride, padding, dilation, groups)
    if bias is not None and ctx.needs(bias):
        gb = g5.sum((0, 2, 3, 4))
    return gx, gw, gb


@defgrad("max_pool3d", forward=_max_pool_forward)
def _max_pool3d(ctx, g, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                return_indices=False):
    return _spread_to_indices(g[0] if return_indices else g, ctx.extra, input, spatial=3)


@defgrad("avg_pool3d")
def _avg_pool3d_grad(ctx, g, input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                     divisor_override=None):
    kernel = ntuple(kernel_size, 3, "avg_pool3d", "kernel_size")
    stride = kernel if stride is None or stride == () or stride == [] else ntuple(stride, 3, "avg_pool3d", "stride")
    padding = ntuple(padding, 3, "avg_pool3d", "padding")
    sizes, out_sizes = tuple(input.shape[-3:]), tuple(g.shape[-3:])
    if divisor_override is not None:
        g = g / divisor_override
    else:
        # the divisor of every window, from the op itself, as avg_pool2d's rule finds it
        ones = _ones(1, 1, *sizes, dtype=g.dtype, device=g.device)
        count = _avg_pool3d(ones, kernel, stride, padding, ceil_mode, True, 1)
        divisor = count / _avg_pool3d(ones, kernel, stride, padding, ceil_mode, True) if count_include_pad else count
        g = g / divisor.reshape(out_sizes)
    box = _ones(1, 1, *kernel, dtype=g.dtype, device=g.device)
    spread = _adjoint(g.reshape((-1, 1) + out_sizes), box, sizes, stride, tuple((p, p) for p in padding), (1, 1, 1),
                      1)
    return spread.reshape(tuple(input.shape))


@defgrad("adaptive_avg_pool3d")
def _adaptive_avg_pool3d_grad(ctx, g, input, output_size):
    return _separable_adjoint(g, input, lambda images: _adaptive_avg_pool3d(images, output_size), 3)
