"""`grad`: the derivative of a graph, built as one graph of forward and backward nodes.

The forward is recorded with every layer traced through to registry ops (see
`fxkit.transforms.grad_record`); then, from the outputs back, each op's
derivative rule (``op.grad_rule``, the one eager autograd runs) is called on
graph values, so the ops it calls are recorded as backward nodes. Values the
backward reads from the forward (saved activations) are plain edges from
forward nodes; nothing is hidden in closures. The result prints, fuses and
compiles like any graph, and computes what ``loss.backward()`` computes.
Each backward node's ``meta["grad_of"]`` names the forward node whose rule
made it, and its ``meta["stack"]`` is that node's source line.

The graph is specialised to the input shapes it was built for. Writing in
place into a value gradients flow through (``y[0] = 0``) is refused, as it
would change a value the backward reads; in-place ops such as
``relu(x, inplace=True)`` are recorded out of place.

Before and after ``grad(gm, example_inputs=[(4, 3)])`` on ``relu(x @ w)``::

    graph(x):                                 graph(x):
        %x      = placeholder[x]                  %x         : f32[4, 3] = placeholder[x]
        %w      = get_attr[w]                     %w         : f32[3, 2] = get_attr[w]
        %matmul = call[matmul](%x, %w)            %matmul    : f32[4, 2] = call[matmul](%x, %w)
        %relu   = call[relu](%matmul)             %relu      : f32[4, 2] = call[relu](%matmul)
        return %relu                              %ones_like : f32[4, 2] = call[ones_like](%relu)
                                                  %gt        : b8[4, 2]  = call[gt](%relu, 0)
                                                  %where     : f32[4, 2] = call[where](%gt, %ones_like, 0.0)
                                                  %transpose : f32[3, 4] = call[transpose](%x, -1, -2)
                                                  %matmul_1  : f32[3, 2] = call[matmul](%transpose, %where)
                                                  return (%relu, {'w': %matmul_1})
"""
from fxkit.errors import GraphError
from fxkit.graph import GraphModule, Node, map_arg
from fxkit.runtime.autograd.engine import shaped_like
from fxkit.runtime.autograd.function import GradRule, run_rule
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.nn.module import Module
from fxkit.runtime.op import Op
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor
from fxkit.runtime.tracing_hook import ACTIVE
from fxkit.tracer import symbolic_trace
from fxkit.transforms.grad_record import GradProxy, Recorder, location_error, replay
from fxkit.transforms.infer_shapes import spec_meta

_full = get_op("full")
_getitem = get_op("getitem")
_ones_like = get_op("ones_like")


def grad(gm, wrt=None, grad_outputs=False, example_inputs=None):
    """A `GraphModule` computing ``gm``'s outputs and the gradients of their sum, in one graph.

    Calling the result returns ``(outputs, grads)``: ``outputs`` as ``gm`` returns
    them, ``grads`` a dict from parameter qualified names (and input names, when
    ``wrt`` names them) to gradients of the sum of every floating point output
    (of ``sum(output * grad_output)`` with ``grad_outputs=True``). A parameter
    the outputs do not depend on has no entry (eager autograd leaves its
    ``.grad`` None). The graph is specialised to the input shapes.

    Args:
        gm: a `GraphModule` (or an `fxkit.nn.Module`, traced first). Its layers
            are traced through, so every node of the result is a registry op.
        wrt: names to differentiate with respect to: parameter qualified names
            and/or input names. Default: every parameter with ``requires_grad``.
        grad_outputs: add one input per floating point output (after the
            model's inputs, named ``grad_output``, or ``grad_output_0``, ... for
            several) holding that output's gradient, instead of ones.
        example_inputs: one per input: a Tensor, a shape tuple (float32) or a
            ``(shape, dtype)`` pair. Default: the inputs' shapes already in
            ``node.meta`` (`infer_shapes` or `ShapeProp`).

    Returns:
        The new `GraphModule`; it reads ``gm``'s parameter tensors (the same
        objects), so an optimizer stepping them is seen by the next call.

    Raises:
        AutogradError: an op on the path to the outputs has no derivative rule,
            or writes in place into a value gradients flow through (the error
            names the node and its source line).

    Example:
        >>> gm = fxkit.transforms.grad(model, example_inputs=[(64, 1, 8, 8)])
        >>> out, grads = gm(x)
        >>> grads["conv1.weight"].shape
        (32, 1, 3, 3)
    """
    if not isinstance(gm, GraphModule):
        if not isinstance(gm, Module):
            raise GraphError(f"grad: expected a GraphModule or an fxkit.nn.Module, got {type(gm).__name__}")
        gm = symbolic_trace(gm)
    specs = _input_specs(gm, example_inputs)
    names, wanted, wanted_inputs = _wanted(gm, wrt)
    rec = Recorder(gm, wanted, wanted_inputs)
    outputs = replay(rec, gm, specs)
    rec.forward = False
    ACTIVE.append(rec)
    try:
        leaves = _Backward(rec, grad_outputs).run(outputs)
    finally:
        ACTIVE.pop()
    by_name = {_leaf_name(node, rec): g for node, g in leaves.items()}
    grads = {name: by_name[name] for name in names if name in by_name}
    graph = rec.graph
    rec.stack = rec.origin = None
    graph.output(rec.create_arg((outputs, grads)))
    graph.eliminate_dead_code()
    root = {}
    for node in graph.find_nodes(op="get_attr"):
        root[node.target] = rec.attribute(node.target)
    return GraphModule(root, graph, class_name=f"{type(gm).__name__}Grad")


def _input_specs(gm, example_inputs):
    """One `TensorMeta` per input with concrete (integer) dims."""
    placeholders = gm.graph.find_nodes(op="placeholder")
    if example_inputs is not None:
        specs = [spec_meta(s) for s in example_inputs]
    else:
        specs = []
        for node in placeholders:
            meta = node.meta.get("tensor_meta")
            if not isinstance(meta, TensorMeta):
                if node.args:
                    break
                raise GraphError(f"grad: the input {node.name!r} has no shape in node.meta; pass "
                                 f"example_inputs=[...] (one per input), or run infer_shapes(gm, ...) first")
            specs.append(meta)
    for node, spec in zip(placeholders, specs):
        if not all(isinstance(d, int) for d in spec.shape):
            shown = ", ".join(str(d) for d in spec.shape)
            raise GraphError(f"grad: the input {node.name!r} has shape ({shown}); the "
                             f"gradient graph is specialised to concrete shapes: give integer sizes")
    if len(specs) > len(placeholders):
        raise GraphError(f"grad: {len(specs)} example inputs for {len(placeholders)} inputs "
                         f"({', '.join(n.name for n in placeholders)})")
    return specs


def _wanted(gm, wrt):
    """``(names in order, {id(parameter): name}, {input names})`` for ``wrt``."""
    params = dict(gm.named_parameters())
    inputs = [n.name for n in gm.graph.find_nodes(op="placeholder")]
    if wrt is None:
        names = [name for name, p in params.items() if p.requires_grad]
    else:
        names = [wrt] if isinstance(wrt, str) else list(wrt)
        unknown = [n for n in names if n not in params and n not in inputs]
        if unknown:
            raise GraphError(f"grad: wrt names {unknown}, which are neither parameters nor inputs of "
                             f"{type(gm).__name__}; inputs: {inputs}; parameters: {list(params)[:8]}"
                             f"{' ...' if len(params) > 8 else ''}")
    wanted = {id(params[n]): n for n in names if n in params}
    return names, wanted, {n for n in names if n not in params}


def _leaf_name(node, rec):
    if node.op == "placeholder":
        return node.target
    return rec.wanted.get(id(rec.attribute(node.target)))


class _Backward:
    """The reverse sweep: gradient buffers per forward node, each rule run on graph values."""

    def __init__(self, rec, grad_outputs):
        self.rec = rec
        self.grad_outputs = grad_outputs
        self.buffers = {}

    def run(self, outputs):
        """Seed the outputs, run every rule back; ``{leaf node: gradient}``."""
        rec = self.rec
        forward = list(rec.graph.nodes)
        self._seed(outputs, forward)
        leaves = {}
        for node in reversed(forward):
            g = self.buffers.pop(node, None)
            if g is None:
                continue
            if node.op in ("placeholder", "get_attr"):
                leaves[node] = g
                continue
            rec.stack, rec.origin = node.meta.get("stack"), node
            source = node.args[0] if node.is_op(_getitem) else None
            if isinstance(source, Node) and not isinstance(source.meta.get("tensor_meta"), TensorMeta):
                self._route(source, node.args[1], g)
            else:
                self._run_rule(node, g)
        return leaves

    def _seed(self, outputs, forward):
        found = []
        map_arg(self.rec.create_arg(outputs), lambda n: found.append(n) if _floating_tensor(n) else None)
        if self.grad_outputs:
            last = [n for n in forward if n.op == "placeholder"]
            names = ["grad_output"] if len(found) == 1 else [f"grad_output_{i}" for i in range(len(found))]
            with self.rec.graph.inserting_after(last[-1] if last else None):
                seeds = [self.rec.placeholder(name, n.meta["tensor_meta"], ()) for name, n in zip(names, found)]
        else:
            seeds = [None] * len(found)
        for node, seed in zip(found, seeds):
            if node in self.rec.requires:
                self.rec.stack, self.rec.origin = node.meta.get("stack"), node
                self._add(node, None, seed if seed is not None else _ones_like(self._value(node)))

    # -- gradients -----------------------------------------------------------------------
    def _value(self, node):
        return GradProxy(node, self.rec, node.meta["tensor_meta"])

    def _add(self, node, slot, g):
        buffers = self.buffers
        if slot is None:
            previous = buffers.get(node)
            buffers[node] = g if previous is None else previous + g
            return
        slots = buffers.get(node)
        if slots is None:
            slots = buffers[node] = [None] * len(node.meta["tensor_meta"])
        slots[slot] = g if slots[slot] is None else slots[slot] + g

    def _route(self, source, index, g):
        """``getitem`` of a node with several results (``chunk``, ``max(dim)``): its
        gradient goes to that result of the source, as tuple indexing in eager code."""
        count = len(source.meta["tensor_meta"])
        if isinstance(index, int):
            self._add(source, index % count, g)
            return
        for slot, part in zip(range(count)[index], g):
            if part is not None:
                self._add(source, slot, part)

    def _run_rule(self, node, g):
        target = node.target
        rule = target.grad_rule if isinstance(target, Op) else None
        if not isinstance(rule, GradRule):
            what = target.name if isinstance(target, Op) else getattr(target, "__name__", repr(target))
            raise location_error(f"grad: the derivative of {what} is not implemented (it has no grad rule), and "
                                 f"gradients flow through it", node,
                                 hint="register one with fxkit.runtime.autograd.defgrad, or detach its input")
        meta = node.meta["tensor_meta"]
        single = isinstance(meta, TensorMeta)
        if not single:
            g = tuple(gi if gi is not None else self._zeros(m) if _is_float(m) else None for gi, m in zip(g, meta))
        args, kwargs, targets = self._arguments(node, rule)
        wanted = [(path, stand_in) for path, stand_in, _, _ in targets]
        out = None
        if rule.out:
            value = self._value(node)
            out = value if single else tuple(value[i] if isinstance(m, TensorMeta) else None
                                             for i, m in enumerate(meta))
        results = run_rule(rule, g, args, kwargs, wanted, out, self.rec.extras.get(node))
        for (_, like, source, slot), result in zip(targets, results):
            result = self._conform(result, like, target.name, node)
            if result is not None:
                self._add(source, slot, result)

    def _zeros(self, meta):
        return self.rec.create_proxy("call", _full, (tuple(meta.shape), 0.0), {"dtype": meta.dtype,
                                                                                "device": meta.device})

    def _arguments(self, node, rule):
        """The rule's arguments (tensors saved by the rule as graph values, the others as
        `TensorMeta`, as eager autograd passes them) and ``(path, stand-in, source node,
        slot)`` of each argument gradients flow to."""
        targets = []
        requires = self.rec.requires

        def stand_in(path, source, slot):
            name = rule.name_of(path)
            meta = source.meta["tensor_meta"]
            if slot is not None:
                meta = meta[slot]
            value = (self._value(source) if slot is None else self._value(source)[slot]) if name in rule.saves \
                else TensorMeta(*meta)
            if source in requires and _is_float(meta):
                if name in rule.nondiff:
                    raise location_error(f"grad: {node.target.name} is not differentiable with respect to {name}, "
                                         f"which requires grad", node, hint=f"pass {name}.detach()")
                targets.append((path, value, source, slot))
            return value

        def visit(value, path):
            if isinstance(value, Node):
                meta = value.meta.get("tensor_meta")
                if isinstance(meta, TensorMeta):
                    return stand_in(path, value, None)
                if isinstance(meta, (tuple, list)):  # a node with several results passed whole (cat(chunks))
                    return [stand_in(path + (j,), value, j) if isinstance(m, TensorMeta) else m
                            for j, m in enumerate(meta)]
                return value
            if (type(value) is tuple or isinstance(value, list)) and value and _is_tensor_node(value[0]):
                return type(value)(stand_in(path + (j,), v, None) if _is_tensor_node(v) else v
                                   for j, v in enumerate(value))
            return map_arg(value, self._value)  # tensors nested deeper (an index tuple) arrive as values

        args = [visit(a, (i,)) for i, a in enumerate(node.args)]
        kwargs = {k: visit(v, (k,)) for k, v in node.kwargs.items()}
        return args, kwargs, targets

    def _conform(self, g, like, op_name, node):
        """A rule's gradient summed to its input's shape and cast to its dtype (`engine.conform`
        on graph values); tensors a rule made eagerly become graph values."""
        if g is None:
            return None
        if isinstance(g, Tensor):
            g = self.rec.constant(g)
        if not isinstance(g, GradProxy):
            raise location_error(f"grad: the grad rule of {op_name} returned {type(g).__name__}, not a tensor", node)
        return shaped_like(g, like, op_name)


def _floating_tensor(node):
    return _is_float(node.meta.get("tensor_meta"))


def _is_float(meta):
    return isinstance(meta, TensorMeta) and meta.dtype.is_floating_point


def _is_tensor_node(value):
    return isinstance(value, Node) and isinstance(value.meta.get("tensor_meta"), TensorMeta)
