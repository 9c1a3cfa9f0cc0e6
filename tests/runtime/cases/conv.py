"""Cases for fxkit/runtime/ops/conv.py: conv1d, conv2d, conv_transpose2d.

The numpy references are the definitions written as loops over kernel taps
(conv) or input pixels (transposed conv) in float64, independent of the
im2col implementation; PyTorch cases cover the argument combinations.
Both product layouts of conv2d are exercised: maps of 256+ output pixels
(per-image products) and smaller ones (the batch folded into one product).
"""
import warnings

import numpy as np

import fxkit
from tests.runtime.opcheck import case, randf, torch_ref

CONV_TOL = {"rtol": 1e-4, "atol": 1e-5}


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def ref_conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    """Cross-correlation by its definition: a sum over kernel taps of shifted, strided inputs."""
    unbatched = x.ndim == 3
    x = x[None] if unbatched else x
    (sh, sw), (dh, dw) = _pair(stride), _pair(dilation)
    kh, kw = w.shape[2:]
    if padding == "valid":
        padding = 0
    if padding == "same":
        th, tw = dh * (kh - 1), dw * (kw - 1)
        pads = ((th // 2, th - th // 2), (tw // 2, tw - tw // 2))
    else:
        ph, pw = _pair(padding)
        pads = ((ph, ph), (pw, pw))
    x = np.pad(x, ((0, 0), (0, 0)) + pads)
    n, _, h, wd = x.shape
    oc, cg = w.shape[:2]
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (wd - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, oc, oh, ow))
    per_group = oc // groups
    for o in range(oc):
        g = o // per_group
        xs = x[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
                out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j])
    if b is not None:
        out += b[:, None, None]
    return out[0] if unbatched else out


def ref_conv1d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    unbatched = x.ndim == 2
    x = x[None] if unbatched else x
    pad2 = padding if isinstance(padding, str) else (0, padding)
    out = ref_conv2d(x[:, :, None], w[:, :, None], b, (1, stride), pad2, (1, dilation), groups)[:, :, 0]
    return out[0] if unbatched else out


def ref_conv_transpose2d(x, w, b=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """Transposed convolution by its definition: every input pixel adds its value times the
    kernel at ``(h * stride - padding + i * dilation, ...)`` of the output."""
    unbatched = x.ndim == 3
    x = x[None] if unbatched else x
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = map(_pair, (stride, padding, output_padding, dilation))
    n, c, h, wd = x.shape
    cg, ocg, kh, kw = c // groups, w.shape[1], w.shape[2], w.shape[3]
    oh = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    ow = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    out = np.zeros((n, ocg * groups, oh, ow))
    for g in range(groups):
        xs, ws = x[:, g * cg:(g + 1) * cg], w[g * cg:(g + 1) * cg]
        for y in range(h):
            for z in range(wd):
                for i in range(kh):
                    for j in range(kw):
                        r, q = y * sh - ph + i * dh, z * sw - pw + j * dw
                        if 0 <= r < oh and 0 <= q < ow:
                            out[:, g * ocg:(g + 1) * ocg, r, q] += xs[:, :, y, z] @ ws[:, :, i, j]
    if b is not None:
        out += b[:, None, None]
    return out[0] if unbatched else out


def channels_last(r, n, c, h, w, dtype=np.float32):
    """An NCHW view of NHWC memory, as a channels-last tensor is."""
    return randf(r, n, h, w, c, dtype=dtype).transpose(0, 3, 1, 2)


def torch_functional(name):
    """``torch.nn.functional.<name>`` as a reference (torch imported only when the case runs)."""
    def call(*args, **kwargs):
        import torch.nn.functional as F

        with warnings.catch_warnings():  # PyTorch warns that 'same' with an even kernel copies
            warnings.simplefilter("ignore", UserWarning)
            return getattr(F, name)(*args, **kwargs)
    return torch_ref(call)


def conv_case(op, ref, make, id, **options):
    """A numpy-reference case and the same inputs against PyTorch."""
    case(op, make, ref, id=id, **CONV_TOL, **options)
    case(op, make, torch_functional(op), id=f"{id}-torch", **CONV_TOL, **options)


def _conv(shape_x, shape_w, bias=True, x=None, **kwargs):
    def make(r):
        args = (randf(r, *shape_x) if x is None else x(r), randf(r, *shape_w))
        if bias:
            args += (randf(r, shape_w[0]),)
        return args, dict(kwargs)
    return make


def _register():
    # -- conv2d: the two product layouts, padding forms, groups ---------------------------
    c2 = ("conv2d", ref_conv2d)
    conv_case(*c2, _conv((2, 3, 18, 18), (4, 3, 3, 3)), id="per-image-layout")
    conv_case(*c2, _conv((2, 3, 7, 6), (4, 3, 3, 2), stride=2, padding=1), id="folded-layout-stride-pad")
    conv_case(*c2, _conv((2, 4, 9, 9), (6, 2, 3, 3), dilation=2, padding=(1, 2), groups=2), id="dilation-groups")
    conv_case(*c2, _conv((2, 3, 6, 7), (4, 3, 4, 3), padding="same"), id="same-even-kernel")
    conv_case(*c2, _conv((1, 2, 8, 8), (3, 2, 3, 3), bias=False, padding="same", dilation=(2, 1)), id="same-dilated")
    conv_case(*c2, _conv((2, 3, 6, 7), (4, 3, 3, 3), padding="valid", stride=(1, 2)), id="valid-stride-pair")
    conv_case(*c2, _conv((2, 4, 20, 16), (4, 1, 3, 3), padding=1, groups=4), id="depthwise")
    conv_case(*c2, _conv((2, 4, 5, 5), (8, 1, 3, 3), bias=False, groups=4), id="depthwise-multiplier")
    conv_case(*c2, _conv((3, 6, 5), (4, 3, 3, 2)), id="unbatched")
    conv_case(*c2, _conv((2, 8, 16, 16), (5, 8, 1, 1)), id="pointwise-view")
    conv_case(*c2, _conv((2, 8, 6, 6), (5, 8, 1, 1), bias=False, stride=2), id="pointwise-strided")
    conv_case(*c2, _conv(None, (5, 8, 1, 1), x=lambda r: channels_last(r, 2, 8, 16, 16)), id="pointwise-channels-last")
    conv_case(*c2, _conv(None, (4, 3, 3, 3), x=lambda r: channels_last(r, 2, 3, 18, 18), padding=1),
              id="channels-last-per-image")
    conv_case(*c2, _conv(None, (4, 3, 3, 3), x=lambda r: channels_last(r, 2, 3, 7, 5)), id="channels-last-folded")
    conv_case(*c2, _conv(None, (4, 3, 2, 3), x=lambda r: randf(r, 2, 3, 9, 12)[:, :, ::-1, ::2]),
              id="negative-stride-view")
    conv_case(*c2, _conv(None, (4, 3, 3, 3), x=lambda r: randf(r, 2, 3, 20, 36)[:, :, ::-1, ::2]),
              id="negative-stride-view-per-image")
    conv_case(*c2, lambda r: ((randf(r, 2, 3, 6, 6), randf(r, 3, 4, 3, 3).transpose(1, 0, 2, 3),
                               randf(r, 8)[::2]), {"padding": 1}), id="non-contiguous-weight-bias")
    conv_case(*c2, _conv((2, 3, 10, 10), (4, 3, 7, 7), stride=2, padding=3), id="stem-7x7")
    conv_case(*c2, _conv((0, 3, 6, 6), (4, 3, 3, 3)), id="empty-batch")
    # 16+ channels over batch x pixels >= 512: the channels-last columns (fxkit/runtime/ops/channels_last_columns.py)
    conv_case(*c2, _conv((8, 16, 8, 8), (24, 16, 3, 3), padding=1), id="channels-last-columns")
    conv_case(*c2, _conv((16, 32, 9, 8), (8, 32, 3, 2), bias=False, stride=(2, 1), padding=(2, 0), dilation=2),
              id="channels-last-columns-stride-dilation")
    conv_case(*c2, _conv(None, (20, 16, 3, 3), x=lambda r: channels_last(r, 8, 16, 8, 8), padding=1),
              id="channels-last-columns-of-channels-last-memory")
    case("conv2d", lambda r: ((randf(r, 2, 3, 5, 5, dtype=np.float64), randf(r, 4, 3, 3, 3, dtype=np.float64),
                               randf(r, 4, dtype=np.float64)), {"padding": 1}),
         ref_conv2d, id="float64", rtol=1e-10, atol=1e-12, dtype=fxkit.float64)

    # -- conv1d ----------------------------------------------------------------------------
    c1 = ("conv1d", ref_conv1d)
    conv_case(*c1, _conv((2, 4, 11), (6, 2, 3), groups=2, padding=2, dilation=2), id="groups-dilation")
    conv_case(*c1, _conv((2, 3, 9), (4, 3, 4), bias=False, padding="same"), id="same")
    conv_case(*c1, _conv((3, 300), (2, 3, 3), stride=1), id="unbatched-long")
    conv_case(*c1, _conv((2, 3, 10), (4, 3, 3), stride=3, padding=1), id="stride")

    # -- conv_transpose2d ------------------------------------------------------------------
    ct = ("conv_transpose2d", ref_conv_transpose2d)

    def _convt(shape_x, shape_w, bias=True, groups=1, x=None, **kwargs):
        def make(r):
            args = (randf(r, *shape_x) if x is None else x(r), randf(r, *shape_w))
            if bias:
                args += (randf(r, shape_w[1] * groups),)
            return args, dict(kwargs, groups=groups)
        return make

    conv_case(*ct, _convt((2, 3, 4, 5), (3, 4, 3, 3)), id="basic")
    conv_case(*ct, _convt((2, 4, 4, 4), (4, 3, 3, 3), stride=2, padding=1, output_padding=1, groups=2),
              id="stride-output-padding-groups")
    conv_case(*ct, _convt((2, 4, 3, 5), (4, 2, 2, 3), bias=False, stride=(2, 3), padding=(0, 2),
                          output_padding=(1, 2)), id="pairs")
    conv_case(*ct, _convt((1, 2, 4, 4), (2, 3, 3, 3), stride=2, dilation=2, padding=1, output_padding=1),
              id="dilation-output-padding")
    conv_case(*ct, _convt((3, 4, 4), (3, 2, 2, 2), stride=2), id="unbatched")
    conv_case(*ct, _convt(None, (3, 2, 3, 3), x=lambda r: channels_last(r, 2, 3, 4, 5), padding=1),
              id="channels-last")
    # stride 1, 16+ channels: the conv of the padded input by the flipped weight over channels-last columns
    conv_case(*ct, _convt((4, 16, 6, 7), (16, 12, 3, 3), padding=1), id="stride-1-channels-last-columns")
    conv_case(*ct, _convt((2, 32, 5, 5), (32, 8, 3, 2), bias=False, padding=(0, 1)), id="stride-1-full-and-cropped")


_register()
