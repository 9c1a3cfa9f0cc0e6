"""`correct_bias`: empirical bias correction of a calibrated model before `convert`.

Rounding a layer's weight to int8 and its input to the activation grid moves
the mean of each output channel: ``E[W_q x_q] - E[W x]`` is not zero, because
the weight errors of a channel do not cancel against inputs that are all
positive (after a ReLU) and because the input's rounding is clipped at the
range ends. Those shifts add up layer after layer. Empirical bias correction
(Nagel et al., "Data-Free Quantization through Weight Equalization and Bias
Correction", 2019, section 4.2; AIMET's empirical variant) measures the shift
of every layer on calibration data and subtracts it from the layer's bias.

Layers are corrected in graph order, all batches at once: the float model and
its simulated quantized twin (observers quantize and dequantize their value,
layers compute with dequantized int8 weights) run side by side one node at a
time, so the shift measured at a layer already includes the corrections of the
layers before it, as the converted model will.

Example:
    >>> prepared = prepare(gm, per_channel_histogram_qconfig)
    >>> calibrate(prepared, batches)
    >>> correct_bias(prepared, batches)      # changes the biases of prepared in place
    >>> quantized = convert(prepared)
"""
import numpy as np

from fxkit.errors import GraphError
from fxkit.graph import Interpreter
from fxkit.runtime.autograd import no_grad
from fxkit.runtime.nn.parameter import Parameter
from fxkit.runtime.tensor import Tensor
from fxkit.transforms.quantize.calibrate import batch_arguments
from fxkit.transforms.quantize.convert import check_calibrated
from fxkit.transforms.quantize.observers import PER_TENSOR
from fxkit.transforms.quantize.patterns import is_observer_call, layer_parameters, submodule
from fxkit.transforms.quantize.prepare import free_attribute_name


def correct_bias(prepared, data):
    """Subtract from each quantized layer's bias the mean shift quantization gives its output.

    Args:
        prepared: a calibrated GraphModule from `prepare` (post-training quantization).
        data: calibration batches, as for `calibrate` (the same batches serve); they are
            all held in memory together, one layer's activations at a time.

    Returns:
        ``prepared``, its biases corrected in place (a layer without a bias gets one).

    Raises:
        GraphError: an observer never saw data, the model was prepared for
            quantization-aware training, or a batch does not fit the model's inputs.
    """
    check_calibrated(prepared)
    graph = prepared.graph
    layers = [n for n in graph.nodes if (n.meta.get("quantize") or {}).get("qconfig") is not None]
    if any(layer_parameters(prepared, n)["weight_fake_quant"] is not None for n in layers):
        raise GraphError("correct_bias: the model was prepared for quantization-aware training (its weights have "
                         "fake quantizers); bias correction is for post-training quantization: use prepare")
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    batches = [batch_arguments(batch, [n.name for n in inputs], i) for i, batch in enumerate(data)]
    if not batches:
        raise GraphError("correct_bias: no calibration batches; pass the batches given to calibrate")
    _Twins(prepared, batches).run(set(layers))
    return prepared


class _Twins(Interpreter):
    """The float model and its simulated quantized twin, run node by node over every batch."""

    def __init__(self, gm, batches):
        super().__init__(gm, garbage_collect_values=False)
        self.batches = batches
        self.simulate = False

    def run(self, layers):
        nodes = list(self.graph.nodes)
        last_use = {}
        for index, node in enumerate(nodes):
            for used in node.all_input_nodes:
                last_use[used] = index
        position = {n: i for i, n in enumerate(n for n in nodes if n.op == "placeholder")}
        envs = {"float": [{} for _ in self.batches], "quantized": [{} for _ in self.batches]}
        observers = [submodule(self.module, n) for n in nodes if is_observer_call(self.module, n)]
        states = [m.enabled for m in observers]
        for module in observers:
            module.enabled = False
        try:
            with no_grad():
                for index, node in enumerate(nodes):
                    if node.op == "output":
                        break
                    for kind, per_batch in envs.items():
                        self.simulate = kind == "quantized"
                        for env, batch in zip(per_batch, self.batches):
                            env[node] = batch[position[node]] if node in position else self.value(env, node)
                    if node in layers:
                        self.correct(node, envs)
                    for per_batch in envs.values():
                        for env in per_batch:
                            for used in node.all_input_nodes:
                                if last_use[used] == index:
                                    del env[used]
        finally:
            for module, state in zip(observers, states):
                module.enabled = state

    def value(self, env, node):
        self.env = env
        value = self.run_node(node)
        if self.simulate and is_observer_call(self.module, node):
            observer = submodule(self.module, node)
            scale, zero_point = observer.calculate_qparams()
            value = _on_grid(value, scale, zero_point, observer.quant_min, observer.quant_max)
        return value

    def run_node(self, n):
        if not (self.simulate and (n.meta.get("quantize") or {}).get("qconfig") is not None):
            return super().run_node(n)
        weight = layer_parameters(self.module, n)["weight"]
        original = weight._data
        weight._data = _quantized_weight(n.meta["quantize"], weight)
        try:
            return super().run_node(n)
        finally:
            weight._data = original

    def correct(self, node, envs):
        kind = node.meta["quantize"]["kind"]
        float_out = [env[node]._data for env in envs["float"]]
        quant_out = [env[node]._data for env in envs["quantized"]]
        channel = 1 if kind == "conv2d" else -1
        axes = tuple(i for i in range(float_out[0].ndim) if i != channel % float_out[0].ndim)
        count = sum(np.prod([a.shape[i] for i in axes]) for a in float_out)
        shift = sum((q.astype(np.float64) - f).sum(axis=axes) for q, f in zip(quant_out, float_out)) / count
        bias = _bias(self.module, node, shift.shape[0], envs["float"][0][node])
        bias._data -= bias.device.xp.asarray(shift.astype(bias._data.dtype))
        shape = [1] * float_out[0].ndim
        shape[channel] = -1
        step = shift.astype(np.float32).reshape(shape)
        for env in envs["quantized"]:
            env[node] = Tensor._make(env[node]._data - env[node].device.xp.asarray(step), env[node].device)


def _on_grid(value, scale, zero_point, quant_min, quant_max):
    """``value`` quantized to the per-tensor grid and back (float32), as `convert`'s kernels round."""
    data = value._data
    xp = value.device.xp
    q = xp.clip(xp.rint(data * np.float32(1 / scale) + np.float32(zero_point)), quant_min, quant_max)
    return Tensor._make(((q - np.float32(zero_point)) * np.float32(scale)).astype(np.float32), value.device)


def _quantized_weight(info, weight):
    """The dequantized int8 weight `convert` will store for ``weight`` (same observer, same range)."""
    observer = info["qconfig"].weight()
    observer(weight.detach())
    scale, zero_point = info.get("weight_qparams") or observer.calculate_qparams()
    data = weight._data
    xp = weight.device.xp
    if observer.qscheme not in PER_TENSOR:
        shape = (-1,) + (1,) * (data.ndim - 1)
        scale, zero_point = xp.asarray(scale).reshape(shape), xp.asarray(zero_point).reshape(shape)
    q = xp.clip(xp.rint(data / scale) + zero_point, observer.quant_min, observer.quant_max)
    return ((q - zero_point) * scale).astype(data.dtype)


def _bias(gm, node, channels, like):
    """The layer's bias Parameter; a zero one (on ``like``'s device and dtype) is added when it has none."""
    bias = layer_parameters(gm, node)["bias"]
    if bias is not None:
        return bias
    zeros = Parameter(Tensor._make(like.device.xp.zeros(channels, like._data.dtype), like.device))
    module = submodule(gm, node)
    if module is not None:
        module.bias = zeros
        return module.bias
    name = free_attribute_name(gm, f"{node.name}_bias")
    gm.register_parameter(name, zeros)
    with gm.graph.inserting_before(node):
        attribute = gm.graph.get_attr(name)
    if len(node.args) > 2:
        node.args = node.args[:2] + (attribute,) + node.args[3:]
    else:
        node.kwargs = {**node.kwargs, "bias": attribute}
    gm.recompile()
    return getattr(gm, name)
