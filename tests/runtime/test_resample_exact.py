"""interpolate and the adaptive pools in float32 against PyTorch's float32 kernels: the
nearest modes and the pools pick exactly PyTorch's elements (bit-equal), the blending
modes agree to float32 rounding. (The op cases compare against float64 references.)"""
import numpy as np
import pytest

import fxkit
import fxkit.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

RESIZES = [
    ((2, 3, 13), {"size": 29}), ((2, 3, 13), {"scale_factor": 0.37}),
    ((1, 2, 7, 9), {"size": (15, 4)}), ((1, 2, 7, 9), {"scale_factor": (1.7, 0.6)}),
    ((1, 2, 7, 9), {"scale_factor": 3.3, "recompute_scale_factor": True}),
    ((1, 2, 3, 5, 4), {"size": (7, 2, 9)}), ((1, 2, 3, 5, 4), {"scale_factor": 1.5}),
]


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("shape, kwargs", RESIZES)
def test_nearest_modes_pick_pytorchs_elements(shape, kwargs, mode):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = F.interpolate(fxkit.from_numpy(x), mode=mode, **kwargs).numpy()
    want = TF.interpolate(torch.from_numpy(x), mode=mode, **kwargs).numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("shape, kwargs", RESIZES)
def test_blending_modes_match_pytorch_in_float32(shape, kwargs, align_corners):
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    modes = {3: ["linear"], 4: ["bilinear", "bicubic"], 5: ["trilinear"]}[len(shape)]
    for mode in modes:
        got = F.interpolate(fxkit.from_numpy(x), mode=mode, align_corners=align_corners, **kwargs).numpy()
        want = TF.interpolate(torch.from_numpy(x), mode=mode, align_corners=align_corners, **kwargs).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=mode)


@pytest.mark.parametrize("size", [1, (3, 4), (5, None), (9, 11)])
def test_adaptive_pools_match_pytorch(size):
    x = np.random.default_rng(2).standard_normal((2, 3, 7, 9)).astype(np.float32)
    values, indices = F.adaptive_max_pool2d(fxkit.from_numpy(x), size, return_indices=True)
    want_values, want_indices = TF.adaptive_max_pool2d(torch.from_numpy(x), size, return_indices=True)
    np.testing.assert_array_equal(values.numpy(), want_values.numpy())
    np.testing.assert_array_equal(indices.numpy(), want_indices.numpy())
    np.testing.assert_array_equal(F.adaptive_max_pool2d(fxkit.from_numpy(x), size).numpy(), want_values.numpy())
    np.testing.assert_allclose(F.adaptive_avg_pool2d(fxkit.from_numpy(x), size).numpy(),
                               TF.adaptive_avg_pool2d(torch.from_numpy(x), size).numpy(), rtol=1e-6, atol=1e-6)


def test_layers_match_pytorch_layers():
    x = np.random.default_rng(3).standard_normal((2, 3, 10, 7)).astype(np.float32)
    layer = fxkit.nn.AdaptiveMaxPool2d((4, 3), return_indices=True)
    values, indices = layer(fxkit.from_numpy(x))
    want_values, want_indices = torch.nn.AdaptiveMaxPool2d((4, 3), return_indices=True)(torch.from_numpy(x))
    np.testing.assert_array_equal(values.numpy(), want_values.numpy())
    np.testing.assert_array_equal(indices.numpy(), want_indices.numpy())


def test_unsupported_modes_and_ranks_say_what_to_do():
    x = fxkit.randn(1, 2, 4, 4)
    with pytest.raises(fxkit.ShapeError, match="bilinear mode needs 4D input"):
        F.interpolate(fxkit.randn(1, 2, 4), size=8, mode="bilinear")
    with pytest.raises(ValueError, match="antialias=True is not supported"):
        F.interpolate(x, size=2, mode="bilinear", antialias=True)
    with pytest.raises(ValueError, match="mode 'area' is not supported"):
        F.interpolate(x, size=2, mode="area")
