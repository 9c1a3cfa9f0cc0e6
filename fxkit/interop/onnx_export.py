"""`export`: an fxkit model or `GraphModule` as an ONNX model (``fxkit.onnx.export``).

The model is traced (in eval mode: export describes inference), every node's
shape and dtype is inferred from the registry's rules (`infer_shapes`, with
the batch dimension symbolic), and each node is written by its rule in the
export tables (`fxkit.interop.onnx_rules`): an `Op` by ``OP_RULES``, a leaf
layer by ``MODULE_RULES`` or else as the registry ops its ``forward``
records. The result passes ``onnx.checker.check_model``.

Example:
    >>> model, shapes = fxkit.models.get("resnet18")
    >>> fxkit.onnx.export(model, fxkit.randn(*shapes[0]), "resnet18.onnx")   # batch size is free
"""
import inspect

try:
    import onnx
except ImportError as exc:  # an optional dependency: say how to get it
    raise ImportError("fxkit.onnx needs the onnx package: pip install 'fxkit[onnx]'") from exc

from fxkit.errors import FxkitError, LoweringError, format_error
from fxkit.graph import GraphModule, map_arg
from fxkit.interop import (  # noqa: F401  (fill the tables)
    onnx_rules_attention, onnx_rules_dynamic_quantized, onnx_rules_index, onnx_rules_nn, onnx_rules_quantized,
    onnx_rules_resample, onnx_rules_shape)
from fxkit.interop.onnx_builder import OnnxBuilder, Value, onnx_dtype
from fxkit.interop.onnx_rules import MODULE_RULES, OP_RULES, Args
from fxkit.interop.onnx_uint8_activations import uint8_activations
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.nn.module import Module
from fxkit.runtime.op import Op
from fxkit.runtime.tensor import Tensor
from fxkit.tracer import symbolic_trace
from fxkit.transforms.infer_shapes import ShapeInference, spec_meta, trace_body
from fxkit.transforms.shape_prop import has_tensor, meta_of
from fxkit.transforms.symbolic import Sym

MIN_OPSET = 17
DEFAULT_OPSET = 17


def export(model, example_inputs, path=None, *, opset=DEFAULT_OPSET, dynamic_batch=True, dynamic_axes=None,
           input_names=None, output_names=None):
    """Write ``model`` as an ONNX model (and return the ``onnx.ModelProto``).

    Args:
        model: an `fxkit.nn.Module` (traced here, in eval mode) or a `GraphModule`.
        example_inputs: one input or a tuple, one per ``forward`` argument: Tensors,
            shape tuples (float32; names like ``"N"`` are symbolic dimensions) or
            ``(shape, dtype)`` pairs.
        path: where to save the model; None only returns it.
        opset: the ONNX opset (17 or later).
        dynamic_batch: make dimension 0 of every input given without names the
            symbolic dimension ``N`` (the batch size is then free at run time).
        dynamic_axes: ``{input name or index: {axis: symbol name}}`` (or a list of
            axes, named ``<input>_<axis>``); replaces ``dynamic_batch``.
        input_names, output_names: names of the graph's inputs and outputs
            (default: ``forward``'s argument names; ``output`` or ``output_0``...).

    Returns:
        The ``onnx.ModelProto``, checked with ``onnx.checker.check_model``.

    Raises:
        LoweringError: a node has no ONNX export, naming the op, the node and its source line.
    """
    if not isinstance(opset, int) or not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise ValueError(f"fxkit.onnx.export: opset must be an int from {MIN_OPSET} to "
                         f"{onnx.defs.onnx_opset_version()} (this onnx package's newest), got {opset!r}")
    if not isinstance(model, Module):
        raise TypeError(f"fxkit.onnx.export: expected an fxkit.nn.Module or GraphModule, got {type(model).__name__}")
    inputs = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        gm = model if isinstance(model, GraphModule) else symbolic_trace(model)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder" and not n.args]
        specs = _input_specs(placeholders, inputs, dynamic_batch, dynamic_axes)
        proto = _Exporter(gm, opset).run(placeholders, specs, input_names, output_names)
    finally:
        for module, training in modes:
            module.training = training
    onnx.checker.check_model(proto, full_check=True)
    if path is not None:
        onnx.save(proto, path)
    return proto


def _input_specs(placeholders, inputs, dynamic_batch, dynamic_axes):
    """One `TensorMeta` per graph input, with the requested dims made symbolic."""
    if len(inputs) != len(placeholders):
        raise LoweringError(f"fxkit.onnx.export: the model takes {len(placeholders)} inputs "
                            f"({', '.join(p.target for p in placeholders)}), got {len(inputs)} example inputs")
    specs = []
    for i, (node, value) in enumerate(zip(placeholders, inputs)):
        meta = spec_meta(value)
        shape = list(meta.shape)
        axes = None
        if dynamic_axes is not None:
            axes = dynamic_axes.get(node.target, dynamic_axes.get(i))
            if isinstance(axes, (list, tuple)):
                axes = {a: f"{node.target}_{a}" for a in axes}
        elif dynamic_batch and shape and all(type(d) is int for d in shape):
            axes = {0: "N"}
        for a, name in (axes or {}).items():
            shape[a] = Sym.symbol(name)
        specs.append(TensorMeta(tuple(shape), meta.dtype, meta.device))
    return specs


def _dims(shape):
    return [d if type(d) is int else str(d) for d in shape]


class _Exporter:
    """Walks a GraphModule (and the traced bodies of its leaf layers), writing ONNX nodes."""

    def __init__(self, gm, opset):
        self.gm = gm
        self.b = OnnxBuilder(onnx, opset)
        self.where = []  # the nodes being exported, outermost first (for error messages)

    def run(self, placeholders, specs, input_names, output_names):
        inference = ShapeInference(self.gm)
        inference.garbage_collect_values = False
        try:
            inference.run(*specs)
        except FxkitError as exc:
            raise LoweringError(f"fxkit.onnx.export: shape inference failed, so the graph cannot be "
                                f"written:\n{exc}") from exc
        b = self.b
        graph_inputs, env = [], {}
        for i, (node, meta) in enumerate(zip(placeholders, specs)):
            name = b.reserve(input_names[i] if input_names else node.target)
            graph_inputs.append(onnx.helper.make_tensor_value_info(name, onnx_dtype(meta.dtype), _dims(meta.shape)))
            for a, d in enumerate(meta.shape):
                if isinstance(d, Sym) and d.free_symbols == {str(d)}:
                    b.bind_symbol(str(d), name, a)
            env[node] = Value(name, meta)
        result = self.emit_graph(self.gm.graph, env, self.gm, "", inference.env)
        outputs = self._outputs(result, output_names)
        uint8_activations(b.nodes, b.initializers, {o.name for o in outputs})
        graph = onnx.helper.make_graph(b.nodes, type(self.gm).__name__, graph_inputs, outputs, b.initializers)
        opsets = [onnx.helper.make_opsetid("", b.opset)]
        proto = onnx.helper.make_model(graph, opset_imports=opsets, producer_name="fxkit",
                                       ir_version=onnx.helper.find_min_ir_version_for(opsets))
        return proto

    # -- graphs and nodes ----------------------------------------------------------------
    def emit_graph(self, graph, inputs, owner, prefix, inferred=None):
        """Write ``graph``'s nodes; returns its output with tensors as `Value`s.

        Args:
            graph: a top-level graph or a traced body.
            inputs: placeholder node -> value (defaults fill the rest).
            owner: the module ``get_attr`` targets are read from.
            prefix: the qualified name of ``owner`` plus ``.`` (initializer names).
            inferred: node -> inferred value (top level); bodies carry ``meta``.
        """
        env = {}
        for node in graph.nodes:
            if node.op == "placeholder":
                env[node] = inputs[node] if node in inputs else node.args[0]
            elif node.op == "get_attr":
                env[node] = self._attr(owner, node.target, prefix)
            elif node.op == "output":
                return map_arg(node.args[0], env.__getitem__)
            else:
                meta = inferred[node] if inferred is not None else node.meta.get("tensor_meta")
                if not has_tensor(meta):
                    # Python values: shape arithmetic at the top level; in a traced body,
                    # they were folded into the nodes using them.
                    if inferred is not None:
                        env[node] = meta
                    continue
                self.where.append(node)
                try:
                    env[node] = self._emit_call(node, env, meta, owner, prefix)
                finally:
                    self.where.pop()
        raise LoweringError("fxkit.onnx.export: the graph has no output node")

    def _emit_call(self, node, env, out, owner, prefix):
        scope = prefix + node.name
        since = len(self.b.nodes)
        result = self._emit_target(node, env, out, owner, prefix, scope)
        qparams = node.meta.get("qparams")
        return _map_values(result, lambda v: Value(self.b.name_results(v.name, since, scope), v.meta, v.data,
                                                   qparams if isinstance(result, Value) else v.qparams))

    def _emit_target(self, node, env, out, owner, prefix, scope):
        args, kwargs = map_arg(node.args, env.__getitem__), map_arg(node.kwargs, env.__getitem__)
        target = node.target
        self.b.scope, self.b.meta = scope, node.meta
        try:
            if isinstance(target, Op):
                rule = OP_RULES.get(target)
                if rule is None:
                    raise LoweringError(f"no ONNX export rule for op {target.name!r}")
                return _wrap(rule(self.b, target, _bind(target, args, kwargs), out), out)
            if type(target) is str:
                module = _fetch(owner, target)
                rule = next((MODULE_RULES[c] for c in type(module).__mro__ if c in MODULE_RULES), None)
                if rule is not None:
                    return _wrap(rule(self.b, module, prefix + target, args, kwargs, out), out)
                return self._inline(module, module, prefix + target + ".", args, kwargs)
            body = getattr(target, "graph", None)
            if body is not None and callable(getattr(target, "shape_rule", None)):  # a FusedOp
                placeholders = [n for n in body.nodes if n.op == "placeholder"]
                return self.emit_graph(body, dict(zip(placeholders, args)), owner, prefix + node.name + ".")
            return self._inline(target, owner, prefix, args, kwargs)
        except LoweringError as exc:
            if getattr(exc, "located", False):  # raised by a node of a traced body: already located
                raise
            raise self._error(str(exc)) from exc.__cause__
        except FxkitError as exc:
            raise self._error(str(exc)) from exc
        except (ValueError, TypeError, IndexError, KeyError, AttributeError) as exc:
            raise self._error(f"{type(exc).__name__}: {exc}") from exc

    def _inline(self, fn, owner, prefix, args, kwargs):
        """Export a leaf layer or wrapped function as the registry ops its body records."""
        body = trace_body(fn, _metas(args), _metas(kwargs))
        params = inspect.signature(type(fn).forward if isinstance(fn, Module) else fn).parameters
        signature = inspect.Signature(list(params.values())[1 if isinstance(fn, Module) else 0:])
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        inputs = {n: bound.arguments[n.target] for n in body.graph.nodes if n.op == "placeholder"}
        return self.emit_graph(body.graph, inputs, owner, prefix)

    def _attr(self, owner, target, prefix):
        value = _fetch(owner, target)
        if isinstance(value, Tensor):
            return Value(self.b.parameter(value, prefix + target), meta_of(value), value)
        return value

    def _outputs(self, result, output_names):
        flat = []
        _flatten(result, flat)
        if not flat or not all(isinstance(v, Value) for v in flat):
            raise LoweringError(f"fxkit.onnx.export: the model must return tensors (a tensor, or tuples, lists "
                                f"and dicts of them); it returns {result!r}")
        b = self.b
        taken = {i.name for i in b.initializers}
        produced = {o for n in b.nodes for o in n.output}
        outputs = []
        for i, value in enumerate(flat):
            name = output_names[i] if output_names else ("output" if len(flat) == 1 else f"output_{i}")
            if value.name in produced and value.name not in taken:
                b.reserve(name)
                _rename(b.nodes, value.name, name)
                produced.discard(value.name)
            else:  # a graph input, a constant or an output already: copy it under the new name
                b.nodes.append(onnx.helper.make_node("Identity", [value.name], [b.reserve(name)],
                                                     name=b.fresh("node:" + name)))
            taken.add(name)
            outputs.append(onnx.helper.make_tensor_value_info(name, onnx_dtype(value.meta.dtype),
                                                              _dims(value.meta.shape)))
        return outputs

    def _error(self, message):
        """A `LoweringError` naming the node (and each enclosing layer) and its source line."""
        outer = self.where[0]
        lines = [f"fxkit.onnx.export: {message}".split("\n  hint:")[0]]
        hint = message.split("\n  hint: ", 1)[1] if "\n  hint: " in message else None
        for inner in self.where[1:]:
            lines.append(f"  in the traced forward of {outer.format_node()}: {inner.format_node()}")
        error = LoweringError(format_error("\n".join(lines), where=outer.stack, node=outer.format_node(),
                                           hint=hint or "export the model without this op, or register a rule "
                                           "in fxkit.interop.onnx_rules.OP_RULES"))
        error.located = True
        return error


def _bind(op, args, kwargs):
    """The op's arguments by parameter name (defaults filled in), as attributes."""
    try:
        return Args(op.bind(args, kwargs))
    except TypeError as exc:
        raise LoweringError(f"{op.name}: arguments do not fit {op.name}{op.signature}: {exc}") from None


def _wrap(names, out):
    """A rule's result names as `Value`s with the metas of the node's output."""
    if isinstance(out, TensorMeta):
        if not isinstance(names, str):
            raise LoweringError(f"an export rule returned {names!r} for one tensor")
        return Value(names, out)
    if isinstance(out, (tuple, list)):
        if isinstance(names, Value) or len(names) != len(out):
            raise LoweringError(f"an export rule returned {names!r} for {len(out)} results")
        items = [None if m is None else (n if isinstance(n, Value) else _wrap(n, m)) for n, m in zip(names, out)]
        return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)
    return out


def _metas(value):
    """``value`` with each `Value` replaced by its `TensorMeta` (containers kept)."""
    return _map_values(value, lambda v: v.meta)


def _map_values(value, fn):
    """``value`` with ``fn`` applied to each `Value` in it (containers kept)."""
    if isinstance(value, Value):
        return fn(value)
    if isinstance(value, (tuple, list)):
        items = [_map_values(v, fn) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        return {k: _map_values(v, fn) for k, v in value.items()}
    return value


def _flatten(value, out):
    if isinstance(value, (tuple, list)):
        for v in value:
            _flatten(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _flatten(v, out)
    else:
        out.append(value)


def _fetch(owner, target):
    value = owner
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _rename(nodes, old, new):
    for node in nodes:
        for field in (node.input, node.output):
            for i, name in enumerate(field):
                if name == old:
                    field[i] = new
