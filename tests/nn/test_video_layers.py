"""The 3-D layers of video models against their torch.nn twins (`test_layers.check_layer`: same
state_dict keys and shapes, same outputs with PyTorch's weights), and a Conv3d model through the
compiled backends."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fxkit  # noqa: E402
from fxkit import nn  # noqa: E402
from tests.nn.test_layers import check_layer  # noqa: E402
from tests.nn.torch_compare import fx, rand, randomize_batchnorm  # noqa: E402


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=3),
    dict(kernel_size=(3, 1, 1), stride=(1, 2, 2), padding=(1, 0, 0)),
    dict(kernel_size=(1, 3, 3), padding="same", dilation=(1, 2, 1)),
    dict(kernel_size=3, padding="valid", groups=2, bias=False),
], ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_conv3d(rng, kwargs):
    check_layer(nn.Conv3d(4, 6, **kwargs), torch.nn.Conv3d(4, 6, **kwargs), rand(rng, 2, 4, 5, 9, 8))


def test_conv3d_refuses_an_unbatched_input_with_a_hint(rng):
    with pytest.raises(fxkit.ShapeError, match=r"(?s)expected a 5-D input \(N, C, D, H, W\).*x.unsqueeze\(0\)"):
        nn.Conv3d(4, 6, 3)(fx(rand(rng, 4, 5, 9, 8)))


@pytest.mark.parametrize("training", [True, False])
def test_batchnorm3d(rng, training):
    fx_bn, ref_bn = nn.BatchNorm3d(3), torch.nn.BatchNorm3d(3)
    randomize_batchnorm(ref_bn)
    fx_bn.train(training)
    ref_bn.train(training)
    check_layer(fx_bn, ref_bn, rand(rng, 2, 3, 4, 5, 6))


@pytest.mark.parametrize("name, kwargs", [
    ("MaxPool3d", dict(kernel_size=2)),
    ("MaxPool3d", dict(kernel_size=3, stride=(1, 2, 2), padding=1, ceil_mode=True)),
    ("AvgPool3d", dict(kernel_size=2)),
    ("AvgPool3d", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    ("AdaptiveAvgPool3d", dict(output_size=1)),
    ("AdaptiveAvgPool3d", dict(output_size=(2, None, 3))),
])
def test_pool3d(rng, name, kwargs):
    check_layer(getattr(nn, name)(**kwargs), getattr(torch.nn, name)(**kwargs), rand(rng, 2, 3, 5, 9, 8))


class _Clip(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(3, 8, (3, 5, 5), stride=(1, 2, 2), padding=(1, 2, 2), bias=False),
                                  nn.BatchNorm3d(8), nn.ReLU())
        self.pool = nn.MaxPool3d(2)
        self.head = nn.AdaptiveAvgPool3d(1)

    def forward(self, x):
        return self.head(self.pool(self.stem(x))).flatten(1)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_conv3d_model_compiles(rng, backend):
    fxkit.manual_seed(0)
    model = _Clip().eval()
    x = fx(rand(rng, 2, 3, 4, 16, 16))
    compiled = fxkit.compile(model, backend=backend, example_inputs=(x,))
    expected = torch.nn.functional.adaptive_avg_pool3d(torch.nn.functional.max_pool3d(torch.relu(
        torch.nn.functional.batch_norm(torch.nn.functional.conv3d(
            torch.from_numpy(x.numpy()), torch.from_numpy(model.stem[0].weight.numpy()), None, (1, 2, 2), (1, 2, 2)),
            torch.zeros(8), torch.ones(8), torch.ones(8), torch.zeros(8))), 2), 1).flatten(1)
    np.testing.assert_allclose(compiled(x).numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
