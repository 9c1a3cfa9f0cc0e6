"""`from_onnx`: an ONNX model as a `GraphModule` of registry ops (``fxkit.from_onnx``).

The file is parsed by the ``onnx`` package (protobuf only: nothing in it is
executed or unpickled), checked with ``onnx.checker``, and each node becomes
registry op calls through the import table keyed by ONNX op type
(`fxkit.interop.onnx_import_rules`). Initializers become the module's
parameters and buffers under their names (``layer1.0.conv1.weight`` stays a
dotted path), read with ``get_attr``. The result is an ordinary GraphModule:
fxkit's passes (fusion, quantization, splitting) apply to it.

Values while importing are graph nodes (tensors), `Const` (initializers,
``Constant`` outputs and nodes reading only constants, which are computed
while importing; ``get_attr`` nodes where a tensor is needed) or `Dims`
(shape values: 0-d or 1-D integer tensors computed from ``Shape`` outputs,
held item by item with their exact rank, see `onnx_import_dims`), which stay
Python values so ``Reshape`` gets a shape it can use. Where the file has no
shape for a value, the registry's shape rules give it (an input of unknown
meta leaves its users unknown, with their rank where the rule still gives it).

Example:
    >>> gm = fxkit.from_onnx("resnet18.onnx")
    >>> gm(fxkit.randn(2, 3, 224, 224)).shape
    (2, 1000)
"""
import functools
import os

import numpy as np

from fxkit.codegen.namespace import sanitize
from fxkit.errors import FxkitError, GraphError, ResourceLimitError
from fxkit.graph import Graph, GraphModule, Node, map_arg
from fxkit.interop.onnx_import_values import Const, Dims
from fxkit.interop.onnx_node_call import NodeCall
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.alloc_limit import allocation_limit, human_bytes
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.nn.module import Module
from fxkit.runtime.nn.parameter import Parameter
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor
from fxkit.transforms.infer_shapes import apply_rule
from fxkit.transforms.shape_prop import meta_of
from fxkit.transforms.symbolic import Sym


@functools.cache
def _reserved():
    """Names a GraphModule already has (methods, ``training``, ...), unusable for attributes."""
    return frozenset(dir(GraphModule)) | frozenset(vars(Module()))


def from_onnx(source, *, max_bytes=None):
    """Import an ONNX model into a `GraphModule`.

    Args:
        source: a path, the serialized bytes, or an ``onnx.ModelProto``.
        max_bytes: the most memory constants folded while importing may take
            (``ConstantOfShape``, ``Range``, ops on constants). By default 16
            times the model's serialized size, at least 64 MB, so a small file
            cannot make the import allocate gigabytes; pass more for a model
            you trust.

    Returns:
        A `GraphModule` whose inputs are the ONNX graph inputs (in order) and
        whose output is the ONNX output (a tuple when there are several).

    Raises:
        GraphError: the file is not a valid ONNX model, or a node uses an op type
            or attribute fxkit does not import (naming the node and its op type).
        ResourceLimitError: a folded constant would pass ``max_bytes`` (naming the node).
    """
    try:
        import onnx
    except ImportError:
        raise ImportError("fxkit.from_onnx needs the onnx package: pip install 'fxkit[onnx]'") from None
    from fxkit.interop import (  # noqa: F401  (fill the table)
        onnx_import_index, onnx_import_nn, onnx_import_resample, onnx_import_rnn, onnx_import_shape)
    from fxkit.interop.onnx_import_rules import IMPORT_RULES

    model = _load(onnx, source)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise GraphError(f"fxkit.from_onnx: the ONNX model is invalid: {exc}") from None
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:
        raise GraphError("fxkit.from_onnx: the model imports no version of the default ONNX domain")
    try:
        typed = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001  (shapes only help rules; a model they fail on may still import)
        typed = model
    if max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes <= 0):
        raise GraphError(f"fxkit.from_onnx: max_bytes must be a positive int (bytes), got {max_bytes!r}")
    limit = max_bytes if max_bytes is not None else max(_FLOOR_BYTES, _SIZE_RATIO * model.ByteSize())
    importer = _Importer(onnx, model, typed, opset, IMPORT_RULES)
    importer.fold_budget = _FoldBudget(limit, max_bytes is not None)
    return importer.run()


_FLOOR_BYTES = 64_000_000
_SIZE_RATIO = 16


class _FoldBudget:
    """What constants folded while importing may still take; charged before they are built."""

    def __init__(self, limit, explicit):
        self.limit, self.explicit, self.used = limit, explicit, 0

    def charge(self, nbytes, what):
        self.used += int(nbytes)
        if self.used > self.limit:
            how = (f"pass a larger max_bytes= (now {self.limit})" if self.explicit else
                   f"by default {_SIZE_RATIO}x the model's size, at least {human_bytes(_FLOOR_BYTES)}; pass "
                   f"fxkit.from_onnx(model, max_bytes=N)")
            raise ResourceLimitError(f"{what} would take {human_bytes(nbytes)}, and constants folded while "
                                     f"importing may take {human_bytes(self.limit)} in all ({how} if you "
                                     f"trust the model)")


def _load(onnx, source):
    if isinstance(source, onnx.ModelProto):
        return source
    try:
        if isinstance(source, (bytes, bytearray)):
            return onnx.load_model_from_string(bytes(source))
        if isinstance(source, (str, os.PathLike)):
            return onnx.load(os.fspath(source))
    except (OSError, ValueError) as exc:
        raise GraphError(f"fxkit.from_onnx: cannot read {source if not isinstance(source, bytes) else 'the bytes'} "
                         f"as an ONNX model: {exc}") from None
    except Exception as exc:  # noqa: BLE001  (protobuf's DecodeError and friends)
        raise GraphError(f"fxkit.from_onnx: {source!r} is not a valid ONNX model (protobuf could not parse "
                         f"it: {type(exc).__name__}: {exc})") from None
    raise TypeError(f"fxkit.from_onnx: expected a path, bytes or onnx.ModelProto, got {type(source).__name__}")


_KEPT = frozenset({"DequantizeLinear"})


def _constant(value):
    return isinstance(value, Const) or (isinstance(value, Dims) and value.known)


def _as_constants(results, proto):
    """An eagerly computed rule result with its tensors as `Const`s."""
    if isinstance(results, Tensor):
        return Const(results.numpy(), proto.output[0] or proto.op_type)
    if isinstance(results, (tuple, list)) and not isinstance(results, Dims):
        return [_as_constants(r, proto) for r in results]
    return results


class _Importer:
    """Builds the fxkit graph node by node; a rule sees one node as a `NodeCall`."""

    def __init__(self, onnx, model, typed, opset, rules):
        self.onnx = onnx
        self.model = model
        self.opset = opset
        self.rules = rules
        self.graph = Graph()
        self.root = {}
        self.values = {}
        self._attrs = {}
        self._paths = set()
        self.types = {}
        self.metas = {}  # node -> its meta by the registry's shape rules, where ONNX gives no shape
        self.ranks = {}  # node -> its rank, where a rule knows it but neither ONNX nor the shape rules do
        g = typed.graph
        for info in list(g.input) + list(g.value_info) + list(g.output):
            self.types[info.name] = info.type.tensor_type

    def run(self):
        g = self.model.graph
        for init in g.initializer:
            self.values[init.name] = Const(self.onnx.numpy_helper.to_array(init), init.name)
        for info in g.input:
            if info.name not in self.values:
                node = self.values[info.name] = self.graph.placeholder(sanitize(info.name))
                self.metas[node] = self._input_meta(info, node.name)
        for proto in g.node:
            self._import_node(proto)
        outputs = []
        for info in g.output:
            value = self.values.get(info.name)
            if value is None:
                raise GraphError(f"fxkit.from_onnx: the graph output {info.name!r} is computed by no node")
            outputs.append(self.tensor(value))
        self.graph.output(outputs[0] if len(outputs) == 1 else tuple(outputs))
        self.graph.eliminate_dead_code()  # shape values computed but never used
        name = sanitize(g.name) if g.name else "OnnxModel"
        return GraphModule(self.root, self.graph, class_name=name)

    def _import_node(self, proto):
        where = f"node {proto.name or proto.output[0]!r} (op type {proto.op_type}"
        where += f", domain {proto.domain!r})" if proto.domain not in ("", "ai.onnx") else ")"
        rule = self.rules.get(proto.op_type) if proto.domain in ("", "ai.onnx") else None
        if rule is None:
            supported = ", ".join(sorted(self.rules))
            raise GraphError(f"fxkit.from_onnx: {where} is not supported\n  hint: fxkit imports the op types "
                             f"{supported}")
        for name in proto.input:
            if name and name not in self.values:
                raise GraphError(f"fxkit.from_onnx: {where} reads {name!r}, which no earlier node, initializer "
                                 f"or graph input defines (the file is malformed or not topologically sorted)")
        inputs = [self.values[name] for name in proto.input if name]
        # NOTE: a node reading only constants is computed now, by the same rule run eagerly
        # (exporters compute shape pieces from constants, which Reshape and Slice need as values);
        # a dequantized weight stays in the graph so the model keeps its integer weights.
        eager = bool(inputs) and proto.op_type not in _KEPT and all(_constant(v) for v in inputs)
        call = NodeCall(self, proto, eager)
        try:
            if eager:
                budget = self.fold_budget
                # NOTE: factories (full, zeros, arange) charge before they allocate
                with allocation_limit(budget.limit - budget.used, f"fxkit.from_onnx: {where}, folded",
                                      "; pass fxkit.from_onnx(model, max_bytes=N) if you trust the model"):
                    results = _as_constants(rule(call), proto)
                for result in results if isinstance(results, list) else [results]:
                    if isinstance(result, Const):
                        budget.charge(result.array.nbytes, f"fxkit.from_onnx: {where}, folded,")
            else:
                results = rule(call)
        except ResourceLimitError:
            raise
        except GraphError as exc:
            raise GraphError(f"fxkit.from_onnx: {where}: {exc}") from None
        except (FxkitError, ValueError, TypeError, IndexError, KeyError, OverflowError, ZeroDivisionError) as exc:
            raise GraphError(f"fxkit.from_onnx: {where} could not be imported: {type(exc).__name__}: {exc}") from exc
        results = list(results) if isinstance(results, (tuple, list)) and not isinstance(results, Dims) else [results]
        for i, name in enumerate(proto.output):
            if not name:
                continue
            if i >= len(results):
                raise GraphError(f"fxkit.from_onnx: {where}: its output {i} ({name!r}) has no fxkit equivalent")
            self.values[name] = results[i]

    # -- values ------------------------------------------------------------------------
    def tensor(self, value):
        """``value`` as a graph node: constants become ``get_attr`` of a module attribute."""
        if isinstance(value, Node):
            return value
        if isinstance(value, Const):
            node = self._attrs.get(id(value))
            if node is None:
                path = self._attr_path(value.name)
                array = np.require(value.array, requirements="C")
                tensor = Tensor(array)
                # NOTE: an imported model is for inference: its parameters start without
                # gradients (``p.requires_grad = True`` to fine-tune); BatchNorm's running
                # statistics are parameters here too, which batch_norm refuses to differentiate.
                self.root[path] = Parameter(tensor, requires_grad=False) if array.dtype.kind == "f" else tensor
                node = self._attrs[id(value)] = self.graph.get_attr(path)
                self.metas[node] = meta_of(tensor)
            return node
        if isinstance(value, Dims):
            return self._dims_tensor(value)
        raise GraphError(f"expected a tensor, got {value!r}")

    def _dims_tensor(self, dims):
        """A shape value used as data: a constant when known, else ``stack`` of 0-d ``full`` items."""
        cached = self._attrs.get(("dims", id(dims)))
        if cached is not None:
            return cached[1]
        if dims.known:
            node = self.tensor(Const(dims.array(), "shape_value"))
        else:
            dtype = _dt.from_numpy(dims.dtype)
            items = [self.record(self.graph.call(get_op("full"), ((), d), {"dtype": dtype}, name="shape_item"))
                     for d in dims]
            node = items[0] if dims.scalar else self.record(
                self.graph.call(get_op("stack"), (items,), {}, name="shape_value"))
        self._attrs[("dims", id(dims))] = (dims, node)  # NOTE: holds dims so its id is not reused
        return node

    def _attr_path(self, name):
        """A module attribute path for an initializer: its dotted name when every part is
        an identifier or an index that is no Module attribute (``half``, ``forward``) and it
        clashes with no other path, else one new identifier."""
        parts = name.split(".")
        fits = (all((p.isidentifier() or p.isdigit()) and p not in _reserved() for p in parts)
                and not parts[-1].isdigit())
        if not fits or not self._free(name):
            base = sanitize(name)
            if base.startswith("_") or base in _reserved():
                base = "c" + base if base.startswith("_") else "c_" + base
            name, i = base, 0
            while not self._free(name):
                i += 1
                name = f"{base}_{i}"
        self._paths.add(name)
        return name

    def _free(self, path):
        """No attribute path taken so far is ``path``, inside it or around it."""
        prefixes = {".".join(path.split(".")[:i]) for i in range(1, path.count(".") + 1)}
        return path not in self._paths and not prefixes & self._paths and not any(
            p.startswith(path + ".") for p in self._paths)

    def dtype(self, name):
        """The fxkit dtype of the ONNX value ``name``, when known."""
        value = self.values.get(name)
        if isinstance(value, Const):
            return _dt.from_numpy(value.array.dtype)
        if isinstance(value, Dims):
            return _dt.from_numpy(value.dtype)
        info = self.types.get(name)
        if info is not None and info.elem_type:
            return _dt.from_numpy(self.onnx.helper.tensor_dtype_to_np_dtype(info.elem_type))
        return None

    def shape(self, name):
        """The dims of the ONNX value ``name`` (ints, None where unknown), or None."""
        value = self.values.get(name)
        if isinstance(value, Const):
            return list(value.array.shape)
        if isinstance(value, Dims):
            return [] if value.scalar else [len(value)]
        info = self.types.get(name)
        dims = None
        if info is not None and info.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in info.shape.dim]
        meta = self.metas.get(value) if isinstance(value, Node) else None
        if isinstance(meta, TensorMeta) and (dims is None or None in dims):
            ruled = [d if type(d) is int else None for d in meta.shape]
            dims = ruled if dims is None or len(dims) != len(ruled) else [
                d if d is not None else r for d, r in zip(dims, ruled)]
        if dims is None and value in self.ranks:
            dims = [None] * self.ranks[value]
        return dims

    def record(self, node):
        """Compute ``node``'s meta from its inputs' (the registry's shape rules), when it can be."""
        metas = self.metas
        # NOTE: an input of unknown meta makes this one unknown (rules would read None as a Python
        # number); where the unknown inputs' ranks are known, the rule still gives this node's rank.
        unknown = [n for n in node.all_input_nodes if metas.get(n) is None]
        if unknown:
            metas[node] = None
            if all(n in self.ranks for n in unknown):
                stand_in = {n: TensorMeta(tuple(Sym.symbol(f"{n.name}_{i}") for i in range(self.ranks[n])),
                                          _dt.float32) for n in unknown}
                try:
                    ranked = apply_rule(node.target, map_arg(node.args, lambda n: stand_in.get(n) or metas[n]),
                                        map_arg(node.kwargs, lambda n: stand_in.get(n) or metas[n]))
                except (FxkitError, KeyError, TypeError, ValueError, IndexError, AttributeError):
                    ranked = None
                if isinstance(ranked, TensorMeta):
                    self.ranks[node] = len(ranked.shape)
            return node
        try:
            metas[node] = apply_rule(node.target, map_arg(node.args, metas.__getitem__),
                                     map_arg(node.kwargs, metas.__getitem__))
        except (FxkitError, KeyError, TypeError, ValueError, IndexError, AttributeError):
            metas[node] = None  # unknown: rules needing this node's rank say so
        return node

    def _input_meta(self, info, name):
        tensor_type = info.type.tensor_type
        dims = []
        for axis, d in enumerate(tensor_type.shape.dim):
            symbol = sanitize(d.dim_param) if d.dim_param else f"{name}_{axis}"
            dims.append(d.dim_value if d.HasField("dim_value") else Sym.symbol(symbol))
        dtype = self.dtype(info.name) or _dt.float32
        return TensorMeta(tuple(dims), dtype)
