"""Cases for adaptive_max_pool2d (pooling.py) and the interpolate modes beyond 2-D
nearest/bilinear (interpolate.py): 'nearest-exact', 'linear', 'bicubic',
'trilinear', 3-D and 5-D inputs.

The numpy references follow PyTorch's formulas output pixel by output pixel in
float64 (adaptive windows; the cubic convolution with A = -0.75); PyTorch
cases cover the argument combinations.
"""
import math

import numpy as np

from tests.runtime.cases.conv import torch_functional
from tests.runtime.opcheck import case, randf

TOL = {"rtol": 1e-5, "atol": 1e-6}
BLEND_TOL = {"rtol": 1e-4, "atol": 1e-5}  # float32 blends against float64 ones


def ref_adaptive_max_pool2d(x, output_size, return_indices=False):
    h, w = x.shape[-2:]
    size = output_size if isinstance(output_size, (tuple, list)) else (output_size, output_size)
    oh, ow = (d if o is None else o for o, d in zip(size, (h, w)))
    values = np.zeros(x.shape[:-2] + (oh, ow))
    indices = np.zeros(x.shape[:-2] + (oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            r0, r1 = math.floor(i * h / oh), math.ceil((i + 1) * h / oh)
            q0, q1 = math.floor(j * w / ow), math.ceil((j + 1) * w / ow)
            window = x[..., r0:r1, q0:q1].reshape(x.shape[:-2] + (-1,))
            k = window.argmax(-1)
            values[..., i, j] = window.max(-1)
            indices[..., i, j] = (r0 + k // (q1 - q0)) * w + q0 + k % (q1 - q0)
    return (values, indices) if return_indices else values


def _cubic_weights(t, a=-0.75):
    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return far(t + 1), near(t), near(1 - t), far(2 - t)


def ref_bicubic(x, size, align_corners=False):
    """PyTorch's bicubic resize of ``(N, C, H, W)`` to ``size``, one output pixel at a time."""
    h, w = x.shape[2:]
    oh, ow = size
    out = np.zeros(x.shape[:2] + (oh, ow))

    def source(o, n, m):
        if align_corners:
            return o * ((n - 1) / (m - 1) if m > 1 else 0.0)
        return (o + 0.5) * n / m - 0.5

    for i in range(oh):
        sy = source(i, h, oh)
        y0 = min(math.floor(sy), h - 1)
        wy = _cubic_weights(min(max(sy - y0, 0.0), 1.0))
        for j in range(ow):
            sx = source(j, w, ow)
            x0 = min(math.floor(sx), w - 1)
            wx = _cubic_weights(min(max(sx - x0, 0.0), 1.0))
            for a in range(4):
                for b in range(4):
                    out[:, :, i, j] += wy[a] * wx[b] * x[:, :, min(max(y0 - 1 + a, 0), h - 1),
                                                         min(max(x0 - 1 + b, 0), w - 1)]
    return out


def ref_nearest_exact(x, size):
    """Pixel-centre nearest neighbour along every spatial axis: ``floor((o + 0.5) * n / m)``."""
    out = x
    for axis, m in enumerate(size, start=2):
        n = x.shape[axis]
        out = np.take(out, [min(math.floor((o + 0.5) * n / m), n - 1) for o in range(m)], axis=axis)
    return out


def _input(*shape, **kwargs):
    return lambda r: ((randf(r, *shape),), dict(kwargs))


amp = torch_functional("adaptive_max_pool2d")
case("adaptive_max_pool2d", _input(2, 3, 7, 9, output_size=(3, 4)), ref_adaptive_max_pool2d, id="overlapping")
case("adaptive_max_pool2d", _input(2, 3, 8, 6, output_size=(4, 3)), ref_adaptive_max_pool2d, id="divisible")
case("adaptive_max_pool2d", _input(2, 8, 5, 5, output_size=1), ref_adaptive_max_pool2d, id="global")
case("adaptive_max_pool2d", _input(3, 6, 5, output_size=(None, 2), return_indices=True), ref_adaptive_max_pool2d,
     id="unbatched_none_indices")
case("adaptive_max_pool2d", _input(2, 3, 7, 9, output_size=(3, 4)), amp, id="torch")
case("adaptive_max_pool2d", _input(1, 2, 5, 7, output_size=(4, 5), return_indices=True), amp, id="torch_indices")
case("adaptive_max_pool2d", _input(1, 2, 3, 4, output_size=(6, 7)), amp, id="torch_upsampling")

it = torch_functional("interpolate")
case("interpolate", _input(2, 3, 5, 7, size=(8, 4), mode="nearest-exact"),
     lambda x, size, mode: ref_nearest_exact(x, size), id="nearest_exact_size")
case("interpolate", _input(2, 3, 5, 7, size=(8, 4), mode="nearest-exact"), it, id="nearest_exact_size_torch")
case("interpolate", _input(1, 2, 6, 5, scale_factor=(0.5, 2.3), mode="nearest-exact"), it,
     id="nearest_exact_scale_torch")
case("interpolate", _input(2, 3, 7, size=11), it, id="nearest_1d_torch")
case("interpolate", _input(2, 3, 7, scale_factor=0.6, mode="nearest-exact"), it, id="nearest_exact_1d_torch")
case("interpolate", _input(1, 2, 3, 4, 5, scale_factor=2), it, id="nearest_3d_torch")
case("interpolate", _input(1, 2, 3, 4, 5, size=(5, 3, 7), mode="nearest-exact"), it, id="nearest_exact_3d_torch")
for ac in (False, True):
    case("interpolate", _input(2, 3, 5, 6, size=(9, 4), mode="bicubic", align_corners=ac),
         lambda x, size, mode, align_corners: ref_bicubic(x, size, align_corners), id=f"bicubic_ac_{ac}", **BLEND_TOL)
    case("interpolate", _input(2, 3, 5, 6, size=(9, 4), mode="bicubic", align_corners=ac), it,
         id=f"bicubic_ac_{ac}_torch", **BLEND_TOL)
    case("interpolate", _input(1, 2, 6, 5, scale_factor=(1.5, 0.7), mode="bicubic", align_corners=ac), it,
         id=f"bicubic_scale_ac_{ac}_torch", **BLEND_TOL)
    case("interpolate", _input(2, 3, 7, size=12, mode="linear", align_corners=ac), it, id=f"linear_ac_{ac}_torch",
         **BLEND_TOL)
    case("interpolate", _input(1, 2, 3, 4, 5, scale_factor=(2, 1.5, 0.6), mode="trilinear", align_corners=ac), it,
         id=f"trilinear_ac_{ac}_torch", **BLEND_TOL)
case("interpolate", _input(1, 2, 4, 4, size=(1, 1), mode="bicubic"), it, id="bicubic_to_one_torch", **BLEND_TOL)
