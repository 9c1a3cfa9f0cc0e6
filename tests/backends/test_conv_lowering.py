"""The numba backend's convolution rules and cost model: each rule's choice, its values against
eager and PyTorch, the conv's elementwise tail written in place, buffers reused across calls."""
from unittest import mock

import numpy as np
import pytest

import fxkit
from fxkit import nn, ops
from fxkit.backends import conv_lowering, cost_model
from tests.backends.examples import randn

pytest.importorskip("numba")


def _conv_model(in_channels, out_channels, kernel, stride=1, padding=0, dilation=1, groups=1, bias=True):
    return nn.Conv2d(in_channels, out_channels, kernel, stride=stride, padding=padding, dilation=dilation,
                     groups=groups, bias=bias).eval()


def _decisions(compiled):
    return {d.node: d for d in compiled._last.lowered.decisions}


# (conv arguments, input shape, the rule's choice)
CONVS = [
    ((8, 16, 1), (2, 8, 9, 7), "1x1 GEMM, channels-last"),
    ((8, 16, 1, 1, 0, 1, 1, False), (2, 8, 20, 20), "1x1 GEMM, channels-last"),
    ((8, 16, 1, 2), (2, 8, 9, 7), "im2col, channels-last"),
    ((5, 8, 3, 1, 1), (2, 5, 20, 18), "im2col, channels-last"),  # per-image products
    ((5, 8, 3, 2, 2, 2), (2, 5, 11, 9), "im2col, channels-last"),  # one folded product
    ((6, 6, 3, 1, 1, 1, 6), (2, 6, 30, 26), "depthwise numba kernel, channels-last"),
    ((4, 8, (3, 5), (2, 1), (1, 2), 1, 4), (1, 4, 52, 50), "depthwise numba kernel, channels-last"),  # multiplier 2
    ((4, 4, 3, 1, 2, 2, 4, False), (2, 4, 25, 27), "depthwise numba kernel, channels-last"),  # dilation
    ((4, 4, 4, 1, "same", 1, 4), (1, 4, 24, 24), "depthwise numba kernel, channels-last"),  # uneven padding
    ((6, 6, 3, 1, 1, 1, 6), (2, 6, 7, 7), "depthwise numba kernel, channels-last"),  # small maps
    ((32, 32, 3, 1, 1, 1, 32), (2, 32, 40, 38), "depthwise numba kernel, channels-last"),  # 875K taps: threads
    ((4, 8, 3, 1, 1, 1, 2), (2, 4, 6, 6), "numpy conv2d"),  # grouped, not depthwise
    ((16, 64, 3, 1, 1), (1, 16, 5, 5), "im2col, channels-last"),  # fewer pixels than channels, 3x3
    ((16, 64, 3, 1, 1), (2, 16, 3, 2), "3x3, channel-major"),  # channels 4x the pixels: batch-last columns
    ((16, 64, 3, 2, 1), (1, 16, 7, 7), "3x3, channel-major"),  # 16 pixels, strided
    ((16, 64, 1), (2, 16, 4, 3), "1x1, channel-major"),  # fewer pixels than channels, 1x1
    ((16, 64, 1), (1, 16, 4, 3), "1x1, channel-major"),  # the NCHW input is the column matrix
    ((16, 64, 1, 2), (2, 16, 9, 8), "1x1, channel-major"),
    ((16, 64, 3, 2, 2, 2, 1, False), (2, 16, 9, 8), "im2col, channels-last"),
]


@pytest.mark.filterwarnings("ignore:Using padding=.same.")
@pytest.mark.parametrize("arguments, shape, choice", CONVS, ids=[f"{c[2]}-{i}" for i, c in enumerate(CONVS)])
def test_each_conv_rule_matches_eager_and_pytorch(arguments, shape, choice, rng):
    torch = pytest.importorskip("torch")
    conv = _conv_model(*arguments)
    x = randn(rng, *shape)
    compiled = fxkit.compile(conv, backend="numba", example_inputs=[x])
    (decision,) = [d for d in compiled._last.lowered.decisions if d.node.startswith("conv2d")]
    assert decision.choice == choice
    for inputs in (x, randn(rng, *shape)):  # a second call runs on the reused buffers
        expected = conv(inputs).numpy()
        got = compiled(inputs).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        reference = torch.nn.functional.conv2d(
            torch.from_numpy(inputs.numpy()), torch.from_numpy(conv.weight.numpy()),
            None if conv.bias is None else torch.from_numpy(conv.bias.numpy()), conv.stride, conv.padding,
            conv.dilation, conv.groups).numpy()
        np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-5)


def _conv64(x, weight, bias, stride, padding, dilation):
    """The float64 reference: every output a sum over its window of the zero-padded input."""
    x = np.pad(np.asarray(x, np.float64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    weight = np.asarray(weight, np.float64)
    oc, _, kh, kw = weight.shape
    oh = (x.shape[2] - dilation * (kh - 1) - 1) // stride + 1
    ow = (x.shape[3] - dilation * (kw - 1) - 1) // stride + 1
    out = np.zeros((x.shape[0], oc, oh, ow))
    for p in range(kh):
        for q in range(kw):
            taps = x[:, :, p * dilation:p * dilation + (oh - 1) * stride + 1:stride,
                     q * dilation:q * dilation + (ow - 1) * stride + 1:stride]
            out += np.einsum("nchw,oc->nohw", taps, weight[:, :, p, q])
    return out + np.asarray(bias, np.float64)[:, None, None]


@pytest.mark.parametrize("in_channels", [5, 40], ids=["narrow (numpy's copy)", "wide (numba's gather)"])
@pytest.mark.parametrize("block_bytes", [1, 5000, 1 << 22], ids=["one pixel or image", "several", "one block"])
def test_im2col_blocks_give_the_float64_convolution(in_channels, block_bytes, rng):
    """Whatever the block size, across images and output rows: each block's product lands in its own rows."""
    conv = _conv_model(in_channels, 9, 3, 2, 1, 2)
    x = randn(rng, 3, in_channels, 11, 9)
    with mock.patch.object(conv_lowering, "COLUMN_BLOCK_BYTES", block_bytes):
        compiled = fxkit.compile(conv, backend="numba", example_inputs=[x])
        got = compiled(x).numpy()
    assert [d.choice for d in compiled._last.lowered.decisions] == ["im2col, channels-last"]
    expected = _conv64(x.numpy(), conv.weight.numpy(), conv.bias.numpy(), 2, 1, 2)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_chains_across_layouts_match_eager(rng):
    # channels-last (3x3, 1x1), then channel-major (a 1x1 with fewer pixels than channels) reading a
    # channels-last view, then depthwise reading a channel-major view, then a 1x1 product reading its
    # channels-last result.
    model = nn.Sequential(nn.Conv2d(5, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 1), nn.Conv2d(8, 96, 1, 2),
                          nn.SiLU(), nn.Conv2d(96, 96, 3, 1, 1, groups=96), nn.Conv2d(96, 8, 1)).eval()
    x = randn(rng, 2, 5, 11, 11)
    compiled = fxkit.compile(model, backend="numba", example_inputs=[x])
    choices = [d.choice for d in compiled._last.lowered.decisions if d.node.startswith("conv2d")]
    assert choices == ["im2col, channels-last", "1x1 GEMM, channels-last", "1x1, channel-major",
                       "depthwise numba kernel, channels-last", "1x1 GEMM, channels-last"]
    for inputs in (x, randn(rng, 2, 5, 11, 11)):
        np.testing.assert_allclose(compiled(inputs).numpy(), model(inputs).numpy(), rtol=1e-4, atol=1e-5)


def test_a_1x1_channel_major_conv_reads_channel_major_memory_as_its_columns(rng):
    torch = pytest.importorskip("torch")
    model = nn.Sequential(nn.Conv2d(8, 64, 1), nn.ReLU(), nn.Conv2d(64, 96, 1)).eval()
    x = randn(rng, 2, 8, 5, 4)
    compiled = fxkit.compile(model, backend="numba", example_inputs=[x])
    calls = [v for v in compiled._last.lowered.fn.__globals__.values()
             if isinstance(v, conv_lowering.ChannelMajorConv)]
    assert sorted(c.__name__ for c in calls) == ["conv2d_1_channel_major", "conv2d_channel_major"]
    reference = torch.nn.Sequential(torch.nn.Conv2d(8, 64, 1), torch.nn.ReLU(), torch.nn.Conv2d(64, 96, 1))
    reference.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in model.state_dict().items()})
    requested = []
    scratch = conv_lowering.scratch
    with mock.patch.object(conv_lowering, "scratch", lambda shape, dtype: requested.append(shape) or
                           scratch(shape, dtype)):
        for inputs in (x, randn(rng, 2, 8, 5, 4)):
            expected = reference(torch.from_numpy(inputs.numpy())).detach().numpy()
            np.testing.assert_allclose(compiled(inputs).numpy(), expected, rtol=1e-4, atol=1e-5)
    assert requested == [(8, 2 * 5 * 4)] * 2  # the first's columns (NCHW at batch 2); the second read its memory


def test_results_kept_across_calls_are_never_overwritten(rng):
    conv = _conv_model(3, 4, 3, 1, 1)
    x1, x2 = randn(rng, 2, 3, 17, 17), randn(rng, 2, 3, 17, 17)
    compiled = fxkit.compile(conv, backend="numba", example_inputs=[x1])
    first = compiled(x1)
    kept = first.numpy().copy()
    second = compiled(x2)
    third = compiled(x1)
    np.testing.assert_array_equal(first.numpy(), kept)
    np.testing.assert_array_equal(third.numpy(), kept)
    np.testing.assert_allclose(second.numpy(), conv(x2).numpy(), rtol=1e-5, atol=1e-5)


class _Block(nn.Module):
    """conv-bn-activation, twice, plus a residual: the tail of each conv is one kernel."""

    def __init__(self, activation):
        super().__init__()
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 1)
        self.bn2 = nn.BatchNorm2d(8)
        self.act = activation

    def forward(self, x):
        y = self.act(self.bn1(self.conv1(x)))
        return self.act(self.bn2(self.conv2(y)) + x)


def _randomise_batch_norms(model, rng):
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            c = module.num_features
            module.running_mean = fxkit.from_numpy(rng.standard_normal(c).astype(np.float32))
            module.running_var = fxkit.from_numpy(rng.uniform(0.5, 2.0, c).astype(np.float32))
            module.weight = nn.Parameter(fxkit.from_numpy(rng.uniform(0.5, 1.5, c).astype(np.float32)))
            module.bias = nn.Parameter(fxkit.from_numpy(rng.standard_normal(c).astype(np.float32)))
    return model.eval()


@pytest.mark.parametrize("activation", [nn.SiLU(), nn.Hardswish()], ids=["silu", "hardswish"])
def test_bias_batch_norm_activation_and_residual_run_in_the_conv_output_pass(activation, rng):
    model = _randomise_batch_norms(_Block(activation), rng)
    x = randn(rng, 2, 8, 32, 32)  # large enough for the cost model to pick a kernel for a lone activation
    compiled = fxkit.compile(model, backend="numba", example_inputs=[x])
    convs = [n for n in compiled.graph.nodes if n.op == "call" and getattr(n.target, "name", "") == "conv2d"]
    assert len(convs) == 2
    for conv in convs:  # the folded batch norm is the conv's bias, added to the product's rows
        assert conv.args[2] is not None and conv.args[2].op == "get_attr"
        (user,) = conv.users
        assert type(user.target).__name__ == "FusedOp", f"{conv.name} is read by {user.target}, not a kernel"
    # The epilogue kernels write into a dead buffer (the conv's channels-last output or the residual's).
    assert compiled.code.count("out=") == 2, compiled.code
    for inputs in (x, randn(rng, 2, 8, 32, 32)):
        np.testing.assert_allclose(compiled(inputs).numpy(), model(inputs).numpy(), rtol=1e-4, atol=1e-4)


def test_a_relu_tail_runs_as_numpy_ufuncs_in_the_conv_output(rng):
    # relu and add, relu are one or two ufunc passes: numpy writes the conv's output it reads, still in
    # cache, where a kernel would write its own buffer (cost_model.NUMBA_OWN_BUFFER_NS).
    model = _randomise_batch_norms(_Block(nn.ReLU()), rng)
    x = randn(rng, 2, 8, 32, 32)
    compiled = fxkit.compile(model, backend="numba", example_inputs=[x])
    assert not compiled.kernel_sources(), compiled.code
    tails = [d for d in compiled._last.lowered.decisions if d.choice == "numpy ops"]
    assert len(tails) == 2 and all("numpy in place" in d.reason for d in tails)
    assert "maximum_of(np, conv2d, False, out=conv2d)" in compiled.code  # ReLU in the conv's output
    assert compiled.code.count("out=") == 3, compiled.code  # the residual add and its ReLU in dead buffers too
    for inputs in (x, randn(rng, 2, 8, 32, 32)):
        np.testing.assert_allclose(compiled(inputs).numpy(), model(inputs).numpy(), rtol=1e-4, atol=1e-4)


class _InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, 3x3 depthwise, 1x1 project, residual."""

    def __init__(self, channels, expand):
        super().__init__()
        hidden = channels * expand
        self.expand = nn.Sequential(nn.Conv2d(channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6())
        self.depthwise = nn.Sequential(nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False),
                                       nn.BatchNorm2d(hidden), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(hidden, channels, 1, bias=False), nn.BatchNorm2d(channels))

    def forward(self, x):
        return x + self.project(self.depthwise(self.expand(x)))


def test_a_mobilenet_block_matches_eager_and_pytorch(rng):
    torch = pytest.importorskip("torch")
    model = _randomise_batch_norms(_InvertedResidual(8, 4), rng)
    x = randn(rng, 2, 8, 28, 28)
    compiled = fxkit.compile(model, backend="numba", example_inputs=[x])
    choices = [d.choice for d in compiled._last.lowered.decisions if d.node.startswith("conv2d")]
    assert choices == ["1x1 GEMM, channels-last", "depthwise numba kernel, channels-last", "1x1 GEMM, channels-last"]
    got = compiled(x).numpy()
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-4, atol=1e-4)
    # PyTorch's block with the same weights and statistics.
    t_model = torch.nn.Sequential(
        torch.nn.Conv2d(8, 32, 1, bias=False), torch.nn.BatchNorm2d(32), torch.nn.ReLU6(),
        torch.nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False), torch.nn.BatchNorm2d(32), torch.nn.ReLU6(),
        torch.nn.Conv2d(32, 8, 1, bias=False), torch.nn.BatchNorm2d(8)).eval()
    ours = list(model.expand) + list(model.depthwise) + list(model.project)
    with torch.no_grad():
        for theirs, mine in zip(t_model, ours):
            for name, value in mine.state_dict().items():
                getattr(theirs, name).copy_(torch.from_numpy(value.numpy()))
        reference = (torch.from_numpy(x.numpy()) + t_model(torch.from_numpy(x.numpy()))).numpy()
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-4)


def test_the_cost_model_keeps_numpy_for_a_tiny_lone_op_and_fuses_a_large_one(rng):
    small, large = randn(rng, 8), randn(rng, 100_000)
    tiny = fxkit.compile(lambda v: ops.relu(v), backend="numba", example_inputs=[small])
    assert not tiny.kernel_sources() and "fused" not in tiny.code, tiny.code
    assert "numpy ops" in tiny.explain()
    np.testing.assert_array_equal(tiny(small).numpy(), np.maximum(small.numpy(), 0))
    big = fxkit.compile(lambda v: ops.relu(v), backend="numba", example_inputs=[large])
    assert list(big.kernel_sources()) == ["fused_0"]
    assert "numba kernel fused_0" in big.explain()
    np.testing.assert_array_equal(big(large).numpy(), np.maximum(large.numpy(), 0))


def test_a_multi_output_group_that_loses_is_inlined_with_its_picks(rng):
    def two(a, b):
        s = a + b
        return ops.relu(s), s * a

    a, b = randn(rng, 4), randn(rng, 4)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cost_model, "NUMBA_CALL_US", 1e9)  # every group loses
        compiled = fxkit.compile(two, backend="numba", example_inputs=[a, b])
    assert not compiled.kernel_sources()
    got = compiled(a, b)
    expected = two(a, b)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g.numpy(), e.numpy())


def test_estimates_grow_with_size_and_count_composite_ops_as_several_passes():
    group = fxkit.compile(lambda v: ops.sigmoid(v) * v, backend="numba", example_inputs=[(1000,)])
    fused = next(n.target for n in group.graph.nodes if n.op == "call" and type(n.target).__name__ == "FusedOp")
    numpy_small, numba_small = cost_model.estimate_us(fused, 10)
    numpy_large, numba_large = cost_model.estimate_us(fused, 10_000)
    assert numpy_large > numpy_small and numba_large > numba_small
    # sigmoid is not one ufunc: COMPOSITE_PASSES calls, plus one for the multiply.
    assert numpy_small == pytest.approx((cost_model.COMPOSITE_PASSES + 1) * (cost_model.NUMPY_CALL_US + 0.003))



def test_shared_columns_never_hand_out_a_buffer_still_referred_to():
    with mock.patch.object(conv_lowering, "_SCRATCH", []):
        held = [conv_lowering.scratch((64, 9), np.float32) for _ in range(3)]  # three calls at once (threads)
        for i in range(3):
            held[i].fill(i)
        later = conv_lowering.scratch((32, 9), np.float32)
        assert not any(np.shares_memory(later, columns) for columns in held)
        later.fill(7)
        assert [float(columns.max()) for columns in held] == [0.0, 1.0, 2.0]
        address = held.pop().__array_interface__["data"][0]  # released: nothing refers to its buffer now
        assert conv_lowering.scratch((64, 9), np.float32).__array_interface__["data"][0] == address


@pytest.mark.parametrize("arguments, shape, choice", [
    ((3, 32, 3, 2, 1), (2, 3, 16, 16), "numpy conv2d"),  # MobileNet's stem
    ((3, 64, 3, 1, 1), (1, 3, 12, 12), "numpy conv2d"),  # VGG's stem, one image
    ((3, 64, 7, 2, 3), (2, 3, 16, 16), "im2col, channels-last"),  # ResNet's stem over a batch
    ((1, 10, 5), (2, 1, 12, 12), "numpy conv2d"),  # LeNet's stem
    ((64, 4, 3, 1, 1), (2, 64, 8, 8), "im2col, channels-last"),  # few output channels of many inputs
], ids=["3->32", "3->64-one-image", "3->64-batch", "1->10", "64->4"])
def test_an_image_s_few_channels_keep_numpy_s_conv_unless_the_product_is_wide(arguments, shape, choice, rng):
    conv = _conv_model(*arguments)
    x = randn(rng, *shape)
    compiled = fxkit.compile(conv, backend="numba", example_inputs=[x])
    (decision,) = compiled._last.lowered.decisions
    assert decision.choice == choice
    if choice == "numpy conv2d":
        assert f"{shape[1]} input channels" in decision.reason
    stride, padding = (arguments + (1, 0))[3:5]
    np.testing.assert_allclose(compiled(x).numpy(), _conv64(x.numpy(), conv.weight.numpy(), conv.bias.numpy(), stride,
                                                            padding, 1), rtol=1e-5, atol=1e-5)
