"""Convnets as `fxkit.from_torch` imports them, through the numba backend: batch norm ops folded into
the convs, channels-last memory kept through max pools, squeeze-excite broadcasts priced as numpy's,
kernels never run in place, large convs' columns gathered by numba. Values are checked against PyTorch or float64 numpy."""
import numpy as np
import pytest

import fxkit
import fxkit.nn.functional as F
from fxkit import nn, ops
from tests.backends.examples import randn

pytest.importorskip("numba")


class _ConvBatchNormOps(nn.Module):
    """conv2d, batch_norm and relu as ops on the module's tensors: the graph an imported model has."""

    def __init__(self, rng, channels=8, out_channels=16):
        super().__init__()
        self.weight = nn.Parameter(randn(rng, out_channels, channels, 3, 3))
        self.register_buffer("mean", randn(rng, out_channels))
        self.register_buffer("var", fxkit.from_numpy(rng.uniform(0.5, 2.0, out_channels).astype(np.float32)))
        self.gamma = nn.Parameter(fxkit.from_numpy(rng.uniform(0.5, 1.5, out_channels).astype(np.float32)))
        self.beta = nn.Parameter(randn(rng, out_channels))

    def forward(self, x):
        y = F.conv2d(x, self.weight, None, 1, 1)
        return F.relu(F.batch_norm(y, self.mean, self.var, self.gamma, self.beta, False, 0.1, 1e-5))


def _torch_reference(model, x):
    torch = pytest.importorskip("torch")
    t = {k: torch.from_numpy(v.numpy().astype(np.float64)) for k, v in model.state_dict().items()}
    y = torch.nn.functional.conv2d(torch.from_numpy(x.numpy().astype(np.float64)), t["weight"], None, 1, 1)
    y = torch.nn.functional.batch_norm(y, t["mean"], t["var"], t["gamma"], t["beta"], False, 0.1, 1e-5)
    return torch.relu(y).numpy()


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_batch_norm_ops_fold_into_the_conv_and_the_conv_is_lowered(backend, rng):
    model = _ConvBatchNormOps(rng).eval()
    x = randn(rng, 2, 8, 12, 12)
    compiled = fxkit.compile(model, backend=backend, example_inputs=[x])
    assert not [n for n in compiled.graph.nodes if getattr(n.target, "name", None) == "batch_norm"], compiled.code
    if backend == "numba":
        # the folded weight and bias carry their metadata, so the conv rule sees every operand
        (conv,) = [line for line in compiled.explain().splitlines() if line.startswith("conv2d")]
        assert "im2col, channels-last" in conv, compiled.explain()
    for inputs in (x, randn(rng, 2, 8, 12, 12)):
        np.testing.assert_allclose(compiled(inputs).numpy(), _torch_reference(model, inputs), rtol=1e-4, atol=1e-4)


def test_a_conv_without_bias_gets_the_folded_bias_positionally(rng):
    model = _ConvBatchNormOps(rng).eval()
    compiled = fxkit.compile(model, backend="numba", example_inputs=[(1, 8, 6, 6)])
    (conv,) = [n for n in compiled.graph.nodes if getattr(n.target, "name", None) == "conv2d"]
    assert not conv.kwargs and conv.args[2].op == "get_attr"


class _SqueezeExcite(nn.Module):
    """conv, then its output scaled per channel by a gate computed from its mean (EfficientNet's block)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Conv2d(16, 16, 1)

    def forward(self, x):
        y = ops.silu(self.conv(x))
        return y * ops.sigmoid(self.fc(F.adaptive_avg_pool2d(y, 1)))


def test_a_broadcast_over_a_channels_last_conv_output_runs_as_numpy_ops(rng):
    torch = pytest.importorskip("torch")
    model = _SqueezeExcite().eval()
    x = randn(rng, 2, 8, 40, 40)
    compiled = fxkit.compile(model, backend="numba", example_inputs=[x])
    (scale,) = [line for line in compiled.explain().splitlines() if "strided entry" in line]
    assert "numpy ops" in scale, compiled.explain()
    t = {k: torch.from_numpy(v.numpy().astype(np.float64)) for k, v in model.state_dict().items()}
    y = torch.nn.functional.silu(torch.nn.functional.conv2d(torch.from_numpy(x.numpy().astype(np.float64)),
                                                            t["conv.weight"], t["conv.bias"], padding=1))
    gate = torch.sigmoid(torch.nn.functional.conv2d(y.mean((2, 3), keepdim=True), t["fc.weight"], t["fc.bias"]))
    np.testing.assert_allclose(compiled(x).numpy(), (y * gate).numpy(), rtol=1e-4, atol=1e-5)


def test_a_kernel_given_its_own_input_as_out_leaves_the_input_alone(rng):
    x = randn(rng, 600_000)
    compiled = fxkit.compile(lambda v: ops.silu(v), backend="numba", example_inputs=[x])
    call = compiled._last.lowered.fn.__globals__["fused_0"]
    data = x.numpy().copy()
    kept = data.copy()
    got = call(data, out=data)
    np.testing.assert_array_equal(data, kept)
    x64 = kept.astype(np.float64)
    np.testing.assert_allclose(got, x64 / (1 + np.exp(-x64)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("pool", [nn.MaxPool2d(3, 2, 1), nn.MaxPool2d(2), nn.MaxPool2d((3, 2), (1, 2), (1, 0))],
                         ids=["resnet-stem", "vgg", "uneven"])
def test_a_max_pool_of_a_conv_runs_channels_last_and_matches_pytorch(pool, rng):
    torch = pytest.importorskip("torch")
    model = nn.Sequential(nn.Conv2d(5, 8, 3), pool, nn.Conv2d(8, 4, 1)).eval()
    x = randn(rng, 2, 5, 15, 14)
    x.numpy()[0, 0, 4, 5] = np.nan  # NaN wins a window, as in PyTorch
    compiled = fxkit.compile(model, backend="numba", example_inputs=[x])
    (decision,) = [line for line in compiled.explain().splitlines() if line.startswith("max_pool2d")]
    assert "max pool, channels-last" in decision
    t = torch.nn.Sequential(torch.nn.Conv2d(5, 8, 3), torch.nn.MaxPool2d(pool.kernel_size, pool.stride, pool.padding),
                            torch.nn.Conv2d(8, 4, 1)).eval()
    t.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in model.state_dict().items()})
    with torch.no_grad():
        for inputs in (x, randn(rng, 2, 5, 15, 14)):  # the second call reuses the kept output
            expected = t(torch.from_numpy(inputs.numpy())).numpy()
            np.testing.assert_allclose(compiled(inputs).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_a_view_after_a_channels_last_pool_runs_as_reshape(rng):
    model = nn.Sequential(nn.Conv2d(5, 8, 3), nn.MaxPool2d(2), nn.ReLU()).eval()

    def flat(x):
        return model(x).view(x.shape[0], -1)

    x = randn(rng, 2, 5, 14, 14)
    compiled = fxkit.compile(flat, backend="numba", example_inputs=[x])
    assert any(line.startswith("view") and "reshape" in line for line in compiled.explain().splitlines())
    torch = pytest.importorskip("torch")
    t = torch.nn.Sequential(torch.nn.Conv2d(5, 8, 3), torch.nn.MaxPool2d(2), torch.nn.ReLU()).eval()
    with torch.no_grad():
        t[0].weight.copy_(torch.from_numpy(model[0].weight.numpy()))
        t[0].bias.copy_(torch.from_numpy(model[0].bias.numpy()))
        expected = t(torch.from_numpy(x.numpy())).reshape(2, -1).numpy()
    np.testing.assert_allclose(compiled(x).numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel, stride, padding, dilation", [
    ((3, 3), (1, 1), (1, 1), (1, 1)), ((7, 7), (2, 2), (3, 3), (1, 1)), ((3, 5), (2, 1), (0, 2), (2, 1)),
    ((3, 3), (1, 1), (2, 2), (2, 2)), ((1, 1), (2, 2), (0, 0), (1, 1))])
@pytest.mark.parametrize("gather", ["im2col_nhwc", "im2col_nhwc_parallel"])
def test_the_im2col_gather_matches_numpy_windows_of_the_padded_input(kernel, stride, padding, dilation, gather, rng):
    from fxkit.backends import numba_conv

    x = rng.standard_normal((2, 9, 10, 3)).astype(np.float32)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    padded = np.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0)))
    oh = (padded.shape[1] - dh * (kh - 1) - 1) // sh + 1
    ow = (padded.shape[2] - dw * (kw - 1) - 1) // sw + 1
    expected = np.stack([padded[:, p * dh:p * dh + (oh - 1) * sh + 1:sh, q * dw:q * dw + (ow - 1) * sw + 1:sw]
                         for p in range(kh) for q in range(kw)], axis=3).reshape(2 * oh * ow, kh * kw * 3)
    columns = np.full((2 * oh * ow, kh * kw * 3), np.nan, np.float32)
    for first in range(0, 2 * oh * ow, 7):  # blocks of 7 output pixels, across rows and images
        getattr(numba_conv, gather)(columns[first:first + 7], x, first, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw)
    np.testing.assert_array_equal(columns, expected)


def test_a_large_conv_multiplies_its_columns_block_by_block_and_matches_pytorch(rng):
    torch = pytest.importorskip("torch")
    conv = nn.Conv2d(32, 16, 3, padding=1).eval()
    x = randn(rng, 4, 32, 64, 64)  # 16384 output pixels x 288 taps: 18 MB of columns, 5 blocks
    compiled = fxkit.compile(conv, backend="numba", example_inputs=[x])
    assert "in blocks of 4 MiB" in compiled.explain(), compiled.explain()
    expected = torch.nn.functional.conv2d(torch.from_numpy(x.numpy()), torch.from_numpy(conv.weight.numpy()),
                                          torch.from_numpy(conv.bias.numpy()), padding=1).numpy()
    for _ in range(2):  # the second call reuses the column buffer
        np.testing.assert_allclose(compiled(x).numpy(), expected, rtol=1e-4, atol=1e-4)
