"""fxkit.onnx.export: every zoo model, and models over the exportable ops, against onnxruntime.

The reference is fxkit eager; onnxruntime runs the exported file on inputs
whose batch size differs from the example's (the batch dimension is symbolic).
Acceptance: within 1e-5 relative error (largest difference over largest value).
"""
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import fxkit  # noqa: E402
from fxkit import nn  # noqa: E402
from fxkit.nn import functional as F  # noqa: E402
from tests.interop.zoo_onnx import as_tuple, exported, other_batch, relative_error, run_onnxruntime  # noqa: E402
from tests.transforms.model_paths import zoo_model, zoo_params  # noqa: E402

TOLERANCE = 1e-5


@pytest.mark.parametrize("name", zoo_params())
def test_zoo_model_matches_onnxruntime_at_another_batch_size(name):
    model, inputs, proto = exported(name)
    onnx.checker.check_model(proto, full_check=True)
    assert [d.dim_param for d in proto.graph.input[0].type.tensor_type.shape.dim][:1] == ["N"]
    fresh = other_batch(inputs)
    expected = as_tuple(model(*fresh))
    actual = run_onnxruntime(proto, fresh)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert relative_error(a, e) < TOLERANCE


@pytest.mark.parametrize("opset", [17, 18, 20])
@pytest.mark.parametrize("name", ["transformer_block", "lstm_cell", "lenet"])
def test_opsets(name, opset):
    model, inputs = zoo_model(name)
    proto = fxkit.onnx.export(model, inputs, opset=opset)
    assert proto.opset_import[0].version == opset
    ops = {n.op_type for n in proto.graph.node}
    if name == "transformer_block":
        assert ("Gelu" in ops) == (opset >= 20)  # Gelu is an ONNX op from opset 20; before, its erf formula
    for a, e in zip(run_onnxruntime(proto, inputs), as_tuple(model(*inputs))):
        assert relative_error(a, e) < TOLERANCE


def test_several_symbolic_dims_from_named_specs(tmp_path):
    model, _ = zoo_model("transformer_block")
    path = tmp_path / "block.onnx"
    proto = fxkit.onnx.export(model, (("N", "L", 128),), path)
    dims = [d.dim_param or d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["N", "L", 128]
    assert onnx.load(str(path)).graph.node[0].op_type == proto.graph.node[0].op_type
    x = fxkit.randn(3, 7, 128)
    assert relative_error(run_onnxruntime(proto, (x,))[0], model(x)) < TOLERANCE


def test_static_shapes_names_and_dynamic_axes():
    model, inputs = zoo_model("lstm_cell")
    static = fxkit.onnx.export(model, inputs, dynamic_batch=False, input_names=["x", "h", "c"],
                               output_names=["h_next", "c_next"])
    assert [i.name for i in static.graph.input] == ["x", "h", "c"]
    assert [o.name for o in static.graph.output] == ["h_next", "c_next"]
    assert static.graph.input[0].type.tensor_type.shape.dim[0].dim_value == inputs[0].shape[0]
    batch = {0: "batch"}
    dynamic = fxkit.onnx.export(model, inputs, dynamic_axes={"input": batch, 1: batch, "cx": batch})
    assert [i.type.tensor_type.shape.dim[0].dim_param for i in dynamic.graph.input] == ["batch"] * 3
    mlp, inputs = zoo_model("mlp")
    listed = fxkit.onnx.export(mlp, inputs, dynamic_axes={"x": [0]})
    assert listed.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "x_0"


def test_export_leaves_the_models_training_mode_alone():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.BatchNorm1d(4)).train()
    proto = fxkit.onnx.export(model, fxkit.randn(3, 4))
    assert model.training and all(m.training for m in model.modules())
    ops = [n.op_type for n in proto.graph.node]
    assert ops == ["Gemm", "BatchNormalization"]  # dropout is the identity at inference


# -- models over many ops: each rule of the export tables against onnxruntime ----------------------
def _arithmetic(x, y):
    z = fxkit.add(x, y, alpha=2) - y / (x.abs() + 1) * 2.5
    return z ** 2, fxkit.maximum(x, y), fxkit.minimum(x, 0.5), x.pow(3), fxkit.lerp(x, y, 0.3)


def _unary(x, y):
    return (x.exp(), x.sigmoid(), x.tanh(), F.silu(x), F.gelu(x, approximate="tanh"), F.gelu(x),
            F.leaky_relu(x, 0.2), (x.abs() + 1).rsqrt(), x.abs().log1p(), x.expm1(), x.erf(), x.floor(),
            x.ceil(), x.round(), x.sign(), -x, (x.abs() + 1).reciprocal(), x.sin(), x.cos(), x.relu(),
            (x.abs() + 0.5).log(), x.abs().sqrt())


def _compare_select(x, y):
    return (fxkit.where(x > y, x, y), x.masked_fill(x < 0, 0.5), x.clamp(-0.5, 0.5), x.clamp(min=y),
            (x != y).float(), (x >= y) & (x <= 1.0), (x == x).logical_not(), fxkit.where(x > 0, x, 0.0),
            ~(x > y), fxkit.bitwise_not(x < y))


def _division(x, y):
    d = y.abs() + 0.5
    return (fxkit.div(x, d, rounding_mode="floor"), fxkit.div(x, d, rounding_mode="trunc"),
            fxkit.remainder(x, d), fxkit.floor_divide(x, d), x * 3 // 2)


def _reductions(x, y):
    values, indices = x.max(1)
    return (x.sum(1), x.mean((1, 2), keepdim=True), x.amax(-1), values, indices, x.argmax(1), x.argmin(),
            x.var(1), x.std(1, unbiased=False), x.norm(dim=1), x.logsumexp(2), x.cumsum(1), F.softmax(x, -1),
            F.log_softmax(x, 1), x.prod(1), (x > 0).all(1), (x > 0).any(), x.sum(), x.min())


def _shapes(x, y):
    n = x.shape[0]
    c0, c1 = x.chunk(2, 2)
    s0, s1 = x.split([1, 2], 1)
    return (x.view(n, -1), x.reshape(-1, 4), x.permute(2, 0, 1), x.transpose(0, 1), x.unsqueeze(1).squeeze(1),
            x.flatten(0, 1), x[:, :1].expand(n, 3, 4), x.repeat(1, 2, 1), fxkit.cat([x, y], 1),
            fxkit.stack([x, y], 0), c0, c1, s0, s1, x.narrow(2, 1, 2), x[:, 1:3, None, ..., 1],
            x[0], x.flip(1, 2), F.pad(x, (1, 2)), F.pad(x, (1, 1, 2, 0), mode="reflect"), x.tril(), x.triu(1),
            x[..., 0].t(), x.contiguous(), x.unflatten(2, (2, 2)), x.tile((2,)), x.T, x.mT, x.roll(1, 1),
            x.roll((-1, 5), (0, 2)), x.roll(-7), x.roll(2, -3))


def _indexing(x, y):
    index = fxkit.tensor([2, 0, 1])
    gathered = x.gather(2, fxkit.tensor(np.random.default_rng(0).integers(0, 4, (1, 3, 4))).expand(x.shape[0], 3, 4))
    return x.index_select(1, index), gathered, x[:, index], fxkit.zeros_like(x), fxkit.ones_like(y), \
        fxkit.full_like(x, 2.5), fxkit.zeros(x.shape[0], 3), fxkit.arange(4) * x


def _matmuls(x, y):
    w = fxkit.tensor(np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32))
    m, yt = x[:, 0], y.transpose(1, 2)
    return (x.matmul(w), fxkit.bmm(x, yt), m.mm(w), fxkit.addmm(fxkit.ones(5), m, w, beta=0.5, alpha=2),
            fxkit.baddbmm(fxkit.ones(3, 3), x, yt, beta=0.5, alpha=2), fxkit.einsum("bij,bkj->bik", x, y))


def _activations_sorts_norms(x, y):
    values, indices = x.topk(2, 1)
    small, small_at = x.topk(3, -1, largest=False)
    ordered, order = x.sort(-1)
    return (F.relu6(x * 4), F.hardswish(x * 4), F.hardsigmoid(x * 4), F.mish(x * 4), values, indices, small,
            small_at, ordered, order, x.argsort(1, descending=True), F.rms_norm(x, (4,)),
            F.rms_norm(x, (3, 4), y[0], eps=1e-3), F.instance_norm(x), F.instance_norm(x, weight=y[0, :, 0],
                                                                                        bias=y[0, :, 1]),
            F.layer_norm(x, (4,), y[0, 0]) + 1.0)  # no bias: the optional input is left out


def _attention(x, y):
    sdpa = F.scaled_dot_product_attention
    n = x.shape[0]
    q, k = x.unsqueeze(1).repeat(1, 4, 1, 1), y.unsqueeze(1).repeat(1, 2, 1, 1) * 0.5
    keep = (y[..., :3] > -0.5) & (fxkit.arange(3).reshape(3, 1) != 1)  # query 1 sees no key: zeros
    return (sdpa(x, y, y), sdpa(x, y, x, is_causal=True, scale=0.7), sdpa(x, y, y, attn_mask=keep),
            sdpa(x, y, y, attn_mask=y[..., :3]), sdpa(q, k, k, enable_gqa=True),
            sdpa(q, k[:n, :, :2], k[:, :, :2], enable_gqa=True, attn_mask=keep[:, None, :, :2]),
            sdpa(q[:, :, :2], k, k, enable_gqa=True, is_causal=True))


def _vision_extras(x, y):
    n = x.shape[0]
    spread, mean = fxkit.var_mean(x, 1, correction=0)
    deviation, average = fxkit.std_mean(x, (1, 2), keepdim=True)
    infinite = x / (y > 0).float()  # +-inf where y <= 0, nan where x is 0 too
    image = x.reshape(n, 4, 3, 1)
    return (F.pixel_shuffle(image, 2), F.pixel_unshuffle(F.pixel_shuffle(image, 2), 2), F.glu(x, -1), F.glu(y, 2),
            F.max_pool1d(x, 2), F.max_pool1d(y, 3, 1, 1, ceil_mode=True), F.avg_pool1d(x, 3, 1, 1),
            F.avg_pool1d(y, 2, 2, 1, True, False), spread, mean, deviation, average, infinite.isinf(),
            infinite.isfinite(), x.unfold(2, 3, 1), y.unfold(1, 2, 1))


OP_MODELS = [_arithmetic, _unary, _compare_select, _division, _reductions, _shapes, _indexing, _matmuls,
             _activations_sorts_norms, _attention, _vision_extras]


@pytest.mark.parametrize("fn", OP_MODELS, ids=lambda f: f.__name__.strip("_"))
def test_op_rules_match_onnxruntime(fn):
    rng = np.random.default_rng(3)
    inputs = tuple(fxkit.from_numpy(rng.standard_normal((2, 3, 4)).astype(np.float32)) for _ in range(2))
    gm = fxkit.symbolic_trace(fn)
    proto = fxkit.onnx.export(gm, inputs)
    fresh = tuple(fxkit.from_numpy(rng.standard_normal((5, 3, 4)).astype(np.float32)) for _ in range(2))
    expected = [e for e in as_tuple(gm(*fresh))]
    actual = run_onnxruntime(proto, fresh)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.dtype == e.numpy().dtype, f"output {i}"
        if e.dtype.is_floating_point:
            assert relative_error(a, e) < TOLERANCE, f"output {i}"
        else:
            np.testing.assert_array_equal(a, e.numpy(), err_msg=f"output {i}")


class _Layers(nn.Module):
    """One of each layer whose forward is exported as its traced ops."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2)
        self.dilated = nn.Conv2d(8, 8, 3, padding="same", dilation=2, bias=False)
        self.pool = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
        self.maxpool = nn.MaxPool2d(2, ceil_mode=True)
        self.adaptive = nn.AdaptiveAvgPool2d(2)
        self.bn = nn.BatchNorm1d(32)
        self.ln = nn.LayerNorm([2, 16])
        self.embed = nn.Embedding(10, 4)
        self.attn = nn.MultiheadAttention(8, 2, kdim=6, vdim=5)
        self.fc = nn.Linear(16, 3)

    def forward(self, x, tokens, q, k, v):
        y = self.dilated(F.relu(self.conv(x)))
        y = F.group_norm(y, 4) + self.pool(y) * 0.5
        z = self.adaptive(self.maxpool(y)).flatten(1)
        z = self.bn(z).view(-1, 2, 16)
        z = self.fc(self.ln(z))
        attended, weights = self.attn(q, k, v)
        return z, self.embed(tokens), attended, weights, F.conv_transpose2d(y, self.dilated.weight, stride=2)


def test_layers_match_onnxruntime():
    fxkit.manual_seed(0)
    model = _Layers().eval()
    rng = np.random.default_rng(4)
    for name, buffer in model.named_buffers():
        if name.endswith(("running_var", "running_mean")):
            buffer.numpy()[:] = rng.uniform(0.5, 1.5, buffer.shape)  # numpy() is a view on CPU

    def inputs(n):
        return (fxkit.randn(n, 4, 16, 16), fxkit.from_numpy(rng.integers(0, 10, (n, 5))), fxkit.randn(7, n, 8),
                fxkit.randn(9, n, 6), fxkit.randn(9, n, 5))

    proto = fxkit.onnx.export(model, inputs(2), dynamic_axes={"x": {0: "N"}, "tokens": {0: "N"}, "q": {1: "N"},
                                                              "k": {1: "N"}, "v": {1: "N"}})
    fresh = inputs(3)
    for a, e in zip(run_onnxruntime(proto, fresh), model(*fresh)):
        assert relative_error(a, e) < TOLERANCE


class _VideoLayers(nn.Module):
    """The 3-D layers of video models (r3d, mc3, r(2+1)d): Conv3d, BatchNorm3d and the 3-D pools."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 4, 3, stride=(1, 2, 2), padding=1)
        self.separable = nn.Conv3d(4, 4, (3, 1, 1), padding="same", dilation=(2, 1, 1), groups=2, bias=False)
        self.bn = nn.BatchNorm3d(4)
        self.maxpool = nn.MaxPool3d(2, ceil_mode=True)
        self.pool = nn.AvgPool3d(3, stride=1, padding=1, count_include_pad=False)
        self.adaptive = nn.AdaptiveAvgPool3d(1)

    def forward(self, x):
        y = self.pool(self.maxpool(F.relu(self.bn(self.separable(self.conv(x))))))
        return self.adaptive(y), F.adaptive_avg_pool3d(y, (1, 3, 2)), F.avg_pool3d(x, (1, 2, 2))


def test_video_layers_match_onnxruntime_and_import_back():
    fxkit.manual_seed(0)
    model = _VideoLayers().eval()
    rng = np.random.default_rng(6)
    model.bn.running_var.numpy()[:] = rng.uniform(0.5, 1.5, 4)
    proto = fxkit.onnx.export(model, (fxkit.randn(2, 3, 4, 10, 8),), dynamic_axes={"x": {0: "N"}})
    assert {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool"} <= {n.op_type for n in proto.graph.node}
    fresh = (fxkit.randn(3, 3, 4, 10, 8),)
    expected = model(*fresh)
    for a, e in zip(run_onnxruntime(proto, fresh), expected):
        assert relative_error(a, e) < TOLERANCE
    imported = fxkit.from_onnx(proto)
    assert {"conv3d", "max_pool3d", "avg_pool3d"} <= {n.target.name for n in imported.graph.nodes if n.op == "call"}
    for a, e in zip(imported(*fresh), expected):
        assert relative_error(a, e) < TOLERANCE


# -- quantized models: QDQ --------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["lenet", "mlp", pytest.param("resnet18", marks=pytest.mark.slow)])
def test_quantized_model_exports_as_qdq(name):
    """With `x86_qconfig` (7-bit weights) onnxruntime's fused int8 kernels agree with its unfused
    reference on every x86 CPU: AVX2-only ones saturate int16 pair sums with 8-bit weights."""
    from fxkit.transforms.quantize import calibrate, convert, prepare, x86_qconfig

    model, inputs = zoo_model(name)
    rng = np.random.default_rng(5)
    batches = [tuple(fxkit.from_numpy(rng.standard_normal(x.shape).astype(np.float32)) for x in inputs)
               for _ in range(3)]
    prepared = prepare(fxkit.symbolic_trace(model), x86_qconfig)
    calibrate(prepared, batches, progress=False)
    quantized = convert(prepared, report=False)
    proto = fxkit.onnx.export(quantized, inputs)
    ops = [n.op_type for n in proto.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    weights = [i for i in proto.graph.initializer if i.data_type == onnx.TensorProto.INT8 and len(i.dims) > 1]
    assert weights, "int8 weights are stored as int8 initializers"
    assert all(-64 <= onnx.numpy_helper.to_array(w).min() <= onnx.numpy_helper.to_array(w).max() <= 63
               for w in weights)
    last = [n for n in quantized.graph.nodes if n.is_op("dequantize_affine")][-1]
    step = last.args[1]  # the output's quantization step
    expected = quantized(*batches[0]).numpy()
    actual = run_onnxruntime(proto, batches[0])[0]
    unfused = run_onnxruntime(proto, batches[0], optimize=False)[0]
    # Fused requantization (fixed point) may round a tie the other way than the unfused float reference,
    # and ONNX rounds before adding the zero point where fxkit (like PyTorch) adds it first: either way
    # a tie may move by one step per layer, so outputs agree to a few steps, on average to less than one.
    for other in (unfused, expected):
        assert np.max(np.abs(actual - other)) <= 4 * step
        assert np.mean(np.abs(actual - other)) <= step


@pytest.mark.parametrize("name", ["lenet", "mlp"])
def test_float_output_kernels_export_without_quantize_linear(name):
    """`convert(float_outputs=True)`: the classifier writes float, so its Gemm's output has no
    QuantizeLinear, and onnxruntime agrees with fxkit as for int8 outputs (a tie per layer)."""
    from fxkit.transforms.quantize import calibrate, convert, prepare, x86_qconfig

    model, inputs = zoo_model(name)
    rng = np.random.default_rng(5)
    batches = [tuple(fxkit.from_numpy(rng.standard_normal(x.shape).astype(np.float32)) for x in inputs)
               for _ in range(3)]
    prepared = calibrate(prepare(fxkit.symbolic_trace(model), x86_qconfig), batches, progress=False)
    quantized = convert(prepared, report=False, float_outputs=True)
    assert quantized.conversion_report.float_outputs
    proto = fxkit.onnx.export(quantized, inputs)
    producers = {o: n for n in proto.graph.node for o in n.output}
    gemm = [n for n in proto.graph.node if n.op_type in ("Gemm", "MatMul")][-1]
    assert not any(n.op_type == "QuantizeLinear" and gemm.output[0] in n.input for n in proto.graph.node)
    assert producers[gemm.input[0]].op_type == "DequantizeLinear"
    int8_outputs = convert(prepared, report=False)
    step = [n for n in int8_outputs.graph.nodes if n.is_op("dequantize_affine")][-1].args[1]
    expected = quantized(*batches[0]).numpy()
    for optimize in (True, False):
        actual = run_onnxruntime(proto, batches[0], optimize=optimize)[0]
        assert np.max(np.abs(actual - expected)) <= 4 * step
        assert np.mean(np.abs(actual - expected)) <= step

def _u8s8_avx2(a_u8, w_s8):
    """``a_u8 @ w_s8.T`` as AVX2's ``vpmaddubsw`` computes it: pairs of products added into a
    saturating int16, then summed exactly (``vpmaddwd``); what onnxruntime runs without VNNI."""
    a = a_u8.astype(np.int32)
    w = w_s8.astype(np.int32)
    k = a.shape[1] + a.shape[1] % 2
    a = np.pad(a, ((0, 0), (0, k - a.shape[1])))
    w = np.pad(w, ((0, 0), (0, k - w.shape[1])))
    pairs = a.reshape(a.shape[0], 1, k // 2, 2) * w.reshape(1, w.shape[0], k // 2, 2)
    return np.clip(pairs.sum(-1), -32768, 32767).sum(-1)


@pytest.mark.parametrize("qconfig_name, saturates", [("default_qconfig", True), ("x86_qconfig", False)])
def test_x86_qconfig_weights_never_saturate_avx2_int8_kernels(qconfig_name, saturates):
    from fxkit.transforms import quantize

    model, inputs = zoo_model("mlp")
    rng = np.random.default_rng(5)
    batches = [(fxkit.from_numpy(rng.standard_normal(inputs[0].shape).astype(np.float32) * 3),) for _ in range(3)]
    prepared = quantize.prepare(fxkit.symbolic_trace(model), getattr(quantize, qconfig_name))
    quantize.calibrate(prepared, batches, progress=False)
    proto = fxkit.onnx.export(quantize.convert(prepared, report=False), inputs)
    weight = next(onnx.numpy_helper.to_array(i) for i in proto.graph.initializer
                  if i.data_type == onnx.TensorProto.INT8 and len(i.dims) > 1)
    # the worst activation row for this weight: onnxruntime shifts int8 activations to uint8,
    # so the largest pair sums come from 255 where a weight is positive and 0 where negative
    worst = np.where(weight >= 0, 255, 0).astype(np.uint8)
    exact = (worst.astype(np.int64) * weight).sum(1)
    assert bool(np.any(_u8s8_avx2(worst, weight).diagonal() != exact)) is saturates


@pytest.mark.slow
def test_import_fxkit_does_not_import_onnx():
    code = "import sys, fxkit; assert 'onnx' not in sys.modules; fxkit.onnx.export; assert 'onnx' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_quantized_activations_export_as_uint8_and_every_conv_fuses(tmp_path):
    """int8 activations leave the exporter as uint8 (zero point + 128, the same reals): onnxruntime's
    x86 integer kernels take uint8 activations, and with int8 ones it left convolutions in float."""
    ort = pytest.importorskip("onnxruntime")
    from fxkit.transforms.quantize import calibrate, convert, prepare

    model, inputs = zoo_model("lenet")
    rng = np.random.default_rng(3)
    prepared = prepare(fxkit.symbolic_trace(model))
    calibrate(prepared, [tuple(fxkit.from_numpy(rng.standard_normal(x.shape).astype(np.float32)) for x in inputs)
                         for _ in range(3)], progress=False)
    proto = fxkit.onnx.export(convert(prepared, report=False), inputs)
    zero_points = {i.name: i.data_type for i in proto.graph.initializer}
    quantize = [n for n in proto.graph.node if n.op_type == "QuantizeLinear"]
    assert quantize and all(zero_points[n.input[2]] == onnx.TensorProto.UINT8 for n in quantize)
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(proto.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"])
    fused = [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node]
    assert fused.count("QLinearConv") == [n.op_type for n in proto.graph.node].count("Conv") and "Conv" not in fused
