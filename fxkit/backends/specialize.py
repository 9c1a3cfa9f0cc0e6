"""`Specialize`: trace through every layer on given input metadata, down to registry ops.

Backends lower registry ops, not layers, and compile one specialisation at a
time, so the graph they receive is re-traced from the module with the
inputs' shapes, dtypes and devices known: every layer's ``forward`` is
followed down to ops, each node gets ``meta["tensor_meta"]``, and what the
code computes from shapes (``x.shape[0] * 2``, ``if x.ndim == 3``,
``b, l, e = x.shape``) is evaluated during the trace and enters the graph as
constants. Nothing is allocated or computed. Each new node keeps the user's
source line of the node it came from (``meta["stack"]``), so errors raised by
compiled code point at the model's code, not at a layer's internals.

Example::

    before:                                  after (x: f32[32, 128]):
        %x  = placeholder[x]                     %x         = placeholder[x]
        %fc = call[self.fc](%x)                  %fc_weight = get_attr[fc.weight]
        return %fc                               %fc_bias   = get_attr[fc.bias]
                                                 %linear    = call[linear](%x, %fc_weight, %fc_bias)
                                                 return %linear
"""
import ast
import inspect
import sys

from fxkit.errors import LoweringError, TraceError, format_error
from fxkit.graph import GraphModule
from fxkit.transforms import Pass
# NOTE: infer_shapes' tracer is the one that evaluates shape queries on metas as it
# traces; its public `trace_body` caches bodies by module structure, and a cached
# body's tensor constants live on the module first traced, so it is used directly.
from fxkit.transforms.infer_shapes import _MetaTracer
from fxkit.transforms.shape_prop import has_tensor


class Specialize(Pass):
    """Flatten ``gm`` to registry ops, specialised to ``specs`` (see the module docstring).

    Args:
        specs: one `TensorMeta` per positional input of ``gm.forward``; inputs
            with defaults left out keep their default as a constant.

    Raises:
        LoweringError: the forward cannot be traced through its layers (a layer
            updating its own state, like BatchNorm2d in training mode).
    """

    name = "specialize"

    def __init__(self, specs):
        self.specs = tuple(specs)

    def __call__(self, gm):
        params = list(inspect.signature(type(gm).forward).parameters.values())[1:]
        bound = inspect.Signature(params).bind(*self.specs)
        bound.apply_defaults()
        tensors = {k: v for k, v in bound.arguments.items() if has_tensor(v)}
        concrete = {k: v for k, v in bound.arguments.items() if k not in tensors}
        try:
            tracer = _FlatteningTracer(tensors, gm)
            graph = tracer.trace(gm, concrete)
        except TraceError as exc:
            training = [name or type(gm).__name__ for name, m in gm.named_modules() if m.training]
            hint = (f"layers in training mode ({', '.join(training[:3])}{', ...' if len(training) > 3 else ''}) "
                    f"may update their own state; compile the inference model: model.eval()" if training else
                    "make the forward traceable (see the error above); fxkit.compile lowers registry ops")
            raise LoweringError(format_error(f"fxkit.compile: cannot trace {type(gm).__name__} through its "
                                             f"layers:\n{exc}", hint=hint)) from exc
        for origin, node in tracer.last_made.items():
            # NOTE: the quantization scales of a value of a quantized graph stay with the node
            # now computing it (a delegate's QDQ export reads them).
            if "qparams" in origin.meta:
                node.meta["qparams"] = origin.meta["qparams"]
        return GraphModule(gm, graph, class_name=type(gm).__name__)


class _FlatteningTracer(_MetaTracer):
    """Records, as each node's ``meta["stack"]``, the stack of the ``gm`` node whose line is running."""

    def __init__(self, inputs, gm):
        super().__init__(inputs)
        self._forward = type(gm).forward.__code__
        code = gm.graph.python_code(root="self")
        self._origins = {}
        self.last_made = {}  # gm node -> the last call node its statement made (its result)
        statements = ast.parse(code.src).body[0].body
        for statement, node in zip(statements, code.statement_nodes):
            if node is not None:
                for line in range(statement.lineno, statement.end_lineno + 1):
                    self._origins[line] = node

    def create_node(self, op, target, args, kwargs, name=None):
        node = super().create_node(op, target, args, kwargs, name)
        frame = sys._getframe(1)
        while frame is not None and frame.f_code is not self._forward:
            frame = frame.f_back
        origin = self._origins.get(frame.f_lineno) if frame is not None else None
        if origin is not None and origin.meta.get("stack") is not None:
            node.meta["stack"] = origin.meta["stack"]
        if origin is not None and op == "call":
            self.last_made[origin] = node
        return node
