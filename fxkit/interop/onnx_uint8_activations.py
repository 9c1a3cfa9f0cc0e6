"""Exported QDQ graphs carry int8 activations as uint8: the same values, on the kernels x86 runtimes run fast.

fxkit quantizes activations to int8 (``torch.qint8``-like, zero point in
[-128, 127]). onnxruntime's x86 integer kernels are built for uint8
activations times int8 weights (U8S8, what VNNI multiplies): a QDQ model with
int8 activations leaves many convolutions unfused and float (measured on
ResNet-18: 12 of 20 convolutions fused, 1.4x faster than float32; with uint8
activations all 20, 4.3x). ``q_u8 = q_s8 + 128`` with zero point ``z + 128``
dequantizes to exactly the same reals, so the exporter rewrites every int8
activation it quantized itself to uint8: the ``QuantizeLinear`` that makes it,
the ops that only move its values (max pooling, reshapes), a ``Clip`` (the
quantized ReLU, bounds shifted alike), and the ``DequantizeLinear`` nodes
reading it. An activation read by anything else
(a graph output, another op) keeps int8, and so do weights (initializers).
"""
import numpy as np
from onnx import TensorProto, numpy_helper

# The operands (by position) that hold int8 values on the activation's scale, shifted with it: the zero
# point of a DequantizeLinear, the bounds of a Clip.
_INT8_OPERANDS = {"DequantizeLinear": (2,), "Clip": (1, 2)}
# Ops whose output holds values of their first input, unchanged, so it can take the input's type.
_MOVES_VALUES = frozenset({"MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity",
                           "Slice", "Expand", "Tile", "DepthToSpace", "SpaceToDepth"})


def uint8_activations(nodes, initializers, graph_outputs):
    """Rewrite int8 activations made by ``QuantizeLinear`` in ``nodes`` to uint8, in place.

    Args:
        nodes: the graph's `onnx.NodeProto` list.
        initializers: its `onnx.TensorProto` list; uint8 zero points are appended.
        graph_outputs: names of the graph's outputs (kept as they are).
    """
    constants = {t.name: t for t in initializers}
    readers = {}
    for node in nodes:
        for i, name in enumerate(node.input):
            readers.setdefault(name, []).append((node, i))
    shifted = {}

    def uint8_zero_point(name):
        if name not in shifted:
            values = numpy_helper.to_array(constants[name]).astype(np.int16) + 128
            tensor = numpy_helper.from_array(values.astype(np.uint8), f"{name}_as_uint8")
            initializers.append(tensor)
            shifted[name] = tensor.name
        return shifted[name]

    for node in nodes:
        if node.op_type == "QuantizeLinear" and _int8_constant(node, constants):
            readers_of = _convertible(node.output[0], readers, constants, graph_outputs)
            if readers_of is None:
                continue
            node.input[2] = uint8_zero_point(node.input[2])
            for reader in readers_of:
                for i in _INT8_OPERANDS[reader.op_type]:
                    if i < len(reader.input) and reader.input[i]:
                        reader.input[i] = uint8_zero_point(reader.input[i])
    used = {name for node in nodes for name in node.input}
    initializers[:] = [t for t in initializers if t.name in used or t.name in graph_outputs]


def _int8_constant(node, constants):
    """Whether the node's zero point (input 2) is an int8 initializer."""
    if len(node.input) < 3 or node.input[2] not in constants:
        return False
    return constants[node.input[2]].data_type == TensorProto.INT8


def _convertible(name, readers, constants, graph_outputs):
    """The nodes with int8 operands to shift that read the values of ``name`` (DequantizeLinear, Clip;
    through value-moving ops), or None when something else reads them (which would then see uint8
    where it expects int8)."""
    found, todo = [], [name]
    while todo:
        value = todo.pop()
        if value in graph_outputs:
            return None
        for node, index in readers.get(value, ()):
            if index != 0:
                return None
            if node.op_type == "DequantizeLinear" and not _int8_constant(node, constants):
                return None  # NOTE: without a zero point it would read uint8 values as zero point 0
            if node.op_type in _INT8_OPERANDS:
                operands = [node.input[i] for i in _INT8_OPERANDS[node.op_type] if i < len(node.input)]
                if not all(name in constants and constants[name].data_type == TensorProto.INT8
                           for name in operands if name):
                    return None
                found.append(node)
            elif node.op_type in _MOVES_VALUES:
                todo.extend(node.output[:1])
            else:
                return None
            if node.op_type == "Clip":
                todo.extend(node.output[:1])
    return found
