"""Cases for the 3-D ops of video models (conv3d in conv.py, pooling3d.py), each against PyTorch."""
import numpy as np

from tests.runtime.cases.conv import CONV_TOL, torch_functional
from tests.runtime.opcheck import case, randf

TOL = {"rtol": 1e-5, "atol": 1e-6}  # the pools; convolutions sum more terms and take CONV_TOL


def _args(*values, **kwargs):
    return lambda r: (tuple(v(r) if callable(v) else v for v in values), kwargs)


def _x(*shape, dtype=np.float32):
    return lambda r: randf(r, *shape, dtype=dtype)


def _x_with_nan(r):
    x = randf(r, 1, 2, 4, 5, 5)
    x[0, 1, 2, 3, 1] = np.nan
    return x


# -- conv3d -------------------------------------------------------------------------------------
case("conv3d", _args(_x(2, 3, 4, 6, 5), _x(4, 3, 3, 3, 3), _x(4)), torch_functional("conv3d"), id="torch", **CONV_TOL)
case("conv3d", _args(_x(1, 4, 5, 7, 6), _x(6, 2, 3, 2, 3), _x(6), (1, 2, 2), (1, 0, 1), 1, 2),
     torch_functional("conv3d"), id="stride-pad-groups-torch", **CONV_TOL)
case("conv3d", _args(_x(2, 2, 5, 6, 6), _x(3, 2, 2, 3, 2), None, 1, "same", (2, 1, 2)), torch_functional("conv3d"),
     id="same-dilation-no-bias-torch", **CONV_TOL)
case("conv3d", _args(_x(3, 4, 5, 5, dtype=np.float64), _x(2, 3, 1, 2, 2, dtype=np.float64), None, 2, "valid"),
     torch_functional("conv3d"), id="unbatched-valid-float64-torch")
# enough output positions (>= 256) for the per-image product
case("conv3d", _args(_x(2, 3, 4, 10, 10), _x(5, 3, 1, 3, 3), _x(5), 1, (0, 1, 1)), torch_functional("conv3d"),
     id="per-image-gemm-torch", **CONV_TOL)

# -- max_pool3d / avg_pool3d / adaptive_avg_pool3d ------------------------------------------------
case("max_pool3d", _args(_x(2, 3, 4, 6, 6), 2), torch_functional("max_pool3d"), id="torch")
case("max_pool3d", _args(_x(1, 2, 5, 7, 6), 3, (1, 2, 2), 1, (1, 1, 2), True), torch_functional("max_pool3d"),
     id="stride-pad-dilation-ceil-torch")
case("max_pool3d", _args(_x(2, 4, 5, 5), (2, 3, 2), return_indices=True), torch_functional("max_pool3d"),
     id="unbatched-indices-torch")
case("max_pool3d", _args(_x_with_nan, 3, 1, 1, return_indices=True), torch_functional("max_pool3d"),
     id="nan-wins-torch")
case("avg_pool3d", _args(_x(2, 3, 4, 6, 6), 2), torch_functional("avg_pool3d"), id="torch", **TOL)
case("avg_pool3d", _args(_x(1, 2, 5, 7, 6), 3, (1, 2, 2), 1, True, False), torch_functional("avg_pool3d"),
     id="stride-pad-ceil-no-pad-count-torch", **TOL)
case("avg_pool3d", _args(_x(2, 4, 5, 5, dtype=np.float64), (2, 3, 2), 1, (1, 1, 0), divisor_override=5),
     torch_functional("avg_pool3d"), id="unbatched-divisor-float64-torch")
case("adaptive_avg_pool3d", _args(_x(2, 3, 2, 5, 5), 1), torch_functional("adaptive_avg_pool3d"), id="global-torch",
     **TOL)
case("adaptive_avg_pool3d", _args(_x(2, 3, 5, 7, 6), (2, 3, 4)), torch_functional("adaptive_avg_pool3d"),
     id="overlapping-torch", **TOL)
case("adaptive_avg_pool3d", _args(_x(3, 4, 6, 5, dtype=np.float64), (None, 3, 5)),
     torch_functional("adaptive_avg_pool3d"), id="unbatched-keep-float64-torch")
