"""What an ONNX import rule sees of one node: its inputs, attributes and the helpers that call ops."""
import numpy as np

from fxkit.codegen.namespace import sanitize
from fxkit.errors import GraphError
from fxkit.graph import map_aggregate
from fxkit.interop.onnx_import_values import Const, Dims
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor
from fxkit.transforms.infer_shapes import apply_rule
from fxkit.transforms.shape_prop import meta_of


class NodeCall:
    """What an import rule sees of one ONNX node: its inputs, attributes and helpers."""

    def __init__(self, importer, proto, eager=False):
        self.importer = importer
        self.eager = eager
        self.proto = proto
        self.op_type = proto.op_type
        self.opset = importer.opset
        helper = importer.onnx.helper
        self.attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
        self.n_inputs = len(proto.input)

    def attr(self, name, default=None):
        """An attribute's value (bytes become str)."""
        value = self.attrs.get(name, default)
        return value.decode() if isinstance(value, bytes) else value

    def value(self, i):
        """Input ``i`` as imported (a node, `Const` or `Dims`), or None when left out."""
        if i >= self.n_inputs or not self.proto.input[i]:
            return None
        return self.importer.values[self.proto.input[i]]

    def tensor(self, i):
        """Input ``i`` as a graph node (None when left out)."""
        value = self.value(i)
        if value is None:
            return None
        if self.eager:
            return Tensor(np.asarray(value.array if isinstance(value, Const) else value.array()))
        return self.importer.tensor(value)

    def const(self, i):
        """Input ``i`` as a numpy array; it must be a constant."""
        value = self.value(i)
        if isinstance(value, Const):
            return value.array
        if isinstance(value, Dims) and value.known:
            return value.array()
        raise GraphError(f"input {i} ({self.proto.input[i]!r}) must be a constant (an initializer or a "
                         f"Constant node) for fxkit to import this node")

    def ints(self, i):
        """Input ``i`` as a list of ints or nodes computing ints (a shape)."""
        value = self.value(i)
        if isinstance(value, Dims):
            return list(value)
        return [int(v) for v in np.asarray(self.const(i)).reshape(-1)]

    def scalar(self, i):
        """Input ``i`` as a Python number (a constant with one element), None when left out."""
        value = self.value(i)
        if value is None:
            return None
        if isinstance(value, Dims):
            return value[0]
        return np.asarray(self.const(i)).reshape(-1)[0].item()

    def dtype(self, i):
        return self.importer.dtype(self.proto.input[i])

    def shape(self, i):
        return self.importer.shape(self.proto.input[i])

    def rank(self, i):
        """The rank of input ``i``; it must be known (from the model's shape information)."""
        shape = self.shape(i)
        if shape is None:
            raise GraphError(f"the rank of input {i} ({self.proto.input[i]!r}) is unknown; add shape "
                             f"information to the model (onnx.shape_inference.infer_shapes)")
        return len(shape)

    def call(self, op_name, *args, **kwargs):
        """Record ``op_name(*args, **kwargs)``, named after the ONNX node."""
        if self.eager:
            op = get_op(op_name)
            self._reserve_result(op, args, kwargs)
            return op(*args, **kwargs)
        hint = self.proto.output[0] or self.proto.name or self.op_type.lower()
        return self.importer.record(self.importer.graph.call(get_op(op_name), args, kwargs, name=sanitize(hint)))

    def _reserve_result(self, op, args, kwargs):
        """Charge what folding ``op`` over constants will allocate, from its shape rule, before running it
        (a 10-byte Expand or Tile of a constant may ask for gigabytes)."""
        def as_meta(v):
            return meta_of(v) if isinstance(v, Tensor) else v

        try:
            meta = apply_rule(op, map_aggregate(args, as_meta), map_aggregate(kwargs, as_meta))
        except Exception:  # noqa: BLE001  (no rule, or one that fails: the call itself reports it)
            return
        if isinstance(meta, TensorMeta) and all(type(d) is int for d in meta.shape):
            self.reserve(meta.shape, meta.dtype.np)

    def reserve(self, shape, dtype):
        """Charge a constant of ``shape`` and numpy ``dtype`` to the import's budget before building it."""
        nbytes = int(np.prod([max(int(d), 0) for d in shape], dtype=object)) * np.dtype(dtype).itemsize
        where = f"fxkit.from_onnx: node {self.proto.name or self.proto.output[0]!r} (op type {self.op_type}), " \
                f"a constant of shape {tuple(int(d) for d in shape)},"
        self.importer.fold_budget.charge(nbytes, where)

    def const_value(self, array):
        """A new constant (folded at import time)."""
        return Const(np.asarray(array), self.proto.output[0] or self.op_type)
