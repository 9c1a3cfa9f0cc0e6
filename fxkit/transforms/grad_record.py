"""Recording for `grad`: a `GradProxy` that knows its shape, and the `Recorder` building one graph.

`grad` needs shapes while it builds the backward (which dims to sum a
broadcast gradient over, the sizes derivative rules compute with), so every
value it records carries its `TensorMeta`: ``x.shape``, ``x.ndim``,
``x.numel()`` are Python values and control flow on them takes the branch
these inputs take, as in `infer_shapes`' tracer. The same `Recorder` records
the forward (`replay`: the module's graph with every layer traced through,
down to registry ops) and then the backward (derivative rules called on
proxies), so both halves land in one graph and saved activations are
ordinary edges.

Forward calls whose eager recording differs from the op itself get a graph
form here (`_FORWARDS`, keyed by op): the max pools also return the
indices its rule reads, and training-mode dropout becomes ``x * mask`` with
``mask = dropout(ones_like(x))``, the op's own draw (the same random stream
as eager), so its gradient is a plain ``mul``. In-place calls
(``relu(x, inplace=True)``) are recorded out of place; an in-place update of
a module buffer (BatchNorm's batch counter) is written back with ``setitem``.
"""
from fxkit.errors import AutogradError, format_error
from fxkit.graph import Graph, Interpreter
from fxkit.runtime.autograd.function import GradRule, NonDifferentiable
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import Op
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor
from fxkit.runtime.tracing_hook import ACTIVE
from fxkit.tracer import Proxy, Tracer
from fxkit.tracer.patching import patched
from fxkit.transforms.infer_shapes import apply_rule, trace_body
from fxkit.transforms.shape_prop import has_tensor, meta_of, record_meta

_full = get_op("full")
_getitem = get_op("getitem")
_mul = get_op("mul")
_ones_like = get_op("ones_like")
_setitem = get_op("setitem")


class GradProxy(Proxy):
    """A recorded value with its meta: a `TensorMeta`, or a tuple/list of them for ops
    with several results. Shape queries answer from the meta instead of recording."""

    __slots__ = ("meta",)

    def __init__(self, node, tracer, meta):
        super().__init__(node, tracer)
        self.meta = meta

    def __repr__(self):
        return f"GradProxy({self.node.name})"

    def _tensor(self):
        if not isinstance(self.meta, TensorMeta):
            raise AutogradError(f"grad: {self.node!r} holds {len(self.meta)} values, not one tensor; index it first")
        return self.meta

    @property
    def shape(self):
        return tuple(self._tensor().shape)

    @property
    def ndim(self):
        return len(self._tensor().shape)

    @property
    def dtype(self):
        return self._tensor().dtype

    @property
    def device(self):
        return self._tensor().device

    def __len__(self):
        meta = self.meta
        return len(meta) if not isinstance(meta, TensorMeta) else meta.shape[0]

    def __iter__(self):
        return iter([self[i] for i in range(len(self))])

    def __getattr__(self, name):
        if name == "meta":  # NOTE: an unset slot (copy and pickle probes) must not recurse
            raise AttributeError(name)
        fields = getattr(type(self.meta), "_fields", ())
        if not isinstance(self.meta, TensorMeta) and name in fields:  # ``x.max(1).values``
            return self[fields.index(name)]
        return super().__getattr__(name)

    def _rebind(self, op, args, kwargs, spelling):
        self._rebind_to(op(self, *args, **kwargs))
        return self

    def _rebind_to(self, out):
        """Point this proxy at ``out``, the value an in-place call (recorded out of place)
        made; a module buffer updated in place gets the value written back."""
        if self.node.op == "get_attr":
            _setitem(self, Ellipsis, out)
        else:
            self.node, self.meta = out.node, out.meta


class Recorder(Tracer):
    """Records forward and backward of ``gm`` into one graph, every node with its meta.

    Args:
        gm: the module whose parameters and buffers the graph reads (by qualified name).
        wanted: ids of the tensors (parameters) gradients are asked for.
        wanted_inputs: placeholder names gradients are asked for.

    Attributes:
        requires: the forward nodes whose values depend on a wanted tensor or input.
        extras: forward node -> what its rule's ``ctx.extra`` is (max_pool2d's indices).
        constants: qualified name -> tensor constants the rules made (new attributes).
        stack, origin: the source location and forward node new nodes are attributed to.
    """

    def __init__(self, gm, wanted, wanted_inputs):
        super().__init__()
        self.root = gm
        self.graph = Graph()
        self._index_module_tree()
        self._attr_tensors = {name: t for name, t in gm.named_parameters()}
        self._attr_tensors.update(gm.named_buffers())
        self.wanted, self.wanted_inputs = wanted, wanted_inputs
        self.requires = set()
        self.extras = {}
        self.constants = {}
        self._constant_nodes = {}
        self.stack = None
        self.origin = None
        self.forward = True

    def is_leaf_module(self, module, qualname):
        return False

    # -- nodes and their metas ---------------------------------------------------------
    def create_node(self, op, target, args, kwargs, name=None):
        node = self.graph.create_node(op, target, args, kwargs, name)
        if self.stack is not None:
            node.meta["stack"] = self.stack
        if not self.forward and self.origin is not None:
            node.meta["grad_of"] = self.origin.name
        return node

    def attribute(self, qualname):
        """The tensor a ``get_attr`` of the graph reads: a parameter or buffer of the
        module, or a constant a rule made."""
        tensor = self._attr_tensors.get(qualname)
        return tensor if tensor is not None else self.constants[qualname]

    def proxy(self, node):
        if node.op == "get_attr":
            tensor = self.attribute(node.target)
            meta = meta_of(tensor)
            if id(tensor) in self.wanted and meta.dtype.is_floating_point:
                self.requires.add(node)
        else:
            meta = node.meta["tensor_meta"]
        record_meta(node, meta)
        return GradProxy(node, self, meta)

    def placeholder(self, name, meta, default):
        """A graph input with ``meta``, its proxy; without a meta, its default value
        (``default``: the placeholder's args, empty when it has none)."""
        node = self.graph.placeholder(name, *default)
        if self.stack is not None:
            node.meta["stack"] = self.stack
        if meta is None:
            return default[0]
        record_meta(node, meta)
        if name in self.wanted_inputs:
            if not meta.dtype.is_floating_point:
                raise AutogradError(f"grad: input {name!r} is {meta.dtype.name}; only floating point inputs "
                                    f"have gradients; leave it out of wrt")
            self.requires.add(node)
        return GradProxy(node, self, meta)

    def create_proxy(self, op, target, args, kwargs, name=None):
        metas = _metas(args), _metas(kwargs)
        if isinstance(target, Op):
            meta = apply_rule(target, *metas)
        elif target is getattr:
            meta = getattr(*metas[0])
        elif callable(getattr(target, "shape_rule", None)):
            meta = target.shape_rule(*metas[0], **metas[1])
        else:
            meta = trace_body(target, *metas).output
        if not has_tensor(meta) and (not isinstance(target, Op) or target.pure):
            return meta  # a size query, arithmetic on sizes: Python values
        node = self.create_node(op, target, self.create_arg(args), self.create_arg(kwargs), name)
        record_meta(node, meta)
        if not has_tensor(meta):
            return meta
        if self.forward and _floating(meta) and _differentiable(target) and any(
                n in self.requires for n in node.all_input_nodes):
            self.requires.add(node)
        return GradProxy(node, self, meta)

    def create_arg(self, a):
        if isinstance(a, Tensor) and id(a) not in self._attr_proxies and id(a) not in self._tensor_paths:
            return self.constant(a).node
        return super().create_arg(a)

    def constant(self, tensor):
        """A tensor a rule made eagerly (``zeros(shape)``) as a graph value: a ``full``
        call when every element is equal, else a new constant attribute."""
        made = self._constant_nodes.get(id(tensor))
        if made is not None:
            return made[1]
        data = tensor._data
        flat = data.reshape(-1)
        if flat.size and bool((flat == flat[0]).all()):
            proxy = self.create_proxy("call", _full, (tuple(data.shape), flat[0].item()),
                                      {"dtype": tensor.dtype, "device": tensor.device})
        else:
            name = f"_grad_constant{len(self.constants)}"
            self.constants[name] = tensor
            proxy = self.proxy(self.create_node("get_attr", name, (), {}))
        self._constant_nodes[id(tensor)] = (tensor, proxy)
        return proxy

    # -- forward-only recording rules ------------------------------------------------------
    def record_op(self, op, args, kwargs):
        rule = op.grad_rule
        if self.forward and type(rule) is GradRule:
            needs = any(isinstance(v, GradProxy) and v.node in self.requires for v in _flat(args, kwargs))
            if rule.mutates and needs:
                raise AutogradError(format_error(
                    f"grad: {op.name} writes in place into a value gradients flow through",
                    hint="compute the new value out of place (fxkit.where, masked_fill, cat)"))
            inplace, plain_args, plain_kwargs = rule.split_inplace(args, kwargs)
            if inplace:
                out = self.record_op(op, plain_args, plain_kwargs)
                if isinstance(args[0], GradProxy):
                    args[0]._rebind_to(out)
                return out
            forward = _FORWARDS.get(op)
            if forward is not None and needs:
                return forward(self, op, args, kwargs)
        return self.create_proxy("call", op, args, kwargs)


def _metas(value):
    """``value`` with each proxy replaced by its meta and each tensor by its `TensorMeta`."""
    kind = type(value)
    if kind is GradProxy:
        return value.meta
    if isinstance(value, Tensor):
        return meta_of(value)
    if kind in (tuple, list):
        return kind(_metas(v) for v in value)
    if kind is dict:
        return {k: _metas(v) for k, v in value.items()}
    if kind is slice:
        return slice(_metas(value.start), _metas(value.stop), _metas(value.step))
    return value


def _flat(args, kwargs):
    for v in list(args) + list(kwargs.values()):
        if type(v) in (list, tuple):
            yield from v
        else:
            yield v


def _floating(meta):
    if isinstance(meta, TensorMeta):
        return meta.dtype.is_floating_point
    return isinstance(meta, (tuple, list)) and any(_floating(m) for m in meta)


def _differentiable(target):
    return not (isinstance(target, Op) and type(target.grad_rule) is NonDifferentiable)


# -- graph forms of the ops whose eager recording runs a forward of its own ------------------
def _with_indices_forward(position):
    """The graph form of a max pool whose ``return_indices`` is parameter ``position``: recorded
    with its indices, which its rule reads (``ctx.extra``)."""
    def forward(rec, op, args, kwargs):
        kwargs = dict(kwargs)
        wanted = kwargs.pop("return_indices", args[position] if len(args) > position else False)
        out = rec.create_proxy("call", op, tuple(args[:position]), {**kwargs, "return_indices": True})
        rec.extras[out.node] = out[1]
        return out if wanted else out[0]
    return forward


def _dropout_forward(rec, op, args, kwargs):
    """Training-mode dropout as ``x * dropout(ones_like(x))``: the op draws its mask as it
    would for ``x`` (same random stream), the product's rule carries the gradient."""
    call = dict(zip(("input", "p", "training", "inplace"), args), **kwargs)
    x, p, training = call["input"], call.get("p", 0.5), call.get("training", True)
    if not training or p == 0:
        return rec.create_proxy("call", op, args, kwargs)
    ones = rec.create_proxy("call", _ones_like, (x,), {})
    mask = rec.create_proxy("call", op, (ones, p, True), {})
    return rec.create_proxy("call", _mul, (x, mask), {})


_FORWARDS = {get_op("max_pool2d"): _with_indices_forward(6), get_op("max_pool1d"): _with_indices_forward(6),
             get_op("adaptive_max_pool2d"): _with_indices_forward(2), get_op("dropout"): _dropout_forward,
             get_op("dropout2d"): _dropout_forward}


# -- the forward: the module's graph replayed on proxies, layers traced through --------------
class _Replay(Interpreter):
    """Runs a graph on `GradProxy` values inside the recorder's trace: ``gm``'s own graph
    (``specs``: its inputs' metas) or a fused op's body (``specs`` None: its inputs are
    the values it is called with)."""

    def __init__(self, gm, recorder, specs, graph=None):
        super().__init__(gm, garbage_collect_values=False, graph=graph)
        self.recorder = recorder
        self.specs = None if specs is None else iter(specs)

    def run_node(self, n):
        rec = self.recorder
        rec.stack = n.meta.get("stack", rec.stack)
        rec.origin = n
        return super().run_node(n)

    def placeholder(self, target, args, kwargs):
        if self.specs is None:
            return super().placeholder(target, args, kwargs)
        spec = next(self.specs, None)
        if spec is None and not args:
            raise AutogradError(f"grad: no shape for the input {target!r}; pass one example input per input")
        return self.recorder.placeholder(target, spec, args)

    def call(self, target, args, kwargs):
        if target is _getitem and type(args[0]) in (tuple, list) and type(args[1]) in (int, slice):
            return args[0][args[1]]  # a result of a fused op, replayed as Python values
        if not isinstance(target, Op) and type(target) is not str and isinstance(getattr(target, "graph", None),
                                                                                 Graph):
            return _Replay(self.module, self.recorder, None, graph=target.graph).run(*args)  # a FusedOp's body
        return super().call(target, args, kwargs)


def replay(recorder, gm, specs):
    """Record ``gm``'s forward on inputs of ``specs`` (one `TensorMeta` per input); its output."""
    with patched(recorder):
        ACTIVE.append(recorder)
        try:
            return _Replay(gm, recorder, specs).run()
        finally:
            ACTIVE.pop()


def location_error(message, node, hint=None):
    """An `AutogradError` in fxkit's layout naming ``node`` and its source line."""
    stack = node.meta.get("stack")
    return AutogradError(format_error(message, where=str(stack) if stack else None, node=node.format_node(),
                                      hint=hint))
