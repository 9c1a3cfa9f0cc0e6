"""`infer_shapes`: shapes, dtypes and devices from the registry's rules, without running.

Each node's output is computed as metadata: an `Op` call applies the op's
``shape_rule`` to the `TensorMeta` of its inputs, ``get_attr`` reads the
attribute's meta, and a leaf module (``call[self.conv1]``) or a wrapped
function gets the rule of its body: its ``forward`` is traced down to
registry ops by a tracer that knows its inputs' metas (so the layer's
``if x.ndim == 3`` and ``b, l, e = x.shape`` see concrete values), and each
recorded op's rule runs as it is recorded. Traced bodies are cached per
class, configuration and input metas, so the 16 identical blocks of a ResNet
are traced once. No tensor data is allocated or computed.

Dimensions may be symbolic: a name in a spec (``("N", 3, 224, 224)``)
becomes a `Sym` that flows through the rules' arithmetic and prints as
``N``, ``2*N`` or ``(N + 1)//2``. The results follow `ShapeProp`'s meta
convention (``meta["shape"]``, ``["dtype"]``, ``["device"]``, ``["tensor_meta"]``).

A leaf layer's forward may update its buffers (BatchNorm in training mode
counts batches): the update is recorded in the body, never performed.

Before and after ``infer_shapes(gm, ("N", 784))`` on an MLP::

    graph(x):                               graph(x):
        %x   = placeholder[x]                   %x   : f32[N, 784] = placeholder[x]
        %fc1 = call[self.fc1](%x)               %fc1 : f32[N, 128] = call[self.fc1](%x)
        return %fc1                             return %fc1

Example:
    >>> gm = infer_shapes(fxkit.symbolic_trace(resnet50()), ("N", 3, 224, 224))
    >>> gm.graph.output_node().meta["tensor_meta"]
    TensorMeta(float32[N, 1000], cpu)
"""
import inspect
import operator
from collections import OrderedDict
from typing import NamedTuple

from fxkit.errors import FxkitError, ShapeError
from fxkit.graph import Interpreter, map_arg
from fxkit.runtime.device import Device, cpu
from fxkit.runtime.dtypes import DType, float32
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.nn.module import Module
from fxkit.runtime.op import Op
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor
from fxkit.runtime.tensor_methods import OPERATORS, UNARY_OPERATORS
from fxkit.tracer import Proxy, Tracer
from fxkit.tracer.wrap import IMPURE_FLAG
from fxkit.transforms.shape_prop import has_tensor, meta_of, record_meta
from fxkit.transforms.symbolic import Sym, dim_of

# Ops applied to Python values only (``x.shape[0] * 2``) compute with Python's operators,
# which `Sym` dims support; the registry's rules describe tensors.
_PYTHON_FORMS = {get_op(name): getattr(operator, dunder)
                 for dunder, (name, reflected) in OPERATORS.items() if not reflected}
_PYTHON_FORMS.update({get_op(name): getattr(operator, dunder) for dunder, name in UNARY_OPERATORS.items()})
_PYTHON_FORMS.update({get_op("maximum"): max, get_op("minimum"): min})  # torch.sym_max of two sizes
_PLAIN = (int, float, bool, str, type(None), tuple, DType, Device)
_CACHE_SIZE = 1024


def spec_meta(spec):
    """A `TensorMeta` from an input spec: a Tensor, a TensorMeta, a shape tuple
    (float32 on cpu; names are symbolic dims) or a ``(shape, dtype)`` pair."""
    if isinstance(spec, Tensor):
        return meta_of(spec)
    if isinstance(spec, TensorMeta):
        return spec
    if isinstance(spec, (tuple, list)):
        if len(spec) == 2 and isinstance(spec[1], DType) and isinstance(spec[0], (tuple, list)):
            return TensorMeta(tuple(dim_of(d) for d in spec[0]), spec[1], cpu)
        return TensorMeta(tuple(dim_of(d) for d in spec), float32, cpu)
    raise ShapeError(f"infer_shapes: an input spec is a Tensor, a shape tuple like ('N', 3, 224, 224) or a "
                     f"(shape, dtype) pair like ((8, 16), fxkit.float16), got {type(spec).__name__} {spec!r}")


def infer_shapes(gm, *input_specs):
    """Fill ``node.meta`` with shapes, dtypes and devices computed from the registry's rules.

    Args:
        gm: the `GraphModule` to annotate (in place).
        *input_specs: one per placeholder: an example Tensor, a shape tuple
            (float32; names like ``"N"`` are symbolic dims) or ``(shape, dtype)``.

    Returns:
        ``gm``; the graph's output meta is ``gm.graph.output_node().meta["tensor_meta"]``.

    Raises:
        ShapeError: a rule rejected the shapes (naming the node and source line),
            or a rule needed a concrete value of a symbolic dim.
    """
    ShapeInference(gm).run(*(spec_meta(s) for s in input_specs))
    return gm


class Body(NamedTuple):
    """A leaf module's or function's traced body: its graph (nodes carry metas) and output meta."""

    graph: object
    output: object


class ShapeInference(Interpreter):
    """An `Interpreter` over metas: each opcode returns the meta of the node's output.

    Subclasses (the cost model) read ``self.bodies[node]`` for leaf and function calls.

    Attributes:
        bodies: node -> `Body` for every call of a leaf module or wrapped function.
    """

    def __init__(self, gm):
        super().__init__(gm)
        self.bodies = {}

    def run_node(self, n):
        self._node = n
        result = super().run_node(n)
        record_meta(n, result)
        return result

    def placeholder(self, target, args, kwargs):
        return meta_of(super().placeholder(target, args, kwargs))

    def get_attr(self, target, args, kwargs):
        return meta_of(self.fetch_attr(target))

    def call(self, target, args, kwargs):
        if isinstance(target, Op):
            return apply_rule(target, args, kwargs)
        if target is getattr:
            return getattr(*args)
        rule = getattr(target, "shape_rule", None)
        if rule is not None:  # a FusedOp: its body's ops' rules, recorded on the body's nodes
            meta = rule(*args, **kwargs)
            self.bodies[self._node] = Body(target.graph, meta)
            return meta
        body = trace_body(self.fetch_attr(target) if type(target) is str else target, args, kwargs)
        self.bodies[self._node] = body
        return body.output


def has_rule(target):
    """Whether a call target computes its result meta itself: an `Op`, or any target with a
    ``shape_rule`` method (a `FusedOp` of `fuse_elementwise`)."""
    return isinstance(target, Op) or callable(getattr(target, "shape_rule", None))


def apply_rule(op, args, kwargs):
    """The meta of ``op(*args, **kwargs)`` over metas and Python values."""
    if not has_tensor(args) and not has_tensor(kwargs) and not getattr(op, "factory", False):
        python_form = _PYTHON_FORMS.get(op)
        if python_form is not None:
            return python_form(*args, **kwargs)
    return op.shape_rule(*args, **kwargs)


# -- traced bodies of leaf modules and functions ------------------------------------------
_BODIES = OrderedDict()


def trace_body(fn, args, kwargs):
    """The `Body` of a leaf module or function called on metas ``args``/``kwargs`` (cached)."""
    if hasattr(fn, IMPURE_FLAG) and hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__  # @fxkit.wrap's recorder: trace the function it records
    params = inspect.signature(type(fn).forward if isinstance(fn, Module) else fn).parameters
    bound = inspect.Signature(list(params.values())[1 if isinstance(fn, Module) else 0:]).bind(*args, **kwargs)
    bound.apply_defaults()
    key = (_callable_key(fn), tuple((name, _meta_key(v)) for name, v in bound.arguments.items()))
    body = _BODIES.get(key)
    if body is None:
        tensors = {k: v for k, v in bound.arguments.items() if has_tensor(v)}
        concrete = {k: v for k, v in bound.arguments.items() if k not in tensors}
        tracer = _MetaTracer(tensors)
        graph = tracer.trace(fn, concrete)
        body = _BODIES[key] = Body(graph, tracer.output_meta)
        if len(_BODIES) > _CACHE_SIZE:
            _BODIES.popitem(last=False)
    return body


class _MetaTracer(Tracer):
    """Traces through every module, computing each recorded node's meta as it goes.

    Values that are no tensors (``x.shape``, ``x.ndim``, ``x.dtype`` and
    arithmetic on them) are returned as Python values, so the traced code's
    control flow on shapes takes the branch these inputs take.
    """

    guard_concrete_args = False  # a body is analysed, never run: no guard node among its nodes

    def __init__(self, inputs):
        super().__init__()
        self.inputs = inputs
        self.output_meta = None
        self._tensors = {}

    def is_leaf_module(self, module, qualname):
        return False

    def proxy(self, node):
        if node.op == "placeholder":
            record_meta(node, self.inputs[node.target])
        elif node.op == "get_attr":
            # NOTE: read through the name table: Module.__getattr__ is patched during the trace.
            value = self._tensors.get(node.target)
            record_meta(node, meta_of(value if value is not None else vars(self.root)[node.target]))
        return _MetaProxy(node, self)

    def create_proxy(self, op, target, args, kwargs, name=None):
        proxy = super().create_proxy(op, target, args, kwargs, name)
        node = proxy.node
        metas = _node_metas(node.args), _node_metas(node.kwargs)
        try:
            if has_rule(target):
                meta = apply_rule(target, *metas)
            elif target is getattr:
                meta = getattr(*metas[0])
            else:
                meta = trace_body(target, *metas).output
        except FxkitError as exc:
            raise _in_body(exc, self.root, node) from exc
        record_meta(node, meta)
        return proxy if has_tensor(meta) else meta

    def trace(self, root, concrete_args=None):
        if isinstance(root, Module):
            self._tensors = dict(root.named_parameters())
            self._tensors.update(root.named_buffers())
        graph = super().trace(root, concrete_args)
        self.output_meta = _node_metas(graph.output_node().args[0])
        return graph


class _MetaProxy(Proxy):
    """A proxy that also records in-place updates of module buffers (BatchNorm's batch
    counter in training mode), which `Proxy` refuses: a body only describes shapes and
    costs and is never run, so recording the update changes nothing."""

    __slots__ = ()

    def _rebind(self, op, args, kwargs, spelling):
        self.node = op(self, *args, **kwargs).node
        return self


def _in_body(exc, root, node):
    """``exc`` with the body node that raised it, as the same error class where it allows."""
    owner = type(root).__name__ if isinstance(root, Module) and type(root) is not Module else "a wrapped function"
    message = f"{exc}\n  in the traced body of {owner}: {node.format_node()}"
    try:
        return type(exc)(message)
    except TypeError:
        return ShapeError(message)


def _node_metas(value):
    """``value`` (node args) with each node replaced by its recorded meta."""
    return map_arg(value, lambda n: n.meta["tensor_meta"])


def _callable_key(fn):
    if not isinstance(fn, Module):
        return fn
    parts = []
    for name, sub in fn.named_modules():
        plain = tuple(sorted((k, repr(v)) for k, v in vars(sub).items() if isinstance(v, _PLAIN)))
        parts.append((name, type(sub), plain))
    tensors = [(n, _meta_key(meta_of(t))) for n, t in fn.named_parameters()]
    tensors += [(n, _meta_key(meta_of(t))) for n, t in fn.named_buffers()]
    return tuple(parts), tuple(tensors)


def _meta_key(value):
    """A hashable key of a meta structure; symbolic dims by their text."""
    if isinstance(value, TensorMeta):
        return ("T", tuple(str(d) if isinstance(d, Sym) else d for d in value.shape), value.dtype.name,
                str(value.device))
    if isinstance(value, Sym):
        return ("S", str(value))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__,) + tuple(_meta_key(v) for v in value)
    if isinstance(value, dict):
        return ("dict",) + tuple((k, _meta_key(v)) for k, v in value.items())
    return ("V", repr(value))
