"""prepare -> calibrate -> convert on small models: where observers go, what fuses, what the
converted graph computes (against a float64 simulation of the quantized arithmetic) and what
stays float, and that the other passes, backends and save/load take quantized graphs."""
import io
import re

import numpy as np
import pytest
from rich.console import Console

import fxkit
import fxkit.models  # noqa: F401  (fxkit.models.MLP)
from fxkit import nn
from fxkit.nn import functional as F
from fxkit.transforms import ShapeProp
from fxkit.transforms.quantize import (MinMaxObserver, QConfigMapping, calibrate, convert, default_qconfig, prepare,
                                       per_channel_qconfig)


class ConvBnNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.flatten(1))


class FunctionalNet(nn.Module):
    """A functional linear on parameters, a sigmoid in the middle (no integer kernel), a ReLU module."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(fxkit.randn(6, 5) * 0.4)
        self.b = nn.Parameter(fxkit.randn(6) * 0.1)
        self.fc = nn.Linear(6, 3)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(F.linear(x, self.w, self.b).sigmoid()))


def _data(rng, *shape, batches=6):
    return [fxkit.from_numpy(rng.standard_normal(shape).astype(np.float32)) for _ in range(batches)]


def _observers(gm):
    return [n for n in gm.graph.nodes if n.op == "call" and isinstance(n.target, str)
            and isinstance(gm.get_submodule(n.target), MinMaxObserver)]


def _quantized(model, data, qconfig=None):
    prepared = prepare(model.eval(), qconfig)
    calibrate(prepared, data, progress=False)
    return prepared, convert(prepared, report=False)


def test_prepare_puts_an_observer_after_each_activation_and_prints_them():
    fxkit.manual_seed(0)
    prepared = prepare(fxkit.models.MLP(8, (16, 12), 4).eval())
    assert str(prepared.graph) == """graph(x):
    %x                         = placeholder[x]
    %flatten                   = call[flatten](%x, 1)
    %activation_post_process_0 = call[self.activation_post_process_0](%flatten)
    %layers_0                  = call[self.layers.0](%activation_post_process_0)
    %relu                      = call[relu](%layers_0)
    %activation_post_process_1 = call[self.activation_post_process_1](%relu)
    %layers_1                  = call[self.layers.1](%activation_post_process_1)
    %relu_1                    = call[relu](%layers_1)
    %activation_post_process_2 = call[self.activation_post_process_2](%relu_1)
    %head                      = call[self.head](%activation_post_process_2)
    %activation_post_process_3 = call[self.activation_post_process_3](%head)
    return %activation_post_process_3"""
    assert prepared.get_submodule("layers.0") is not None
    info = next(n for n in prepared.graph.nodes if n.name == "layers_0").meta["quantize"]
    assert (info["kind"], info["module"], info["fused_relu"], info["qconfig"]) == ("linear", "layers.0", "relu",
                                                                                 default_qconfig)


def test_prepare_copies_the_model_and_annotates_shapes_without_calibrating(rng):
    model = fxkit.models.MLP(8, (16,), 4).eval()
    prepared = prepare(model, example_inputs=(fxkit.randn(3, 8),))
    assert "f32[3, 16]" in str(prepared.graph)
    assert not any(prepared.get_submodule(n.target).calibrated for n in _observers(prepared))
    assert prepared.get_submodule("layers.0").weight is not model.layers[0].weight


def test_conv_bn_relu_fold_and_fuse_and_pooling_shares_the_observer(rng):
    model = ConvBnNet().eval()
    model.bn.running_mean._data[...] = rng.standard_normal(4)
    model.bn.running_var._data[...] = rng.random(4) + 0.5
    prepared = prepare(model)
    text = str(prepared.graph)
    assert "bn" not in text and "self.conv" in text
    # observers: the input, conv+relu, and fc; max_pool2d and flatten carry conv's observer
    assert [n.args[0].name for n in _observers(prepared)] == ["x", "relu", "fc"]
    data = _data(rng, 8, 2, 6, 6)
    calibrate(prepared, data, progress=False)
    quantized = convert(prepared, report=False)
    kernels = [n for n in quantized.graph.nodes if n.op == "call" and getattr(n.target, "name", "").startswith(
        "quantized_")]
    assert [(n.target.name, n.kwargs["relu"]) for n in kernels] == [("quantized_conv2d", True),
                                                                  ("quantized_linear", False)]
    ops = [n.target.name for n in quantized.graph.nodes if n.op == "call"]
    assert ops == ["quantize_affine", "quantized_conv2d", "max_pool2d", "flatten", "quantized_linear",
                   "dequantize_affine"]
    x = data[0]  # inside the calibrated ranges: the error is a few quantization steps
    np.testing.assert_allclose(quantized(x).numpy(), model(x).numpy(), atol=0.05 * np.abs(model(x).numpy()).max())


class ConvReLU6Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.act = nn.ReLU6()
        self.fc = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x):
        return self.fc(self.act(self.conv(x)).flatten(1))


def test_relu6_fuses_into_the_layer_and_saturates_at_six(rng):
    model = ConvReLU6Net().eval()
    model.conv.weight._data *= 8  # outputs well beyond 6 and below 0
    prepared = prepare(model)
    assert [n.args[0].name for n in _observers(prepared)] == ["x", "act", "fc"]
    data = _data(rng, 8, 2, 6, 6)
    calibrate(prepared, data, progress=False)
    quantized = convert(prepared, report=False)
    kernels = [(n.target.name, n.kwargs.get("relu")) for n in quantized.graph.nodes if n.op == "call"]
    assert kernels == [("quantize_affine", None), ("quantized_conv2d", True), ("flatten", None),
                       ("quantized_linear", False), ("dequantize_affine", None)]
    x = data[0]
    interpreter = fxkit.Interpreter(quantized, garbage_collect_values=False)
    interpreter.run(x)
    conv_q = next(n for n in quantized.graph.nodes if n.name == "conv_q")
    qp = conv_q.meta["qparams"]
    got = (interpreter.env[conv_q].numpy().astype(np.float64) - qp.zero_point) * qp.scale
    conv = model.conv(x).numpy().astype(np.float64)
    assert conv.max() > 7 and conv.min() < -1
    # input and weight rounding move a pre-activation (weights of |w| up to 3) by a few percent of 6
    np.testing.assert_allclose(got, np.clip(conv, 0, 6), atol=0.05 * 6)
    np.testing.assert_allclose(got[conv > 6.5], 6, rtol=1e-6)  # the kernel's saturation is the clamp at 6
    assert np.all(got[conv < -0.5] == 0)


def _qdq(x, scale, zero_point, qmin=-128, qmax=127):
    return (np.clip(np.rint(x / scale + zero_point), qmin, qmax) - zero_point) * scale


@pytest.mark.parametrize("qconfig", [default_qconfig, per_channel_qconfig], ids=["per-tensor", "per-channel"])
def test_converted_mlp_computes_the_quantized_arithmetic(rng, qconfig):
    """The integer model equals a float64 simulation of quantize -> int8 layer -> requantize,
    to within one output step (bias and fixed-point rounding)."""
    fxkit.manual_seed(1)
    model = fxkit.models.MLP(8, (16,), 4).eval()
    prepared, quantized = _quantized(model, _data(rng, 32, 8), qconfig)
    observers = [prepared.get_submodule(n.target) for n in _observers(prepared)]
    (s0, z0), (s1, z1), (s2, z2) = (o.calculate_qparams() for o in observers)
    x = _data(rng, 20, 8, batches=1)[0].numpy().astype(np.float64)

    def layer(v, linear, scale, zero_point, relu):
        w = linear.weight.numpy().astype(np.float64)
        w_observer = qconfig.weight()
        w_observer(linear.weight)
        w_scale, w_zero = w_observer.calculate_qparams()
        w_scale = np.reshape(w_scale, (-1, 1)) if np.ndim(w_scale) else w_scale
        y = v @ _qdq(w, w_scale, 0).T + linear.bias.numpy()
        return _qdq(np.maximum(y, 0) if relu else y, scale, zero_point)

    h = layer(_qdq(x, s0, z0), model.layers[0], s1, z1, True)
    expected = layer(h, model.head, s2, z2, False)
    got = quantized(fxkit.from_numpy(x.astype(np.float32))).numpy()
    assert np.abs(got - expected).max() <= s2 * 1.01 + 1e-6


def test_unsupported_ops_stay_float_with_a_report(rng):
    fxkit.manual_seed(2)
    prepared = prepare(FunctionalNet().eval())
    calibrate(prepared, _data(rng, 16, 5), progress=False)
    out = io.StringIO()
    quantized = convert(prepared, console=Console(file=out, width=200))
    report = quantized.conversion_report
    assert report.quantized == ["linear", "fc"]
    assert [(f.node, f.reason) for f in report.stayed_float] == [("sigmoid", "no integer kernel for sigmoid")]
    printed = out.getvalue()
    assert "2 layer(s) on integer kernels (linear, fc), 1 node(s) stayed float" in printed
    assert "sigmoid" in printed and "no integer kernel for sigmoid" in printed
    ops = [n.target.name if hasattr(n.target, "name") else n.target for n in quantized.graph.nodes if n.op == "call"]
    assert ops == ["quantize_affine", "quantized_linear", "dequantize_affine", "sigmoid", "quantize_affine",
                   "quantized_linear", "dequantize_affine"]
    assert not hasattr(quantized, "w")  # the float weight is gone, the int8 one replaces it


def test_mapping_by_module_name_type_and_op(rng):
    fxkit.manual_seed(3)
    mapping = (QConfigMapping().set_global(default_qconfig)
               .set_object_type(fxkit.ops.linear, per_channel_qconfig)
               .set_module_name("fc", None))
    prepared = prepare(FunctionalNet().eval(), mapping)
    info = {n.name: n.meta["quantize"] for n in prepared.graph.nodes if "quantize" in n.meta}
    assert info["linear"]["qconfig"] is per_channel_qconfig
    assert info["fc"]["qconfig"] is None and info["fc"]["reason"] == "the qconfig mapping gives it None"
    calibrate(prepared, _data(rng, 16, 5), progress=False)
    quantized = convert(prepared, report=False)
    assert quantized.conversion_report.quantized == ["linear"]
    assert ("fc", "the qconfig mapping gives it None") in [(f.node, f.reason)
                                                           for f in quantized.conversion_report.stayed_float]
    assert isinstance(quantized.get_submodule("fc"), nn.Linear)
    dict_form = prepare(FunctionalNet().eval(), {"": default_qconfig, "module_name": [("fc", None)]})
    assert next(n for n in dict_form.graph.nodes if n.name == "fc").meta["quantize"]["qconfig"] is None


def test_quantized_graphs_go_through_passes_backends_and_save(rng, tmp_path):
    fxkit.manual_seed(4)
    model = ConvBnNet().eval()
    _, quantized = _quantized(model, _data(rng, 4, 2, 6, 6), per_channel_qconfig)
    x = _data(rng, 3, 2, 6, 6, batches=1)[0]
    expected = quantized(x).numpy()
    ShapeProp(quantized).propagate(x)
    text = str(quantized.graph)
    assert re.search(r"%conv_q +: i8\[3, 4, 6, 6\] += call\[quantized_conv2d\]", text), text
    assert re.search(r"%dequantize_affine +: f32\[3, 5\] ", text), text
    for backend in ("numpy", "numba"):
        compiled = fxkit.compile(quantized, backend=backend, example_inputs=[x])
        np.testing.assert_array_equal(compiled(x).numpy(), expected, err_msg=backend)
    fxkit.save(quantized, tmp_path / "int8")
    np.testing.assert_array_equal(fxkit.load(tmp_path / "int8")(x).numpy(), expected)
