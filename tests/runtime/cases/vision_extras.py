"""Cases for pixel_shuffle.py, glu.py, pooling1d.py and unfold.py: the ops vision models bring in
(sub-pixel convolutions, gated units, 1-D pools, halo attention's sliding windows), each against PyTorch."""
import numpy as np

from tests.runtime.cases.conv import torch_functional
from tests.runtime.opcheck import case, randf

TOL = {"rtol": 1e-6, "atol": 1e-7}


def _args(*values, **kwargs):
    return lambda r: (tuple(v(r) if callable(v) else v for v in values), kwargs)


def _x(*shape, dtype=np.float32):
    return lambda r: randf(r, *shape, dtype=dtype)


def _x_with_nan(r):
    x = randf(r, 2, 3, 9)
    x[0, 1, 4] = np.nan
    return x


# -- pixel_shuffle / pixel_unshuffle --------------------------------------------------------
case("pixel_shuffle", _args(_x(2, 8, 3, 5), 2), torch_functional("pixel_shuffle"), id="torch")
case("pixel_shuffle", _args(_x(18, 2, 2), 3), torch_functional("pixel_shuffle"), id="unbatched-torch")
case("pixel_shuffle", _args(_x(2, 2, 4, 1, 2), 2), torch_functional("pixel_shuffle"), id="two-batch-dims-torch")
case("pixel_unshuffle", _args(_x(2, 3, 6, 4), 2), torch_functional("pixel_unshuffle"), id="torch")
case("pixel_unshuffle", _args(_x(2, 6, 9), 3), torch_functional("pixel_unshuffle"), id="unbatched-torch")
case("pixel_unshuffle", _args(_x(1, 2, 4, 4, dtype=np.float64), 1), torch_functional("pixel_unshuffle"),
     id="factor1-float64-torch")

# -- glu --------------------------------------------------------------------------------------
case("glu", _args(_x(3, 8)), torch_functional("glu"), id="last-dim-torch", **TOL)
case("glu", _args(_x(2, 6, 3), 1), torch_functional("glu"), id="dim1-torch", **TOL)
case("glu", _args(_x(4, 2, dtype=np.float64), dim=0), torch_functional("glu"), id="dim0-float64-torch")

# -- max_pool1d / avg_pool1d -------------------------------------------------------------------
case("max_pool1d", _args(_x(2, 3, 9), 3), torch_functional("max_pool1d"), id="torch")
case("max_pool1d", _args(_x(2, 3, 10), 3, 2, 1, 2, True), torch_functional("max_pool1d"),
     id="stride-pad-dilation-ceil-torch")
case("max_pool1d", _args(_x(3, 8), 2, return_indices=True), torch_functional("max_pool1d"),
     id="unbatched-indices-torch")
case("max_pool1d", _args(_x_with_nan, 3, 1), torch_functional("max_pool1d"), id="nan-wins-torch")
case("avg_pool1d", _args(_x(2, 3, 9), 3), torch_functional("avg_pool1d"), id="torch", **TOL)
case("avg_pool1d", _args(_x(2, 3, 10), 3, 2, 1, True, False), torch_functional("avg_pool1d"),
     id="stride-pad-ceil-no-pad-count-torch", **TOL)
case("avg_pool1d", _args(_x(3, 7, dtype=np.float64), 2, 1, 1), torch_functional("avg_pool1d"),
     id="unbatched-float64-torch")

# -- unfold (Tensor.unfold: sliding windows) -----------------------------------------------------
def _tensor_unfold(x, dimension, size, step):
    import torch

    return torch.from_numpy(x).unfold(dimension, size, step).numpy()


case("unfold", _args(_x(2, 10, 3), 1, 4, 3), _tensor_unfold, id="strided")
case("unfold", _args(_x(2, 3, 9), -1, 3, 2), _tensor_unfold, id="overlapping-last-dim")
case("unfold", _args(_x(4, 5, dtype=np.float64), 0, 4, 1), _tensor_unfold, id="step1-float64")
case("unfold", _args(_x(3, 6), 1, 6, 6), _tensor_unfold, id="one-window")
