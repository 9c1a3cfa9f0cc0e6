"""`convert`: turn a calibrated prepared model into one that runs on integer kernels.

Before (prepared and calibrated), for ``fc1 -> relu -> fc2``::

    %obs_0 = call[self.activation_post_process_0](%x)
    %fc1   = call[self.fc1](%obs_0)
    %relu  = call[relu](%fc1)
    %obs_1 = call[self.activation_post_process_1](%relu)
    %fc2   = call[self.fc2](%obs_1)
    %obs_2 = call[self.activation_post_process_2](%fc2)
    return %obs_2

after::

    %quantize_affine = call[quantize_affine](%x, 0.0157, -1, fxkit.int8)
    %fc1_weight_int8 = get_attr[fc1_weight_int8]
    %fc1_bias_int32  = get_attr[fc1_bias_int32]
    %fc1_q = call[quantized_linear](%quantize_affine, %fc1_weight_int8, %fc1_bias_int32, -1, 0,
                                    1518500250, -8, -128, dtype=fxkit.int8, relu=True)
    ...
    %fc2_q = call[quantized_linear](%fc1_q, %fc2_weight_int8, %fc2_bias_int32, -128, 0, ...)
    %dequantize_affine = call[dequantize_affine](%fc2_q, 0.081, 12)
    return %dequantize_affine

Walking the graph in order, each node either holds quantized integers (with
the scale, zero point and dtype recorded in ``node.meta["qparams"]``) or floats:

* an observer on a float value becomes ``quantize_affine`` with its qparams;
* a marked layer whose input is quantized becomes ``quantized_linear`` or
  ``quantized_conv2d``: its weight is quantized (int8 buffer) with the qconfig's
  weight observer (or, after `prepare_qat`, the qparams its fake quantizer
  trained with), the bias becomes int32 at scale ``input_scale * weight_scale``,
  and the output observer's qparams give the fixed-point requantization factor;
  a fused ReLU becomes the kernel's ``relu=True``;
* a layer whose output only float ops read (a residual ``add``, an average
  pool, the graph's output) writes its accumulator dequantized instead
  (``dtype=fxkit.float32``, ``float_outputs=True``): no int8 rounding of a value
  that is dequantized right after; the next observer quantizes the float result
  (after the add and its ReLU);
* pooling, reshapes and ReLU (``clamp(q, min=zero_point)``) pass quantized
  values through with their qparams;
* anything else stays float: its quantized inputs are dequantized first, and
  the report says which nodes stayed float and why.
"""
import copy
from typing import NamedTuple

import numpy as np

from fxkit.errors import GraphError, format_error
from fxkit.graph.node import SourceLocation
from fxkit.runtime.autograd import no_grad
from fxkit.runtime.dtypes import DType, float32
from fxkit.runtime.ops.quantized_ops import quantize_multiplier
from fxkit.runtime.quantized import quant_range, quantize_affine
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor
from fxkit.transforms.quantize.observers import PER_TENSOR
from fxkit.transforms.quantize.patterns import (is_observer_call, is_relu, is_transparent, layer_parameters,
                                                submodule)
from fxkit.transforms.remove_dropout import RemoveDropout

_KERNELS = {"linear": get_op("quantized_linear"), "conv2d": get_op("quantized_conv2d")}
_QUANTIZE, _DEQUANTIZE, _CLAMP = get_op("quantize_affine"), get_op("dequantize_affine"), get_op("clamp")
_INT32 = np.iinfo(np.int32)
_SHAPE_KEYS = ("shape", "dtype", "device", "tensor_meta")


class QParams(NamedTuple):
    """How a node's integers stand for reals: ``(q - zero_point) * scale``."""

    scale: float
    zero_point: int
    dtype: DType


class FloatNode(NamedTuple):
    """A node `convert` left in float, and why."""

    node: str
    target: str
    reason: str


class ConversionReport(NamedTuple):
    """What `convert` did: the layers now on integer kernels, the nodes left in float, and the
    layers (among the quantized) whose kernels write float outputs."""

    quantized: list
    stayed_float: list
    float_outputs: list


def convert(prepared, report=True, console=None, float_outputs=False):
    """Replace the observed layers of ``prepared`` with integer kernels.

    Args:
        prepared: a GraphModule from `prepare` (calibrated) or `prepare_qat` (trained).
        report: print what stayed float and why (a rich table).
        console: the rich console to print on.
        float_outputs: a layer whose output only float ops read (a residual add, the
            logits) writes its int32 accumulator dequantized to float32 instead of
            requantizing it to int8 (its output observer goes unused). False: every
            layer's output is int8, as PyTorch's ``convert_fx`` makes it. On the corpus
            resnet18 it raises the logits' SQNR by 0.9 dB (top-1 agreement unchanged, 0.875),
            but onnxruntime then runs those layers as float convolutions
            (docs/transforms/quantize.md).

    Returns:
        A new GraphModule computing with int8 weights and activations;
        ``gm.conversion_report`` is the `ConversionReport`.

    Raises:
        GraphError: an observer never saw data (checked before anything changes).
    """
    check_calibrated(prepared)
    gm = copy.deepcopy(prepared)
    gm.eval()
    gm = RemoveDropout(force=True)(gm)
    attributes = {n.target for n in gm.graph.nodes if n.op == "get_attr"}
    converter = _Converter(gm, float_outputs)
    with no_grad():
        converter.run()
    gm.graph.eliminate_dead_code()
    still_read = {n.target for n in gm.graph.nodes if n.op == "get_attr"}
    called = {n.target for n in gm.graph.nodes if n.op == "call" and isinstance(n.target, str)}
    for target in attributes - still_read:
        owner = target.rpartition(".")[0]
        if not any(c == owner or c.startswith(owner + ".") or owner.startswith(c + ".") for c in called if owner):
            _delete_attribute(gm, target)  # a float weight the integer kernel replaced
    gm.delete_all_unused_submodules()
    gm.graph.lint()
    gm.recompile()
    gm.conversion_report = ConversionReport(converter.quantized, converter.stayed_float, converter.float_outputs)
    if report:
        print_report(gm.conversion_report, console)
    return gm


def check_calibrated(prepared):
    """Raise a GraphError naming every observer of ``prepared`` that has seen no data."""
    missing = []
    for node in prepared.graph.nodes:
        if is_observer_call(prepared, node) and not submodule(prepared, node).calibrated:
            source = node.args[0]
            where = f" at {node.meta['stack']}" if isinstance(node.meta.get("stack"), SourceLocation) else ""
            missing.append(f"%{node.name} (observes %{source.name}{where})")
    if missing:
        raise GraphError(format_error(
            f"convert: {len(missing)} observer(s) never saw data: {', '.join(missing)}",
            hint="run calibrate(prepared, data) with representative inputs before convert "
                 "(a prepare_qat model: run or train it first)"))


class _Converter:
    def __init__(self, gm, float_outputs):
        self.gm = gm
        self.graph = gm.graph
        self.write_float = float_outputs
        self.qparams = {}
        self.dequantized = {}
        self.erased = set()
        self.quantized = []
        self.stayed_float = []
        self.float_outputs = []

    def run(self):
        for node in list(self.graph.nodes):
            if node in self.erased:
                continue
            if node.op == "output":
                self.dequantize_inputs(node)
            elif node.op != "call":
                continue
            elif is_observer_call(self.gm, node):
                self.observer(node)
            elif (node.meta.get("quantize") or {}).get("qconfig") is not None:
                self.layer(node)
            elif is_transparent(self.gm, node):
                if node.args[0] in self.qparams:
                    self.transparent(node)
                else:
                    self.stays_float(node, "its input is float (the quantized region starts after it)")
            else:
                self.stays_float(node)

    # -- values --------------------------------------------------------------------------
    def observed(self, node):
        scale, zero_point = submodule(self.gm, node).calculate_qparams()
        return QParams(scale, zero_point, submodule(self.gm, node).dtype)

    def mark(self, node, qparams):
        for key in _SHAPE_KEYS:
            node.meta.pop(key, None)
        node.meta["qparams"] = qparams
        self.qparams[node] = qparams

    def erase(self, *nodes):
        for node in nodes:
            self.graph.erase_node(node)
            self.erased.add(node)

    def dequantized_value(self, node):
        dequantized = self.dequantized.get(node)
        if dequantized is None:
            qp = self.qparams[node]
            with self.graph.inserting_after(node):
                dequantized = self.graph.call(_DEQUANTIZE, (node, qp.scale, qp.zero_point))
            dequantized.meta["stack"] = node.meta.get("stack")
            self.dequantized[node] = dequantized
        return dequantized

    def dequantize_inputs(self, node):
        for value in node.all_input_nodes:
            if value in self.qparams:
                node.replace_input_with(value, self.dequantized_value(value))

    # -- node kinds ----------------------------------------------------------------------
    def observer(self, node):
        source = node.args[0]
        if source.op == "get_attr":
            return  # a weight's fake quantizer: its layer reads the qparams
        qp = self.observed(node)
        if self.qparams.get(source) == qp:
            node.replace_all_uses_with(source)
            self.erase(node)
            return
        value = self.dequantized_value(source) if source in self.qparams else source
        with self.graph.inserting_before(node):
            quantized = self.graph.call(_QUANTIZE, (value, qp.scale, qp.zero_point, qp.dtype))
        quantized.meta["stack"] = node.meta.get("stack")
        self.mark(quantized, qp)
        node.replace_all_uses_with(quantized)
        self.erase(node)

    def transparent(self, node):
        qp = self.qparams[node.args[0]]
        if not is_relu(self.gm, node):
            self.mark(node, qp)
            return
        with self.graph.inserting_before(node):
            clamped = self.graph.call(_CLAMP, (node.args[0],), {"min": qp.zero_point}, name=f"{node.name}_q")
        clamped.meta["stack"] = node.meta.get("stack")
        self.mark(clamped, qp)
        node.replace_all_uses_with(clamped)
        self.erase(node)

    def stays_float(self, node, reason=None):
        self.dequantize_inputs(node)
        if reason is None:
            reason = (node.meta.get("quantize") or {}).get("reason") or f"no integer kernel for {_what(self.gm, node)}"
        self.stayed_float.append(FloatNode(node.name, _what(self.gm, node), reason))

    def layer(self, node):
        info = node.meta["quantize"]
        source = node.args[0]
        qin = self.qparams.get(source)
        out = next((u for u in node.users if u.name == info["fused_relu"]), node) if info["fused_relu"] else node
        observers = [u for u in out.users if is_observer_call(self.gm, u)]
        if qin is None or len(observers) != 1 or len(out.users) != 1:
            why = "its input is not quantized" if qin is None else "its output is not observed"
            return self.stays_float(node, why)
        observer = observers[0]
        float_out = self.write_float and read_only_in_float(self.gm, observer)
        # NOTE: a float output is the real value itself: scale 1, zero point 0, no rounding.
        qout = QParams(1.0, 0, float32) if float_out else self.observed(observer)
        # ReLU6's upper bound is the int8 output's saturation (`fused_relu`); a float output keeps it as a node.
        keep_activation = float_out and out is not node and not is_relu(self.gm, out)
        params = layer_parameters(self.gm, node)
        arguments = self.integer_arguments(node, info, params, qin, qout)
        kwargs = {"dtype": qout.dtype, "relu": out is not node and not keep_activation}
        if info["kind"] == "conv2d":
            kwargs = {key: params[key] for key in ("stride", "padding", "dilation", "groups")} | kwargs
        with self.graph.inserting_before(node):
            arguments = [self.graph.get_attr(str(a)) if isinstance(a, _Attribute) else a for a in arguments]
            quantized = self.graph.call(_KERNELS[info["kind"]], tuple(arguments), kwargs, name=f"{_base(node)}_q")
        quantized.meta["stack"] = node.meta.get("stack")
        if float_out:
            self.float_outputs.append(info["module"] or node.name)
        else:
            self.mark(quantized, qout)
        if keep_activation:
            out.replace_input_with(node, quantized)
            observer.replace_all_uses_with(out)
            self.erase(observer, node)
        else:
            observer.replace_all_uses_with(quantized)
            self.erase(observer, *([out] if out is not node else []), node)
        self.quantized.append(info["module"] or node.name)

    def integer_arguments(self, node, info, params, qin, qout):
        """The kernel's positional arguments up to ``output_zero_point``, new buffers as `_Attribute`."""
        w_scale, w_zero_point, w_dtype, per_channel, w_range = self.weight_qparams(info, params)
        weight = params["weight"].detach()
        if per_channel:
            device = weight.device
            scales = Tensor._make(device.xp.asarray(w_scale), device)
            zeros = Tensor._make(device.xp.asarray(w_zero_point), device)
            weight_q = quantize_affine(weight, scales, zeros, w_dtype, 0)
        else:
            weight_q = quantize_affine(weight, w_scale, w_zero_point, w_dtype)
        if w_range != quant_range(w_dtype):
            # NOTE: a narrower range (reduce_range: -64..63) is a promise to the kernels that run
            # the model (x86_qconfig); symmetric rounding may reach 64, so clamp like FakeQuantize.
            weight_q = weight_q.clamp(*w_range)
        w_scale64 = np.asarray(w_scale, np.float64)
        multiplier, shift = quantize_multiplier(qin.scale * w_scale64 / qout.scale)
        bias = params["bias"]
        bias_q = None
        if bias is not None:
            real = np.asarray(bias.detach().cpu().numpy(), np.float64) / (qin.scale * w_scale64)
            bias_q = _Attribute(self.buffer(node, "bias_int32", np.clip(np.rint(real), _INT32.min, _INT32.max)
                                            .astype(np.int32), weight.device))
        weight_attr = _Attribute(self.buffer_tensor(node, f"weight_{w_dtype.name}", weight_q))
        if per_channel:
            multiplier = _Attribute(self.buffer(node, "multiplier", multiplier, weight.device))
            # NOTE: shifts lie in [-31, 30]: int8 keeps small saved models small.
            shift = _Attribute(self.buffer(node, "shift", shift.astype(np.int8), weight.device))
            w_zero_point = (0 if not np.any(w_zero_point) else
                            _Attribute(self.buffer(node, "weight_zero_point", np.asarray(w_zero_point, np.int32),
                                                   weight.device)))
        else:
            multiplier, shift = int(multiplier), int(shift)
        return [node.args[0], weight_attr, bias_q, qin.zero_point, w_zero_point, multiplier, shift, qout.zero_point]

    def weight_qparams(self, info, params):
        """``(scale, zero_point, dtype, per_channel, (quant_min, quant_max))`` of the layer's weight."""
        fake_quant = params["weight_fake_quant"]
        if fake_quant is not None:
            observer = submodule(self.gm, fake_quant)
        else:
            observer = info["qconfig"].weight()
            observer(params["weight"].detach())
        # NOTE: `round_weights` fixes the grid before it rounds; re-observing its rounded weight
        # could pick a smaller scale (no value left at the extreme) and round a second time.
        scale, zero_point = info.get("weight_qparams") or observer.calculate_qparams()
        base = observer.activation_post_process if hasattr(observer, "activation_post_process") else observer
        return (scale, zero_point, observer.dtype, observer.qscheme not in PER_TENSOR,
                (base.quant_min, base.quant_max))

    def buffer(self, node, suffix, array, device):
        return self.buffer_tensor(node, suffix, Tensor._make(device.xp.asarray(array), device))

    def buffer_tensor(self, node, suffix, tensor):
        base = _base(node)
        name, i = f"{base}_{suffix}", 1
        while hasattr(self.gm, name):
            name, i = f"{base}_{suffix}_{i}", i + 1
        self.gm.register_buffer(name, tensor)
        return name


class _Attribute(str):
    """A buffer name that becomes a ``get_attr`` node (not a string constant) in the layer's call."""


def read_only_in_float(gm, value):
    """Whether every reader of ``value`` (an observer's output) computes in float: none is a
    quantized layer taking it as input or an op passing it on quantized to one (pooling,
    reshapes, ReLU, followed to their own readers)."""
    for user in value.users:
        info = user.meta.get("quantize") or {}
        if info.get("qconfig") is not None and user.args and user.args[0] is value:
            return False
        if is_transparent(gm, user) and not read_only_in_float(gm, user):
            return False
    return True


def _base(node):
    """The name a layer's buffers and kernel node are called after: its module, else its node."""
    module = node.meta["quantize"].get("module")
    return module.replace(".", "_") if module else node.name


def _what(gm, node):
    module = submodule(gm, node)
    if module is not None:
        return type(module).__name__
    return getattr(node.target, "name", None) or getattr(node.target, "__name__", str(node.target))


def _delete_attribute(gm, target):
    *path, field = target.split(".")
    try:
        owner = gm.get_submodule(".".join(path)) if path else gm
    except AttributeError:
        return
    if hasattr(owner, field):
        delattr(owner, field)


def print_report(report, console=None):
    """Print a `ConversionReport`: how many layers run on integer kernels, and a table of the
    nodes that stayed float with the reason."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    console.print(f"convert: {len(report.quantized)} layer(s) on integer kernels"
                  + (f" ({', '.join(report.quantized)})" if report.quantized else "")
                  + (f", {len(report.float_outputs)} writing float outputs" if report.float_outputs else "")
                  + f", {len(report.stayed_float)} node(s) stayed float")
    if report.stayed_float:
        table = Table("node", "computes", "stayed float because", title="stayed float")
        for entry in report.stayed_float:
            table.add_row(Text(entry.node), Text(entry.target), Text(entry.reason))
        console.print(table)


__all__ = ["ConversionReport", "FloatNode", "QParams", "check_calibrated", "convert", "print_report",
           "read_only_in_float"]
