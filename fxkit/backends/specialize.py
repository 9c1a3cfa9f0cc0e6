"""`Specialize`: trace through every layer on given input metadata, down to registry ops.

Backends lower registry ops, not layers, and compile one specialisation at a
time, so the graph they receive is re-traced from the module with the
inputs' shapes, dtypes and devices known: every layer's ``forward`` is
followed down to ops, each node gets ``meta["tensor_meta"]``, and what the
code computes from shapes (``x.shape[0] * 2``, ``if x.ndim == 3``,
``b, l, e = x.shape``) is evaluated during the trace and enters the graph as
constants. Nothing is allocated or computed.

Example::

    before:                                  after (x: f32[32, 128]):
        %x  = placeholder[x]                     %x         = placeholder[x]
        %fc = call[self.fc](%x)                  %fc_weight = get_attr[fc.weight]
        return %fc                               %fc_bias   = get_attr[fc.bias]
                                                 %linear    = call[linear](%x, %fc_weight, %fc_bias)
                                                 return %linear
"""
import inspect

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
            graph = _MetaTracer(tensors).trace(gm, concrete)
        except TraceError as exc:
            training = [name or type(gm).__name__ for name, m in gm.named_modules() if m.training]
            hint = (f"layers in training mode ({', '.join(training[:3])}{', ...' if len(training) > 3 else ''}) "
                    f"may update their own state; compile the inference model: model.eval()" if training else
                    "make the forward traceable (see the error above); fxkit.compile lowers registry ops")
            raise LoweringError(format_error(f"fxkit.compile: cannot trace {type(gm).__name__} through its "
                                             f"layers:\n{exc}", hint=hint)) from exc
        return GraphModule(gm, graph, class_name=type(gm).__name__)
