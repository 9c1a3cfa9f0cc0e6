"""Cases for fxkit/runtime/ops/pooling.py and interpolate.py.

The numpy references follow PyTorch's definitions window by window (or output
pixel by output pixel) in float64: the output size with ceil mode's rule,
max pooling's scan order for indices, avg pooling's divisors and adaptive
pooling's start/end formula. PyTorch cases cover the argument combinations.
"""
import math

import numpy as np

import fxkit
from tests.runtime.cases.conv import channels_last, torch_functional
from tests.runtime.opcheck import case, randf, randi

TOL = {"rtol": 1e-5, "atol": 1e-6}
BILINEAR_TOL = {"rtol": 1e-4, "atol": 1e-5}  # float32 blends against float64 ones


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _out_size(size, k, s, p, d, ceil_mode):
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _batched(fn):
    """Run a reference written for (N, C, H, W) on an unbatched (C, H, W) input too."""
    def ref(x, *args, **kwargs):
        if x.ndim == 4:
            return fn(x, *args, **kwargs)
        out = fn(x[None], *args, **kwargs)
        return tuple(o[0] for o in out) if isinstance(out, tuple) else out[0]
    return ref


@_batched
def ref_max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    (kh, kw), (ph, pw), (dh, dw) = _pair(kernel_size), _pair(padding), _pair(dilation)
    sh, sw = _pair(kernel_size if stride is None else stride)
    n, c, h, w = x.shape
    oh, ow = _out_size(h, kh, sh, ph, dh, ceil_mode), _out_size(w, kw, sw, pw, dw, ceil_mode)
    values, indices = np.zeros((n, c, oh, ow), x.dtype), np.zeros((n, c, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            taps = [(r, q) for r in range(i * sh - ph, i * sh - ph + kh * dh, dh) if 0 <= r < h
                    for q in range(j * sw - pw, j * sw - pw + kw * dw, dw) if 0 <= q < w]
            window = np.stack([x[:, :, r, q] for r, q in taps], axis=-1)
            best = window.argmax(axis=-1)  # the first maximum in scan order, as PyTorch
            values[:, :, i, j] = np.take_along_axis(window, best[..., None], -1)[..., 0]
            indices[:, :, i, j] = np.array([r * w + q for r, q in taps])[best]
    return (values, indices) if return_indices else values


def _pool_backward_input(shape, geometry, dtype=np.float32):
    """``(grad_output, input_shape, kernel_size, stride, padding, dilation, ceil_mode, indices)`` for a max pool of
    a random input of ``shape`` with ``geometry``, its indices from the reference pool."""
    def make(r):
        x = randf(r, *shape, dtype=dtype)
        _, indices = ref_max_pool2d(x, return_indices=True, **geometry)
        g = randf(r, *indices.shape, dtype=dtype)
        return (g, shape, geometry["kernel_size"], geometry.get("stride", ()), geometry.get("padding", 0),
                geometry.get("dilation", 1), geometry.get("ceil_mode", False), indices), {}
    return make


def ref_max_pool2d_backward(g, input_shape, kernel_size, stride, padding, dilation, ceil_mode, indices):
    """Zeros of ``input_shape`` with every gradient added at the flat index its window picked, in float64."""
    lead = tuple(input_shape[:-2])
    out = np.zeros(lead + (input_shape[-2] * input_shape[-1],))
    rows = out.reshape(-1, out.shape[-1])
    for row, index, values in zip(rows, indices.reshape(len(rows), -1), g.reshape(len(rows), -1).astype(np.float64)):
        np.add.at(row, index, values)
    return out.reshape(input_shape).astype(g.dtype)


@_batched
def ref_avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                   divisor_override=None):
    (kh, kw), (ph, pw) = _pair(kernel_size), _pair(padding)
    sh, sw = _pair(kernel_size if stride is None else stride)
    n, c, h, w = x.shape
    oh, ow = _out_size(h, kh, sh, ph, 1, ceil_mode), _out_size(w, kw, sw, pw, 1, ceil_mode)
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            r0, q0 = i * sh - ph, j * sw - pw
            r1, q1 = min(r0 + kh, h + ph), min(q0 + kw, w + pw)
            pool_size = (r1 - r0) * (q1 - q0)
            r0, q0, r1, q1 = max(r0, 0), max(q0, 0), min(r1, h), min(q1, w)
            total = x[:, :, r0:r1, q0:q1].sum(axis=(2, 3))
            divisor = divisor_override or (pool_size if count_include_pad else (r1 - r0) * (q1 - q0))
            out[:, :, i, j] = total / divisor
    return out if x.dtype.kind == "f" else np.trunc(out).astype(x.dtype)


@_batched
def ref_adaptive_avg_pool2d(x, output_size):
    h, w = x.shape[2:]
    oh, ow = (h if o is None else o for o, h in zip(_pair(output_size), (h, w)))
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            r0, r1 = math.floor(i * h / oh), math.ceil((i + 1) * h / oh)
            q0, q1 = math.floor(j * w / ow), math.ceil((j + 1) * w / ow)
            out[:, :, i, j] = x[:, :, r0:r1, q0:q1].mean(axis=(2, 3))
    return out


def _nearest(in_size, out_size, scale):
    """PyTorch's nearest source index: floor(dst * ratio), the ratio and product in float32."""
    ratio = np.float32(1.0 / scale) if scale else np.float32(in_size) / np.float32(out_size)
    return [min(int(np.floor(np.float32(d) * ratio)), in_size - 1) for d in range(out_size)]


def _linear(in_size, out_size, scale, align_corners):
    """Per output index: (i0, i1, lambda1) of PyTorch's linear interpolation, in float64."""
    taps = []
    for d in range(out_size):
        if align_corners:
            src = d * (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
        else:
            ratio = 1.0 / scale if scale else in_size / out_size
            src = max(ratio * (d + 0.5) - 0.5, 0.0)
        i0 = min(int(math.floor(src)), in_size - 1)
        taps.append((i0, min(i0 + 1, in_size - 1), min(max(src - i0, 0.0), 1.0)))
    return taps


def ref_interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                    recompute_scale_factor=None):
    h, w = x.shape[2:]
    if size is not None:
        (oh, ow), scales = _pair(size), (None, None)
    else:
        factors = _pair(scale_factor)
        oh, ow = (math.floor(d * f) for d, f in zip((h, w), factors))
        scales = (None, None) if recompute_scale_factor else factors
    if mode == "nearest":
        return x[:, :, _nearest(h, oh, scales[0])][:, :, :, _nearest(w, ow, scales[1])]
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i, (r0, r1, a) in enumerate(_linear(h, oh, scales[0], align_corners)):
        for j, (q0, q1, b) in enumerate(_linear(w, ow, scales[1], align_corners)):
            out[:, :, i, j] = ((1 - a) * ((1 - b) * x[:, :, r0, q0] + b * x[:, :, r0, q1])
                               + a * ((1 - b) * x[:, :, r1, q0] + b * x[:, :, r1, q1]))
    return out


def pool_case(op, ref, make, id, tol=TOL, **options):
    """A numpy-reference case and the same inputs against PyTorch."""
    case(op, make, ref, id=id, **tol, **options)
    case(op, make, torch_functional(op), id=f"{id}-torch", **tol, **options)


def _input(*shape, x=None, **kwargs):
    return lambda r: ((randf(r, *shape) if x is None else x(r),), dict(kwargs))


def _register():
    mp = ("max_pool2d", ref_max_pool2d)
    pool_case(*mp, _input(2, 3, 6, 8, kernel_size=2), id="basic")
    pool_case(*mp, _input(2, 3, 9, 9, kernel_size=3, stride=2, padding=1), id="resnet-stem")
    pool_case(*mp, _input(1, 2, 8, 7, kernel_size=3, stride=2, ceil_mode=True), id="ceil-partial-window")
    pool_case(*mp, _input(1, 2, 5, 5, kernel_size=2, stride=2, padding=1, ceil_mode=True), id="ceil-drops-last")
    pool_case(*mp, _input(2, 2, 9, 10, kernel_size=(2, 3), stride=(1, 2), padding=1, dilation=2), id="dilation")
    pool_case(*mp, _input(2, 3, 7, 7, kernel_size=3, stride=2, padding=1, ceil_mode=True, return_indices=True),
              id="indices-padded-ceil")
    pool_case(*mp, _input(2, 2, 8, 9, kernel_size=2, dilation=(2, 3), padding=1, return_indices=True),
              id="indices-dilation")
    pool_case(*mp, _input(3, 6, 6, kernel_size=2, return_indices=True), id="unbatched-indices")
    pool_case(*mp, _input(x=lambda r: channels_last(r, 2, 3, 8, 8), kernel_size=3, stride=2, padding=1),
              id="channels-last")
    pool_case(*mp, _input(0, 3, 4, 4, kernel_size=2), id="empty-batch")
    case("max_pool2d", lambda r: ((randi(r, 2, 3, 6, 6, low=-50, high=50),), {"kernel_size": 3, "padding": 1}),
         ref_max_pool2d, id="int64", dtype=fxkit.int64)
    case("max_pool2d", lambda r: ((randi(r, 2, 3, 7, 7, low=-3, high=3),),
                                  {"kernel_size": 3, "stride": 2, "padding": 1, "return_indices": True}),
         ref_max_pool2d, id="int64-ties-keep-first")

    def with_nans(r):
        x = randf(r, 1, 2, 6, 6)
        x[0, 0, 1, 1] = x[0, 1, 4, 3] = x[0, 1, 4, 5] = np.nan
        return (x,), {"kernel_size": 3, "stride": 2, "padding": 1, "return_indices": True}
    case("max_pool2d", with_nans, torch_functional("max_pool2d"), id="nan-wins-torch")

    def with_minus_inf(r):
        x = randf(r, 1, 2, 7, 7)
        x[0, 0, :4, :4] = x[0, 1, 2:, 3:] = -np.inf  # windows whose index stays at their first real element
        return (x,), {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": (1, 2), "return_indices": True}
    case("max_pool2d", with_minus_inf, torch_functional("max_pool2d"), id="all-minus-inf-window-torch")

    for shape, geometry, name in (((2, 3, 6, 8), {"kernel_size": 2}, "disjoint"),
                                  ((2, 3, 9, 9), {"kernel_size": 3, "stride": 2, "padding": 1}, "overlapping"),
                                  ((3, 7, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
                                   "unbatched-ceil"),
                                  ((2, 2, 8, 9), {"kernel_size": 2, "dilation": (2, 3), "padding": 1}, "dilation")):
        case("max_pool2d_with_indices_backward", _pool_backward_input(shape, geometry), ref_max_pool2d_backward,
             id=name, **TOL)
    case("max_pool2d_with_indices_backward", _pool_backward_input((32, 16, 8, 8), {"kernel_size": 2}),
         ref_max_pool2d_backward, id="disjoint-rows-loop", **TOL)
    case("max_pool2d_with_indices_backward",
         _pool_backward_input((2, 3, 6, 8), {"kernel_size": 2}, np.float64), ref_max_pool2d_backward, id="float64")

    ap = ("avg_pool2d", ref_avg_pool2d)
    pool_case(*ap, _input(2, 3, 6, 8, kernel_size=2), id="basic")
    for cip in (True, False):
        pool_case(*ap, _input(2, 3, 9, 8, kernel_size=3, stride=2, padding=1, count_include_pad=cip),
                  id=f"padded-count-include-pad-{cip}")
        pool_case(*ap, _input(1, 2, 8, 7, kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=cip),
                  id=f"ceil-count-include-pad-{cip}")
    pool_case(*ap, _input(2, 2, 7, 7, kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), divisor_override=5),
              id="divisor-override")
    pool_case(*ap, _input(3, 6, 6, kernel_size=3, stride=1, padding=1), id="unbatched")
    pool_case(*ap, _input(x=lambda r: channels_last(r, 2, 4, 6, 6), kernel_size=2), id="channels-last")
    case("avg_pool2d", lambda r: ((randf(r, 2, 2, 6, 6, dtype=np.float64),), {"kernel_size": 3, "padding": 1}),
         ref_avg_pool2d, id="float64", rtol=1e-12, atol=1e-12, dtype=fxkit.float64)
    int_input = _input(x=lambda r: randi(r, 2, 2, 7, 7, low=-50, high=50), kernel_size=3, stride=2, padding=1,
                       ceil_mode=True)
    pool_case(*ap, int_input, id="int64-truncates", dtype=fxkit.int64)

    aap = ("adaptive_avg_pool2d", ref_adaptive_avg_pool2d)
    pool_case(*aap, _input(2, 8, 7, 7, output_size=1), id="global")
    pool_case(*aap, _input(2, 3, 8, 6, output_size=(4, 3)), id="divisible")
    pool_case(*aap, _input(2, 3, 7, 9, output_size=5), id="overlapping")
    pool_case(*aap, _input(2, 3, 4, 5, output_size=(None, 3)), id="none-keeps-size")
    pool_case(*aap, _input(2, 3, 4, 4, output_size=(6, 7)), id="upsampling")
    pool_case(*aap, _input(3, 10, 10, output_size=(3, 1)), id="unbatched")
    pool_case(*aap, _input(x=lambda r: channels_last(r, 2, 4, 6, 5), output_size=(4, 1)), id="channels-last")
    pool_case(*aap, _input(x=lambda r: channels_last(r, 2, 4, 6, 6), output_size=(1, 1)), id="channels-last-global")
    pool_case(*aap, _input(0, 3, 4, 4, output_size=1), id="empty-batch")
    case("adaptive_avg_pool2d", lambda r: ((randf(r, 2, 3, 5, 5, dtype=np.float64),), {"output_size": (1, 1)}),
         ref_adaptive_avg_pool2d, id="float64-global", rtol=1e-12, atol=1e-12, dtype=fxkit.float64)

    it = ("interpolate", ref_interpolate)
    pool_case(*it, _input(2, 3, 4, 5, size=(8, 10)), id="nearest-double")
    pool_case(*it, _input(2, 3, 4, 5, scale_factor=2), id="nearest-scale-2")
    pool_case(*it, _input(2, 3, 9, 8, size=(4, 5)), id="nearest-down")
    pool_case(*it, _input(2, 3, 5, 6, size=(7, 7)), id="nearest-size")
    pool_case(*it, _input(1, 2, 5, 7, scale_factor=1.7), id="nearest-scale-fraction")
    pool_case(*it, _input(1, 2, 6, 5, scale_factor=(0.5, 2.3)), id="nearest-scale-pair")
    pool_case(*it, _input(1, 2, 5, 7, scale_factor=1.7, recompute_scale_factor=True), id="nearest-recompute")
    case("interpolate", lambda r: ((randi(r, 1, 2, 3, 4),), {"size": (5, 6)}), ref_interpolate,
         id="nearest-int64", dtype=fxkit.int64)
    for ac in (False, True):
        bl = {"mode": "bilinear", "align_corners": ac}
        pool_case(*it, _input(2, 3, 4, 5, size=(8, 11), **bl), id=f"bilinear-up-ac-{ac}", tol=BILINEAR_TOL)
        pool_case(*it, _input(2, 3, 9, 8, size=(4, 3), **bl), id=f"bilinear-down-ac-{ac}", tol=BILINEAR_TOL)
        pool_case(*it, _input(1, 2, 5, 6, scale_factor=(1.5, 0.7), **bl), id=f"bilinear-scale-ac-{ac}",
                  tol=BILINEAR_TOL)
        pool_case(*it, _input(x=lambda r: channels_last(r, 2, 3, 4, 4), size=(1, 6), **bl),
                  id=f"bilinear-channels-last-ac-{ac}", tol=BILINEAR_TOL)
    pool_case(*it, _input(1, 2, 5, 7, scale_factor=1.7, mode="bilinear", recompute_scale_factor=True),
              id="bilinear-recompute", tol=BILINEAR_TOL)


_register()
