"""Convolutions: conv1d, conv2d, conv3d and conv_transpose2d, on BLAS through numpy/cupy.

conv2d and conv3d are im2col plus one batched matrix product: a strided view of the
(padded) input exposes every kernel window without copying, one reshape
copies it into columns, and one ``xp.matmul`` over all groups multiplies the
weight by the columns. The columns are laid out so the product comes out as
contiguous ``(N, OC, OH, OW)`` when each image has enough output pixels for
BLAS to run at full speed; for small feature maps the batch is folded into a
single large product whose result is transposed once. conv1d is conv2d over
a height of one; conv_transpose2d multiplies first and scatter-adds the
kernel taps (col2im). Weight layouts are PyTorch's, so state_dicts load.
bfloat16 convolutions multiply in float32 on BLAS and are rounded once, as in
PyTorch (`low_precision.run_in_float32`).
"""
import operator

from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.batch_last_columns import (batch_first, batch_last_columns, batch_last_input,
                                                  col2im_batch_last, has_short_rows, tap_span)
from fxkit.runtime.ops.channels_last_columns import (channels_last_pays, channels_last_transposed_pays,
                                                     conv2d_channels_last, conv_transpose2d_channels_last)
from fxkit.runtime.ops.low_precision import BFLOAT16_KIND, run_in_float32
from fxkit.runtime.ops.scratch import scratch
from fxkit.runtime.ops.nn_checks import dims_differ, dtype_of, require_float, shown

# Measured on 2 cores for ResNet-18 layers (batch 8): per-image products over
# 256+ output pixels match one folded product; below that, folding is faster.
_PER_IMAGE_GEMM_MIN_PIXELS = 256


def ntuple(value, n, name, what):
    """``value`` as a tuple of ``n`` ints; an int (or a 1-sequence, as PyTorch allows) repeats."""
    if isinstance(value, int):
        return (value,) * n
    if hasattr(value, "__index__") and not isinstance(value, (tuple, list)):  # numpy integers
        return (operator.index(value),) * n
    if isinstance(value, (tuple, list)) and len(value) == 1:
        return (value[0],) * n
    if isinstance(value, (tuple, list)) and len(value) == n:
        return tuple(value)
    raise ShapeError(f"{name}: expected {what} to be a single integer value or a list of {n} values, got {value!r}")


def plus(size, c):
    """``size + c`` for an int ``c``, keeping a symbolic size's expression free of ``+ 0`` and ``+ -1``."""
    if c == 0:
        return size
    return size + c if c > 0 else size - (-c)


def sliding_size(size, extra, stride):
    """How many windows fit along an axis: ``(size + extra) // stride + 1``.

    Written so a symbolic size stays as simple as it can: a stride-1 window that
    keeps the size (a 3x3 conv with padding 1) gives back ``size`` itself, so the
    shapes of a residual connection still compare equal.
    """
    if stride == 1:
        return plus(size, extra + 1)
    return plus(size, extra) // stride + 1


def check_rank(name, shape, ndim):
    """True for a batched input of ``ndim`` dims, False for an unbatched one; else a ShapeError."""
    if len(shape) == ndim:
        return True
    if len(shape) == ndim - 1:
        return False
    raise ShapeError(f"{name}: expected a {ndim - 1}-D (unbatched) or {ndim}-D (batched) input, "
                     f"got a {len(shape)}-D input of shape {shown(shape)}")


def pad2d(xp, x, top, bottom, left, right, value=0):
    """``x`` (N, C, H, W) inside a border of ``value``: `pad_spatial` with the four amounts spelled out."""
    return pad_spatial(xp, x, ((top, bottom), (left, right)), value)


def _check_dtypes(name, x, weight, bias):
    require_float(name, x)
    x_dt, w_dt = dtype_of(x), dtype_of(weight)
    if w_dt is not x_dt:
        raise DTypeError(f"{name}: input ({x_dt.name}) and weight ({w_dt.name}) must have the same dtype; "
                         f"cast one with .to({x_dt.name})")
    if bias is not None and dtype_of(bias) is not x_dt:
        raise DTypeError(f"{name}: input ({x_dt.name}) and bias ({dtype_of(bias).name}) must have the same "
                         f"dtype; cast one with .to({x_dt.name})")


def _check_positive(name, values, what):
    if any(isinstance(v, int) and v < 1 for v in values):
        raise ShapeError(f"{name}: {what} must be positive, got {values}")


def _check_weight_and_bias(name, nd, x_shape, w_shape, bias, groups, transposed):
    """PyTorch's checks of a (transposed) convolution's weight, groups and bias; returns out_channels."""
    layout = "in_channels, out_channels/groups" if transposed else "out_channels, in_channels/groups"
    spatial = ", ".join(("kD", "kH", "kW")[3 - nd:] if nd > 1 else ("kL",))
    if len(w_shape) != nd + 2:
        raise ShapeError(f"{name}: expected a {nd + 2}-D weight ({layout}, {spatial}), "
                         f"got one of shape {shown(w_shape)}")
    if not isinstance(groups, int) or groups < 1:
        raise ShapeError(f"{name}: groups must be a positive integer, got {groups!r}")
    channels = x_shape[1]
    if transposed:
        expected, out_channels = w_shape[0], w_shape[1] * groups
    else:
        expected, out_channels = w_shape[1] * groups, w_shape[0]
        if isinstance(w_shape[0], int) and w_shape[0] % groups:
            raise ShapeError(f"{name}: weight of shape {shown(w_shape)} has {w_shape[0]} output channels, "
                             f"which groups={groups} does not divide")
    if dims_differ(channels, expected):
        raise ShapeError(f"{name}: weight of shape {shown(w_shape)} expects {expected} input channels "
                         f"(groups={groups}), got an input of shape {shown(x_shape)}")
    if isinstance(channels, int) and channels % groups:
        raise ShapeError(f"{name}: input channels ({channels}) must be divisible by groups ({groups})")
    if bias is not None and (len(bias.shape) != 1 or dims_differ(bias.shape[0], out_channels)):
        raise ShapeError(f"{name}: weight of shape {shown(w_shape)} expects a bias of shape [{out_channels}], "
                         f"got {shown(bias.shape)}")
    return out_channels


def conv_geometry(name, nd, x, weight, bias, stride, padding, dilation, groups):
    """Check a convolution's arguments like PyTorch.

    Returns ``(batched, stride, pads, dilation, out_shape)``; ``pads`` holds a
    ``(before, after)`` pair per spatial dim ('same' pads the odd extra after,
    as PyTorch does) and ``out_shape`` is the result's shape.
    """
    batched = check_rank(name, x.shape, nd + 2)
    x_shape = tuple(x.shape) if batched else (1,) + tuple(x.shape)
    _check_dtypes(name, x, weight, bias)
    out_channels = _check_weight_and_bias(name, nd, x_shape, weight.shape, bias, groups, transposed=False)
    stride = ntuple(stride, nd, name, "stride")
    dilation = ntuple(dilation, nd, name, "dilation")
    _check_positive(name, stride, "stride")
    _check_positive(name, dilation, "dilation")
    kernel = tuple(weight.shape[2:])
    if isinstance(padding, str):
        if padding == "valid":
            pads = ((0, 0),) * nd
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise ShapeError(f"{name}: padding='same' is not supported for strided convolutions "
                                 f"(stride={stride}); pad explicitly instead")
            pads = tuple((d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(kernel, dilation))
        else:
            raise ShapeError(f"{name}: invalid padding string {padding!r}, expected 'valid' or 'same'")
    else:
        pads = tuple((p, p) for p in ntuple(padding, nd, name, "padding"))
        if any(p < 0 for p, _ in pads):
            raise ShapeError(f"{name}: negative padding is not supported, got padding={padding!r}")
    out = []
    for size, (lo, hi), k, s, d in zip(x_shape[2:], pads, kernel, stride, dilation):
        span = d * (k - 1) + 1
        if isinstance(size, int) and span > size + lo + hi:
            raise ShapeError(f"{name}: the kernel {shown(kernel)} (dilation {list(dilation)}) is larger than "
                             f"the padded input of shape {shown(x.shape)} with padding {padding!r}; "
                             f"use a smaller kernel or more padding")
        out.append(sliding_size(size, lo + hi - span, s))
    out_shape = (x_shape[0], out_channels, *out)
    return batched, stride, pads, dilation, out_shape if batched else out_shape[1:]


def pad_spatial(xp, x, pads, value=0):
    """``x`` (N, C, *spatial) inside a border of ``value``, ``pads`` holding a ``(before, after)``
    pair per spatial dim; faster than ``xp.pad`` (one fill, one copy)."""
    shape = tuple(x.shape[:2]) + tuple(lo + size + hi for size, (lo, hi) in zip(x.shape[2:], pads))
    out = xp.zeros(shape, x.dtype) if value == 0 else xp.full(shape, value, x.dtype)
    out[(slice(None), slice(None)) + tuple(slice(lo, lo + size) for size, (lo, _) in zip(x.shape[2:], pads))] = x
    return out


def _conv_nchw(xp, x, weight, bias, stride, pads, dilation, groups):
    """The convolution of a batched ``(N, C, *spatial)`` input (any number of spatial dims):
    im2col and one batched matmul."""
    if x.dtype.kind == BFLOAT16_KIND:
        return run_in_float32(_conv_nchw, xp, x, weight, bias, stride, pads, dilation, groups)
    n, oc, cg, kernel = x.shape[0], weight.shape[0], weight.shape[1], tuple(weight.shape[2:])
    out_sizes = tuple((size + lo + hi - d * (k - 1) - 1) // s + 1
                      for size, (lo, hi), k, s, d in zip(x.shape[2:], pads, kernel, stride, dilation))
    g, k, pixels = groups, cg * _product(kernel), _product(out_sizes)
    if g == 1 and len(kernel) == 2 and channels_last_pays(xp, n, cg, weight.shape, out_sizes):
        return conv2d_channels_last(xp, x, weight, bias, stride, pads, dilation, out_sizes)
    wmat = weight.reshape(g, oc // g, k)
    bias_shape = (oc,) + (1,) * len(kernel)
    if pixels < _PER_IMAGE_GEMM_MIN_PIXELS and k >= oc // g and has_short_rows(out_sizes):
        # Small maps whose columns outweigh the output: gathered batch-last, one product, one transposing copy.
        cols = batch_last_columns(xp, batch_last_input(xp, x, pads), g, kernel, stride, dilation, out_sizes)
        prod = xp.matmul(wmat, cols, out=scratch(xp, "batch-last product", (g, oc // g, cols.shape[-1]), x.dtype))
        out = batch_first(xp, prod, oc, out_sizes, n)
        if bias is not None:
            out += bias.reshape(bias_shape)
        return out
    if any(lo or hi for lo, hi in pads):
        x = pad_spatial(xp, x, pads)
    s_n, s_c, spatial_strides = x.strides[0], x.strides[1], x.strides[2:]
    taps = (cg * s_c, s_c) + tuple(st * d for st, d in zip(spatial_strides, dilation))
    moves = tuple(st * s for st, s in zip(spatial_strides, stride))
    as_strided = xp.lib.stride_tricks.as_strided
    if pixels >= _PER_IMAGE_GEMM_MIN_PIXELS:
        # (N, G, Cg*K..., OUT...) columns: the product is (N, G, OCg, OUT...), already NCHW.
        # A 1x1 stride-1 conv of a contiguous input reshapes without copying here.
        cols = as_strided(x, (n, g, cg) + kernel + out_sizes, (s_n,) + taps + moves)
        out = xp.matmul(wmat, cols.reshape(n, g, k, pixels)).reshape((n, oc) + out_sizes)
        if bias is not None:
            out += bias.reshape(bias_shape)
        return out
    # Small maps: one (OCg, K) x (K, N*OUT) product per group, then one transposing copy.
    cols = as_strided(x, (g, cg) + kernel + (n,) + out_sizes, taps + (s_n,) + moves)
    prod = xp.matmul(wmat, cols.reshape(g, k, n * pixels)).reshape((oc, n) + out_sizes)
    prod = prod.transpose((1, 0) + tuple(range(2, 2 + len(kernel))))
    out = xp.empty((n, oc) + out_sizes, prod.dtype)
    if bias is None:
        out[...] = prod
    else:
        xp.add(prod, bias.reshape(bias_shape), out=out)
    return out


def _product(values):
    total = 1
    for v in values:
        total *= v
    return total


def _conv2d_rule(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    out_shape = conv_geometry("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)[-1]
    return TensorMeta(out_shape, input.dtype, input.device)


@op("conv2d", kind="conv", shape_rule=_conv2d_rule, method=False)
def conv2d(xp, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation, as ``torch.nn.functional.conv2d``.

    Args:
        input: ``(N, C, H, W)`` or unbatched ``(C, H, W)``.
        weight: ``(out_channels, C / groups, kH, kW)``.
        bias: ``(out_channels,)`` or None.
        stride, dilation: an int or a pair.
        padding: an int, a pair, ``'valid'`` (none) or ``'same'`` (output as large as the input).
        groups: split the channels into this many independent convolutions.

    Example:
        >>> fxkit.conv2d(fxkit.randn(8, 3, 32, 32), fxkit.randn(16, 3, 3, 3), padding=1).shape
        (8, 16, 32, 32)
    """
    batched, stride, pads, dilation, out_shape = conv_geometry(
        "conv2d", 2, input, weight, bias, stride, padding, dilation, groups)
    x = input if batched else input[None]
    return _conv_nchw(xp, x, weight, bias, stride, pads, dilation, groups).reshape(out_shape)


def _conv3d_rule(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    out_shape = conv_geometry("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)[-1]
    return TensorMeta(out_shape, input.dtype, input.device)


@op("conv3d", kind="conv", shape_rule=_conv3d_rule, method=False)
def conv3d(xp, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-D cross-correlation, as ``torch.nn.functional.conv3d`` (video models: r3d, r(2+1)d).

    Args:
        input: ``(N, C, D, H, W)`` or unbatched ``(C, D, H, W)``.
        weight: ``(out_channels, C / groups, kD, kH, kW)``.
        bias, stride, padding, dilation, groups: as in `conv2d`, with triples.

    Example:
        >>> fxkit.conv3d(fxkit.randn(1, 3, 4, 8, 8), fxkit.randn(16, 3, 3, 3, 3), padding=1).shape
        (1, 16, 4, 8, 8)
    """
    batched, stride, pads, dilation, out_shape = conv_geometry(
        "conv3d", 3, input, weight, bias, stride, padding, dilation, groups)
    x = input if batched else input[None]
    return _conv_nchw(xp, x, weight, bias, stride, pads, dilation, groups).reshape(out_shape)


def _conv1d_rule(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    out_shape = conv_geometry("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)[-1]
    return TensorMeta(out_shape, input.dtype, input.device)


@op("conv1d", kind="conv", shape_rule=_conv1d_rule, method=False)
def conv1d(xp, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D cross-correlation, as ``torch.nn.functional.conv1d``: conv2d over a height of one.

    Args:
        input: ``(N, C, L)`` or unbatched ``(C, L)``.
        weight: ``(out_channels, C / groups, kL)``.
        bias, stride, padding, dilation, groups: as in `conv2d`, with single values.
    """
    batched, (s,), (pads,), (d,), out_shape = conv_geometry(
        "conv1d", 1, input, weight, bias, stride, padding, dilation, groups)
    x = input[:, :, None, :] if batched else input[None, :, None, :]
    out = _conv_nchw(xp, x, weight[:, :, None, :], bias, (1, s), ((0, 0), pads), (1, d), groups)
    return out.reshape(out_shape)


def _transpose_geometry(x, weight, bias, stride, padding, output_padding, groups, dilation):
    """PyTorch's checks of conv_transpose2d; returns ``(batched, stride, padding, output_padding,
    dilation, out_shape)`` with pairs for the spatial arguments."""
    name = "conv_transpose2d"
    batched = check_rank(name, x.shape, 4)
    x_shape = tuple(x.shape) if batched else (1,) + tuple(x.shape)
    _check_dtypes(name, x, weight, bias)
    out_channels = _check_weight_and_bias(name, 2, x_shape, weight.shape, bias, groups, transposed=True)
    stride, padding, output_padding, dilation = (
        ntuple(v, 2, name, what) for v, what in ((stride, "stride"), (padding, "padding"),
                                                  (output_padding, "output_padding"), (dilation, "dilation")))
    _check_positive(name, stride, "stride")
    _check_positive(name, dilation, "dilation")
    if any(p < 0 for p in padding + output_padding):
        raise ShapeError(f"{name}: negative padding is not supported, got padding={list(padding)}, "
                         f"output_padding={list(output_padding)}")
    if any(op_ >= max(s, d) for op_, s, d in zip(output_padding, stride, dilation)):
        raise ShapeError(f"{name}: output padding must be smaller than either stride or dilation, but got "
                         f"output_padding={list(output_padding)}, stride={list(stride)}, dilation={list(dilation)}")
    out = []
    for size, k, s, p, op_, d in zip(x_shape[2:], weight.shape[2:], stride, padding, output_padding, dilation):
        o = plus(size if s == 1 else size * s, d * (k - 1) + op_ + 1 - s - 2 * p)
        if isinstance(o, int) and o < 1:
            raise ShapeError(f"{name}: input of shape {shown(x.shape)} gives an output size of {o} with "
                             f"padding={list(padding)}; use less padding")
        out.append(o)
    out_shape = (x_shape[0], out_channels, *out)
    return batched, stride, padding, output_padding, dilation, out_shape if batched else out_shape[1:]


def _conv_transpose2d_rule(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    out_shape = _transpose_geometry(input, weight, bias, stride, padding, output_padding, groups, dilation)[-1]
    return TensorMeta(out_shape, input.dtype, input.device)


@op("conv_transpose2d", kind="conv", shape_rule=_conv_transpose2d_rule, method=False)
def conv_transpose2d(xp, input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """2-D transposed convolution, as ``torch.nn.functional.conv_transpose2d``.

    Every input pixel scatters ``weight``'s taps into the output: one batched
    matmul gives all contributions, then each of the kH*kW taps is added into
    the strided slice of the output it lands on (col2im, `_col2im`).

    Args:
        input: ``(N, C, H, W)`` or unbatched ``(C, H, W)``.
        weight: ``(C, out_channels / groups, kH, kW)``.
        bias: ``(out_channels,)`` or None.
        stride, padding, output_padding, dilation: an int or a pair; ``output_padding``
            adds rows and columns after the last ones to pick among the input sizes a
            strided conv2d maps to the same output size.
        groups: as in `conv2d`.
    """
    batched, (sh, sw), (ph, pw), output_padding, (dh, dw), out_shape = _transpose_geometry(
        input, weight, bias, stride, padding, output_padding, groups, dilation)
    if input.dtype.kind == BFLOAT16_KIND:
        return run_in_float32(conv_transpose2d.impl, xp, input, weight, bias, stride, padding, output_padding,
                              groups, dilation)
    x = input if batched else input[None]
    out = _col2im(xp, x, weight, groups, (sh, sw), (ph, pw), (dh, dw), out_shape[-2:])
    if bias is not None:
        out += bias.reshape(-1, 1, 1)
    return out.reshape(out_shape)


def _col2im(xp, x, weight, groups, stride, padding, dilation, out_hw):
    """The batched transposed convolution without its bias: one product gives every input
    pixel's contribution to each kernel tap, and each tap's contributions are added straight
    into the strided slice of the output they land on, clipped to it (col2im).

    Nothing is copied but the product's input on small maps: the weight enters the product as
    a transposed view, and the output is written in place, so no padded buffer is cropped and
    no flipped kernel is made (a flipped copy of a 512x512x3x3 kernel costs more than
    the product on ResNet-18's 2x2 maps). Maps under `_PER_IMAGE_GEMM_MIN_PIXELS` pixels fold
    the batch into one product, as conv2d does (per-image products with a handful of columns
    leave BLAS idle), batch-last (`col2im_batch_last`)."""
    n, c, h, w = x.shape
    _, ocg, kh, kw = weight.shape
    g, oc, cg = groups, ocg * groups, c // groups
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    oh, ow = out_hw
    if (g, stride, dilation) == (1, (1, 1), (1, 1)) and channels_last_transposed_pays(xp, x.shape, weight.shape,
                                                                                       padding):
        return conv_transpose2d_channels_last(xp, x, weight, padding, out_hw)
    wmat = weight.reshape(g, cg, ocg * kh * kw).transpose(0, 2, 1)
    if h * w < _PER_IMAGE_GEMM_MIN_PIXELS:
        return col2im_batch_last(xp, x, wmat, oc, (kh, kw), stride, padding, dilation, out_hw)
    out = xp.zeros((n, oc, oh, ow), x.dtype)
    taps = xp.matmul(wmat, x.reshape(n, g, cg, h * w)).reshape(n, oc, kh, kw, h, w).transpose(2, 3, 0, 1, 4, 5)
    for i in range(kh):
        y0, y1, top = tap_span(h, oh, i * dh - ph, sh)
        for j in range(kw):
            x0, x1, left = tap_span(w, ow, j * dw - pw, sw)
            if y1 > y0 and x1 > x0:
                out[:, :, top:top + (y1 - y0 - 1) * sh + 1:sh, left:left + (x1 - x0 - 1) * sw + 1:sw] += \
                    taps[i, j, :, :, y0:y1, x0:x1]
    return out
