"""An ``ExportedProgram`` rebuilt as an fxkit `GraphModule`, one ATen node at a time.

Each call node of the exported graph goes through `aten_table` (``ATEN`` for
ATen overloads, ``PYTHON`` for arithmetic on symbolic sizes) and becomes the
registry ops its rule records. The program's lifted inputs come back as
module attributes under their ``state_dict`` names (``get_attr`` nodes placed
before their first reader, so `split_pipeline` keeps weights with the stage
that reads them); lifted constants are named ``<module path>._tensor_constant<k>``
like torch.fx names them. Every recorded node carries ``meta["stack"]``: the
source line torch recorded and the module path from ``nn_module_stack``.

torch is passed in by `fxkit.interop.torch_import`; this module never imports it.
"""
import re

from fxkit.errors import GraphError, format_error
from fxkit.graph import Graph, GraphModule
from fxkit.graph.node import SourceLocation
from fxkit.interop.torch_export.aten_table import ATEN, DROPPED, PYTHON
from fxkit.interop.torch_export.symbols import symbolic_dim
from fxkit.interop.torch_layers import to_numpy
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.device import cpu
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.nn.parameter import Parameter
from fxkit.runtime.registry import all_ops, get_op
from fxkit.runtime.tensor import Tensor
from fxkit.transforms.shape_prop import record_meta

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')
_TABLE_FILE = "fxkit/interop/torch_export/aten_table.py"
# Higher-order ops whose region body is recorded in their place (see `_inlined`).
INLINED = ("torch.ops.higher_order.wrap_with_set_grad_enabled", "torch.ops.higher_order.wrap_with_autocast")


def target_name(target):
    """How the tables spell a call target: ``"aten.add.Tensor"``, ``"operator.mul"``, ``"torch.sym_max"``."""
    if hasattr(target, "_schema") or type(target).__name__ == "OpOverload":
        return str(target)
    module = getattr(target, "__module__", None) or ""
    module = {"_operator": "operator"}.get(module, module)
    return f"{module}.{getattr(target, '__name__', target)}"


def functional_spelling(spelling):
    """``"aten.relu_.default"`` -> ``"aten.relu.default"``: the out-of-place twin of an in-place overload."""
    parts = spelling.split(".")
    if len(parts) == 3 and parts[1].endswith("_") and not parts[1].endswith("__"):
        return ".".join((parts[0], parts[1][:-1], parts[2]))
    return spelling


def rule_of(spelling, registered):
    """The table rule of an overload or Python function (in-place overloads use their twin's), or None
    when there is none or it names a registry op not in ``registered`` (a set of op names)."""
    rule = ATEN.get(functional_spelling(spelling), PYTHON.get(spelling))
    if isinstance(rule, str) and rule not in registered:
        return None
    return rule


def torch_dtype(dtype):
    """A ``torch.dtype`` as the fxkit dtype of the same name."""
    return _dt.from_name(str(dtype).removeprefix("torch."))


def location(torch_node):
    """``meta["stack"]`` for nodes made from ``torch_node``: its last recorded frame and module path."""
    stack = torch_node.meta.get("nn_module_stack") or {}
    path = next(reversed(stack.values()))[0] if stack else ""
    if path.startswith("_empty_nn_module_stack"):  # torch's marker on nodes its own passes inserted
        path = ""
    frames = _FRAME.findall(torch_node.meta.get("stack_trace") or "")
    if not frames:
        return SourceLocation("", 0, "", "", path) if path else None
    filename, lineno, function, line = frames[-1]
    return SourceLocation(filename, int(lineno), function, line.strip(), path)


class Emitter:
    """What a table rule sees as ``c``: ``c("name", *args)`` records the registry op ``name``."""

    def __init__(self, converter):
        self._converter = converter

    def __call__(self, name, *args, **kwargs):
        return self._converter.record(get_op(name), args, kwargs)

    def rank(self, x):
        return len(self._converter.vals[x].shape)

    def shape(self, x):
        """The torch shape of ``x`` (a number has shape ``()``); symbolic sizes as their text (``s45``)."""
        val = self._converter.vals.get(x) if not isinstance(x, (int, float, bool)) else None
        return tuple(d if isinstance(d, int) else str(d) for d in val.shape) if val is not None else ()

    def dtype(self, x):
        if isinstance(x, (bool, int, float)):
            return None
        return torch_dtype(self._converter.vals[x].dtype)



class Converter:
    """Builds the fxkit graph of ``program`` (an ``ExportedProgram`` of ``model``)."""

    def __init__(self, torch, model, program, dim_names):
        self.torch = torch
        self.model = model
        self.program = program
        self.dim_names = dim_names
        self.graph = Graph()
        self.root = {}
        self.vals = {}
        self.env = {}
        self.attrs = {}
        self.constants = {}
        self.emitter = Emitter(self)
        self.registered = {op.name for op in all_ops()}
        self._where = None
        signature = program.graph_signature
        self.lifted = {spec.arg.name: spec for spec in signature.input_specs
                       if spec.kind.name in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR")}

    def run(self):
        for n in self.program.graph.nodes:
            self._where = location(n)
            if n.op == "placeholder":
                self.env[n] = self._placeholder(n)
            elif n.op == "get_attr":  # the body of a region (``with torch.no_grad():``)
                self.env[n] = _Body(getattr(self.program.graph_module, n.target))
            elif n.op == "call_function":
                self.env[n] = self._call(n)
            elif n.op == "output":
                self._output(n)
        name = type(self.model).__name__
        gm = GraphModule(self.root, self.graph, class_name=name if name.isidentifier() else "GraphModule")
        return gm.train(self.model.training)

    # -- nodes --------------------------------------------------------------------------------
    def _placeholder(self, n):
        if n.name in self.lifted:
            return _Lifted(n)
        val = n.meta.get("val")
        if not isinstance(val, self.torch.Tensor):
            return val  # a None or number argument: torch.export fixed it at its example value
        node = self.graph.placeholder(n.name)
        shape = tuple(self._dim(d) for d in val.shape)
        record_meta(node, TensorMeta(shape, torch_dtype(val.dtype), cpu))
        self.vals[node] = val
        return node

    def _dim(self, size):
        if isinstance(size, int):
            return size
        return symbolic_dim(size.node.expr, self.dim_names)

    def _call(self, n):
        spelling = target_name(n.target)
        if spelling in DROPPED:
            return None
        args, kwargs = self._arg(n.args), self._arg(n.kwargs)
        if spelling == "_operator.getitem" or spelling == "operator.getitem":
            base, index = args
            result = base[index] if isinstance(base, (tuple, list)) else self.record(get_op("getitem"), args, {})
            return self._remember(result, n.meta.get("val"))
        body = next((a for a in args if isinstance(a, _Body)), None)
        if body is not None and _inlined(spelling, args):
            return self._inline(body.module, args[args.index(body) + 1:])
        rule = rule_of(spelling, self.registered)
        if rule is None:
            raise self._unmapped(n, spelling)
        try:
            if isinstance(rule, str):
                result = self.record(get_op(rule), args, kwargs)
            else:
                result = rule(self.emitter, *args, **kwargs)
        except GraphError:
            raise
        except Exception as exc:  # noqa: BLE001  (named with the ATen node below)
            raise GraphError(format_error(
                f"fxkit.from_torch: cannot convert {n.format_node()}: {type(exc).__name__}: {exc}",
                where=self._where, hint=f"check the rule of {spelling} in {_TABLE_FILE}")) from exc
        return self._remember(result, n.meta.get("val"))

    def _remember(self, result, val):
        """Keep torch's value ``val`` of each node in ``result`` (for ``c.rank``, ``c.shape``, ``c.dtype``
        of later rules, e.g. ``type_as`` reading an item of ``unbind``); returns ``result``."""
        if isinstance(val, self.torch.Tensor) and result is not None and not isinstance(result, (tuple, list)):
            self.vals.setdefault(result, val)
        elif isinstance(result, (tuple, list)) and isinstance(val, (tuple, list)):
            for r, v in zip(result, val):
                if r is not None and isinstance(v, self.torch.Tensor):
                    self.vals.setdefault(r, v)
        return result

    def _inline(self, module, operands):
        """The nodes of a region's body graph, recorded in place of the region; its outputs as a tuple."""
        outer = self.env
        self.env = {}
        try:
            placeholders = iter(operands)
            for n in module.graph.nodes:
                self._where = location(n) or self._where
                if n.op == "placeholder":
                    self.env[n] = next(placeholders)
                elif n.op == "get_attr":
                    self.env[n] = _Body(getattr(module, n.target))
                elif n.op == "call_function":
                    self.env[n] = self._call(n)
                elif n.op == "output":
                    return tuple(self._arg(v) for v in n.args[0])
        finally:
            self.env = outer
        raise GraphError(f"fxkit.from_torch: the region body {type(module).__name__} has no output")

    def _unmapped(self, n, spelling):
        path = self._where.module if self._where and self._where.module else "the top-level module"
        where = None
        if self._where and self._where.filename:
            where = f"{self._where.filename}:{self._where.lineno} in {self._where.function}: {self._where.line}"
        return GraphError(format_error(
            f"fxkit.from_torch: the ATen op {spelling} (in {path}) has no fxkit registry op",
            where=where, node=n.format_node(),
            hint=f"add an entry for {spelling} to {_TABLE_FILE} (and a registry op in fxkit/runtime/ops if none "
                 f"computes it), or convert the model to ONNX and use fxkit.from_onnx"))

    def _output(self, n):
        specs = self.program.graph_signature.output_specs
        flat = []
        for spec, value in zip(specs, n.args[0]):
            if spec.kind.name != "USER_OUTPUT":
                raise GraphError(format_error(
                    f"fxkit.from_torch: {type(self.model).__name__}'s forward updates {spec.target!r} in place "
                    f"({spec.kind.name.lower().replace('_', ' ')}), which the imported graph would not do",
                    hint="import the model in eval mode (model.eval()) so BatchNorm keeps its running statistics, "
                         "or return the new value instead of assigning it"))
            flat.append(self._arg(value))
        self.graph.output(unflatten(flat, self.program.call_spec.out_spec))

    # -- recording ------------------------------------------------------------------------------
    def record(self, op, args, kwargs):
        """A call of registry ``op``, with the current torch node's location as its stack."""
        node = self.graph.call(op, tuple(args), {k: v for k, v in kwargs.items()})
        if self._where is not None:
            node.meta["stack"] = self._where
        return node

    def _attr(self, placeholder):
        """The ``get_attr`` node of a lifted parameter, buffer or constant (made at its first reader)."""
        node = self.attrs.get(placeholder.name)
        if node is not None:
            return node
        spec = self.lifted[placeholder.name]
        value = self.program.state_dict.get(spec.target)
        if value is None:
            value = self.program.constants[spec.target]
        owner, _, leaf = spec.target.rpartition(".")
        qualname = self._constant_name(owner) if leaf.startswith("lifted_tensor") else spec.target
        array = to_numpy(value, qualname)
        is_param = spec.kind.name == "PARAMETER"
        self.root[qualname] = Parameter(array, requires_grad=value.requires_grad) if is_param else Tensor(array)
        node = self.attrs[placeholder.name] = self.graph.get_attr(qualname)
        if self._where is not None:
            node.meta["stack"] = self._where
        self.vals[node] = placeholder.meta["val"]
        return node

    def _constant_name(self, owner):
        """``<module path>._tensor_constant<k>`` for a tensor torch.export lifted out of a forward
        (``owner``: the module torch names, else the module of the node reading it)."""
        path = owner or (self._where.module if self._where is not None else "")
        k = self.constants[path] = self.constants.get(path, -1) + 1
        return f"{path}._tensor_constant{k}" if path else f"_tensor_constant{k}"

    def _arg(self, value):
        torch = self.torch
        if isinstance(value, torch.fx.Node):
            converted = self.env[value]
            return self._attr(converted.node) if isinstance(converted, _Lifted) else converted
        if isinstance(value, (tuple, list)):  # torch.fx's immutable lists as plain ones
            return (list if isinstance(value, list) else tuple)(self._arg(v) for v in value)
        if isinstance(value, dict):
            return {k: self._arg(v) for k, v in value.items()}
        if isinstance(value, torch.dtype):
            return torch_dtype(value)
        if isinstance(value, torch.device):
            return str(value)
        if isinstance(value, (torch.memory_format, torch.layout)):
            return None
        return value


class _Body:
    """A region's body (a torch.fx ``GraphModule`` a higher-order op runs)."""

    __slots__ = ("module",)

    def __init__(self, module):
        self.module = module


def _inlined(spelling, args):
    """Whether a higher-order op's region computes exactly its body: ``no_grad``/``enable_grad`` regions,
    and ``autocast`` regions that disable autocasting."""
    if spelling == INLINED[0]:
        return True
    return spelling == INLINED[1] and len(args) > 2 and args[2] is False


class _Lifted:
    """An exported placeholder that stands for a parameter, buffer or constant."""

    __slots__ = ("node",)

    def __init__(self, node):
        self.node = node


def unflatten(flat, spec):
    """The outputs' original nesting (tuples, lists, dicts; dataclass-like outputs as dicts)."""
    items = iter(flat)

    def build(s):
        if s.is_leaf():
            return next(items)
        children = [build(child) for child in s.children()]
        if s.type in (tuple, list):
            return s.type(children)
        if isinstance(s.context, (list, tuple)) and len(s.context) == len(children) and \
                all(isinstance(k, str) for k in s.context):
            return dict(zip(s.context, children))
        return tuple(children)

    return build(spec)
