"""`save` / `load`: a data-only file format for GraphModules.

A saved GraphModule is a directory (or a ``.zip`` of the same files):

- ``graph.json``: the nodes (name, opcode, target, args, kwargs, source line);
  targets are op names, submodule paths and dotted function names; constants
  are tagged JSON values (``{"$tuple": [...]}``, ``{"$dtype": "float32"}``, ...).
  Call targets of a registered kind (`fxkit.graph.register_target_kind`; the
  `FusedOp` of `fuse_elementwise`) are stored once each in a ``targets`` table
  as their kind's name and data, body graphs as nested node lists, and nodes
  refer to them as ``{"$target": index}``.
- ``modules.json``: each called submodule as its class name and constructor
  arguments (``Module._init_kwargs()``), plus its training flag.
- ``weights.npz``: every tensor (``arr_<i>`` for the i-th qualified name listed
  in ``graph.json``), written and read with ``allow_pickle=False``; deflated when
  most of its bytes are integers (quantized models), stored as is otherwise.
- ``code.py``: the generated forward, for people to read.

Loading never unpickles and runs no code from the files: modules are built from
fxkit's own classes (others only when passed in ``custom_objects``), call targets
are ops, registered kinds rebuilt from data, functions marked by `fxkit.wrap`
under their own names, or ``custom_objects``; the forward (and each fused body)
is regenerated from ``graph.json``.

Example:
    >>> fxkit.save(gm, "model.zip")
    >>> gm2 = fxkit.load("model.zip")
"""
import io
import json
import math
import os
import sys
import zipfile

import numpy as np

import fxkit.nn
from fxkit.errors import FxkitError, GraphError
from fxkit.graph import Graph, GraphModule, Node, SourceLocation, fetch_attr
from fxkit.graph.call_targets import kind_of, target_kind
from fxkit.runtime.device import Device
from fxkit.runtime.dtypes import DType, from_name
from fxkit.runtime.nn import Module, Parameter
from fxkit.runtime.alloc_limit import allocation_limit
from fxkit.runtime.op import Op
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor
from fxkit.tracer.renamed_params import current_kwargs
from fxkit.tracer.saved_files import read_saved, read_weights
from fxkit.tracer.wrap import IMPURE_FLAG

FORMAT = "fxkit.graph_module"
VERSION = 3
_READABLE = (1, 2, 3)  # version 1 had no table of call targets; 2 had ops' old parameter names
_MODULE_SLACK = 1 << 20  # what building a module may allocate beyond its weights (small index tables)
_SAFE_BUILTINS = {"builtins.getattr": getattr, "builtins.len": len}


def save(gm, path):
    """Write ``gm`` to ``path``: a directory, or a zip file when ``path`` ends in ``.zip``.

    Args:
        gm: the GraphModule to save.
        path: where to write.

    Raises:
        GraphError: a node holds a constant the format cannot store (named with its node).
    """
    weights = {}
    modules, attrs = {}, {}
    for node in gm.graph.nodes:
        if node.op == "call" and isinstance(node.target, str) and node.target not in modules:
            modules[node.target] = _module_spec(gm, node.target, weights)
    for node in gm.graph.nodes:
        if node.op == "get_attr" and not _under(node.target, modules):
            tensor = _attribute(gm, node.target)
            weights[node.target] = tensor.numpy() if tensor.device.type == "cpu" else tensor.cpu().numpy()
            attrs[node.target] = {"parameter": isinstance(tensor, Parameter), "device": str(tensor.device)}
    encoder = _Encoder(weights)
    nodes = encoder.graph(gm.graph)
    doc = {"format": FORMAT, "version": VERSION, "class_name": type(gm).__name__,
           "training": gm.training, "attributes": attrs, "nodes": nodes, "targets": encoder.targets,
           # NOTE: qualified names may be any string; the npz holds arr_0, arr_1, ... in this order.
           "weights": list(weights)}
    buffer = io.BytesIO()
    # NOTE: a quantized model's weights are mostly integers, which deflate well (int8 values
    # cluster near zero); float weights hardly compress and deflating them is slow, so they are
    # stored. np.load reads either kind of npz.
    integer_bytes = sum(a.nbytes for a in weights.values() if a.dtype.kind in "iub")
    compress = 2 * integer_bytes > sum(a.nbytes for a in weights.values())
    (np.savez_compressed if compress else np.savez)(buffer, *weights.values())
    files = {"graph.json": json.dumps(doc, indent=1).encode(),
             "modules.json": json.dumps(modules, indent=1).encode(),
             "weights.npz": buffer.getvalue(),
             "code.py": gm.code.encode()}
    path = os.fspath(path)
    if path.endswith(".zip"):
        with zipfile.ZipFile(path, "w") as zf:
            for name, data in files.items():
                # Weights hardly compress and deflating them is slow; the text does.
                zf.writestr(name, data, zipfile.ZIP_STORED if name.endswith(".npz") else zipfile.ZIP_DEFLATED)
    else:
        os.makedirs(path, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(path, name), "wb") as f:
                f.write(data)


def load(path, custom_objects=None, *, max_bytes=None):
    """Read a GraphModule written by `save`.

    Args:
        path: the directory or zip file.
        custom_objects: ``{dotted name: class or function}`` for user-defined
            leaf modules and wrapped functions the graph names; nothing outside
            fxkit is imported.
        max_bytes: the most memory the files may make load allocate (inflated
            entries, weights, the modules built). By default 16 times the
            files' size on disk, at least 64 MB: a file cannot make load take
            far more memory than it takes on disk. Pass a larger value to load
            a file you trust that needs more.

    Returns:
        A GraphModule computing what the saved one computed.

    Raises:
        GraphError: the files are not this format or are damaged, or name a class
            or function that is neither fxkit's nor in ``custom_objects``, or a
            call-target kind no imported module registered; the message names
            the file, entry, module or node.
        ResourceLimitError: loading would allocate more than ``max_bytes``.
    """
    path = os.fspath(path)
    files, budget = read_saved(path, max_bytes)
    doc = files["graph.json"]
    if type(doc) is not dict or doc.get("format") != FORMAT or doc.get("version") not in _READABLE:
        found = (doc.get("format"), doc.get("version")) if type(doc) is dict else (type(doc).__name__, None)
        raise GraphError(f"load: {path} is not an fxkit GraphModule of version {' or '.join(map(str, _READABLE))} "
                         f"(format {found[0]!r}, version {found[1]!r})")
    weights = read_weights(files["weights.npz"], doc.get("weights"), budget)
    try:
        return _rebuild(doc, files["modules.json"], weights, dict(custom_objects or {}), budget)
    except FxkitError:
        raise
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        # NOTE: a file of the right format and version whose structure is broken (a missing
        # field, a list where a dict belongs) fails in plain Python; say which file it was.
        raise GraphError(f"load: {path}: graph.json or modules.json is damaged ({type(exc).__name__}: {exc}); "
                         f"save the module again with fxkit.save") from None


def _rebuild(doc, specs, weights, custom_objects, budget):
    """The GraphModule described by a loaded ``graph.json`` (``doc``) and ``modules.json`` (``specs``)."""
    root = {}
    if type(specs) is not dict:
        raise GraphError(f"load: {budget.path}: modules.json must map module names to specs, got "
                         f"{type(specs).__name__}")
    for qualname, spec in specs.items():
        root[qualname] = _build_module(qualname, spec, weights, custom_objects, budget)
    for target, info in doc["attributes"].items():
        tensor = Tensor(weights[target])
        if info["device"] != "cpu":
            tensor = tensor.to(info["device"])
        root[target] = Parameter(tensor) if info["parameter"] else tensor
    decoder = _Decoder(weights, custom_objects, doc.get("targets", []), doc["version"])
    gm = GraphModule(root, decoder.graph(doc["nodes"]), doc["class_name"])
    gm.graph.lint()
    gm.train(doc["training"])
    for qualname, spec in specs.items():
        gm.get_submodule(qualname).train(spec["training"])
    return gm


# -- modules and tensors ---------------------------------------------------------------
def _under(target, modules):
    return any(target.startswith(q + ".") for q in modules)


def _attribute(gm, target):
    value = fetch_attr(gm, target)
    if not isinstance(value, Tensor):
        raise GraphError(f"save: get_attr target {target!r} is a {type(value).__name__}, not a tensor; the data-only "
                         f"format stores tensors only: pass other values as constants in the reading node's args")
    return value


def _class_name(cls):
    if getattr(fxkit.nn, cls.__name__, None) is cls:
        return cls.__name__
    return f"{cls.__module__}.{cls.__qualname__}"


def _module_spec(gm, qualname, weights):
    module = gm.get_submodule(qualname)
    for key, tensor in module.state_dict().items():
        weights[f"{qualname}.{key}"] = tensor.cpu().numpy()
    device = next((str(t.device) for t in module.state_dict().values()), "cpu")
    return {"class": _class_name(type(module)), "kwargs": module._init_kwargs(),
            "training": module.training, "device": device}


def _build_module(qualname, spec, weights, custom_objects, budget):
    name = spec["class"]
    cls = custom_objects.get(name) if type(name) is str else None
    if cls is None and type(name) is str and "." not in name:
        cls = vars(fxkit.nn).get(name)
    if not (isinstance(cls, type) and issubclass(cls, Module)):
        raise GraphError(f"load: module {qualname!r} is a {name}, which is no fxkit.nn layer; pass "
                         f"custom_objects={{{name!r}: TheClass}} to build it (loading imports no user code)")
    if not callable(getattr(cls, "forward", None)):
        raise GraphError(f"load: module {qualname!r} is a bare {cls.__name__}, which has no forward to call; "
                         f"the graph calls it, so the file is damaged")
    kwargs = spec["kwargs"]
    if type(kwargs) is not dict or not all(type(k) is str for k in kwargs):
        raise GraphError(f"load: module {qualname!r}: its constructor arguments must be a dict of names, got "
                         f"{kwargs!r:.80}")
    prefix = qualname + "."
    state = {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}
    # NOTE: a module holds what its saved weights hold; building it may take a copy of them
    # for initialisation, no more, so a spec declaring a huge layer with no weights behind it
    # is refused before its memory is taken.
    allowed = 2 * sum(v.nbytes for v in state.values()) + _MODULE_SLACK
    hint = (f" by its {len(state)} saved weights; the file is damaged or forged, or the module builds large "
            f"buffers it does not save: pass fxkit.load(path, max_bytes=N) if you trust the file")
    if budget.explicit:
        allowed, hint = max(allowed, budget.limit - budget.used), f" by max_bytes={budget.limit}"
    try:
        with allocation_limit(allowed, f"load: {budget.path}: module {qualname!r} ({name})", hint):
            module = cls(**kwargs)
        module.load_state_dict(state)
    except FxkitError:
        raise
    except Exception as exc:  # NOTE: a constructor of any class may fail in any way on bad arguments
        raise GraphError(f"load: module {qualname!r} ({name}) cannot be built from modules.json "
                         f"({type(exc).__name__}: {exc}); the file is damaged") from None
    if spec["device"] != "cpu":
        module.to(spec["device"])
    return module


def _function_name(fn):
    module = getattr(fn, "__module__", None) or "builtins"
    return f"{module}.{fn.__qualname__}"


def _resolve_function(name, custom_objects):
    fn = custom_objects.get(name) or _SAFE_BUILTINS.get(name)
    if fn is None and name.startswith("fxkit."):
        fn = _wrapped_fxkit_function(name)
    if not callable(fn):
        raise GraphError(f"load: the graph calls function {name!r}, which is no function of fxkit wrapped with "
                         f"fxkit.wrap; pass custom_objects={{{name!r}: the_function}} to allow it (loading imports "
                         f"no user code)")
    return fn


def _wrapped_fxkit_function(name):
    """The function of an imported fxkit module defined as ``name`` and marked by `fxkit.wrap`, or None.

    NOTE: walking a dotted name from a module reaches whatever the module imported
    (``fxkit.tracer.serialize.os.system``), and importing a module runs it; so only
    modules already imported are searched, through their ``__dict__`` (a module's
    ``__getattr__``, like ``fxkit.onnx``'s, imports on access), and only a wrapped
    function whose own module and qualified name spell ``name`` is accepted.
    """
    module, _, qualname = name.rpartition(".")
    while module and module not in sys.modules:
        module, _, head = module.rpartition(".")
        qualname = f"{head}.{qualname}"
    fn = sys.modules.get(module)
    for part in qualname.split("."):
        fn = getattr(fn, "__dict__", {}).get(part)
    if fn is None or not hasattr(fn, IMPURE_FLAG) or _function_name(fn) != name:
        return None
    return fn


# -- values as tagged JSON ----------------------------------------------------------------
class _Encoder:
    """Constants and node references as JSON; tensors inside args go to the weights,
    call targets of registered kinds to the ``targets`` table."""

    def __init__(self, weights):
        self.weights = weights
        self.targets = []
        self._target_index = {}  # id(target) -> its row in `targets`
        self.node_name = None

    def graph(self, graph):
        """The JSON entries of ``graph``'s nodes (the saved graph, or a call target's body)."""
        outer = self.node_name
        try:
            return [self.node(n) for n in graph.nodes]
        finally:
            self.node_name = outer

    def node(self, node):
        self.node_name = node.name
        meta = {}
        for key, value in node.meta.items():
            try:
                meta[key] = self.value(value)
            except GraphError:
                continue  # NOTE: meta is advisory; values the format cannot hold are dropped
        return {"name": node.name, "op": node.op, "target": self.target(node.target),
                "args": self.value(node.args), "kwargs": self.value(node.kwargs), "meta": meta}

    def target(self, target):
        if isinstance(target, str):
            return target
        if isinstance(target, Op):
            return {"$op": target.name}
        return self.callable(target)

    def callable(self, fn):
        """A registered kind of call target as its row in the targets table; a function by name."""
        kind = kind_of(fn)
        if kind is None:
            return {"$function": _function_name(fn)}
        index = self._target_index.get(id(fn))
        if index is None:
            index = self._target_index[id(fn)] = len(self.targets)
            self.targets.append(None)  # NOTE: the row is taken first: the data may hold targets of its own
            self.targets[index] = {"kind": kind.name, "data": fn.to_data(self.graph)}
        return {"$target": index}

    def value(self, v):
        t = type(v)
        if t is int and v.bit_length() > 64:
            return {"$int": hex(v)}  # NOTE: JSON readers (and str() past 4,300 digits) stop at big ints
        if v is None or t in (bool, int, str):
            return v
        if t is float:
            return v if math.isfinite(v) else {"$float": repr(v)}
        if t is list or isinstance(v, list):  # a node's ImmutableList
            return [self.value(x) for x in v]
        if t is tuple or t is SourceLocation:
            return {"$tuple" if t is tuple else "$location": [self.value(x) for x in v]}
        if isinstance(v, dict):
            return {"$dict": [[self.value(k), self.value(x)] for k, x in v.items()]}
        if t is slice:
            return {"$slice": [self.value(v.start), self.value(v.stop), self.value(v.step)]}
        if v is Ellipsis:
            return {"$ellipsis": True}
        if t is complex:
            return {"$complex": [v.real, v.imag]}
        if isinstance(v, Node):
            return {"$node": v.name}
        if isinstance(v, DType):
            return {"$dtype": v.name}
        if isinstance(v, Device):
            return {"$device": str(v)}
        if isinstance(v, Op):
            return {"$op": v.name}
        if isinstance(v, np.generic):
            return {"$scalar": [v.dtype.str, v.item()]}
        if isinstance(v, Tensor):
            key = f"__constant__.{self.node_name}.{len(self.weights)}"
            self.weights[key] = v.cpu().numpy()
            return {"$tensor": key}
        if callable(v) and (hasattr(v, "__qualname__") or kind_of(v) is not None):
            return self.callable(v)
        raise GraphError(f"save: node %{self.node_name} holds a {t.__name__} constant ({v!r:.60}), which the "
                         f"data-only format cannot store; keep tensors as attributes (get_attr) and use "
                         f"Python scalars, strings, tuples, lists, dicts, dtypes or devices as constants")


class _Decoder:
    """Graphs back from JSON entries; call targets from the targets table, each built once."""

    def __init__(self, weights, custom_objects, targets, version=VERSION):
        self.weights = weights
        self.old_names = version < 3  # keyword arguments may use ops' names from before issue 15
        self.custom_objects = custom_objects
        self.targets = targets
        self._built = {}  # row -> the rebuilt call target (None while it is being built)
        self.env = {}

    def graph(self, entries):
        """A `Graph` from its nodes' entries (the saved graph, or a call target's body)."""
        outer, self.env = self.env, {}
        graph = Graph()
        try:
            for entry in entries:
                try:
                    self.node(graph, entry)
                except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
                    if isinstance(exc, FxkitError):
                        raise
                    name = entry.get("name") if type(entry) is dict else entry
                    raise GraphError(f"load: graph.json: node {name!r:.60} is damaged ({type(exc).__name__}: "
                                     f"{exc}); save the module again with fxkit.save") from None
        finally:
            self.env = outer
        return graph

    def body(self, entries):
        """A call target's body graph, checked like any graph (the ``load_graph`` of ``from_data``)."""
        graph = self.graph(entries)
        graph.lint()
        return graph

    def node(self, graph, entry):
        op, name = entry["op"], entry["name"]
        args, kwargs = self.value(entry["args"]), self.value(entry["kwargs"])
        if type(args) is not tuple or type(kwargs) is not dict or not all(type(k) is str for k in kwargs):
            # NOTE: a call with such arguments would only fail when the module runs
            raise GraphError(f"load: graph.json: node %{name} has args {args!r:.60} and kwargs {kwargs!r:.60}; a "
                             f"node's args are a tuple and its kwargs a dict of names, so the file is damaged")
        if op == "output":
            node = graph.output(args[0])
        else:
            target = self.target(entry["target"])
            if self.old_names and isinstance(target, Op):
                kwargs = current_kwargs(target.name, kwargs)
            node = graph.create_node(op, target, args, kwargs, name=name)
        if node.name != name:
            raise GraphError(f"load: node {name!r} came back as {node.name!r}; the file is corrupt")
        if node.target is getattr and not (len(args) == 2 and type(args[1]) is str and not args[1].startswith("_")):
            raise GraphError(f"load: node %{name} reads the attribute {args[1:]!r}; traced graphs read only public "
                             f"attributes (dtype, device, fields of results), so fxkit.save did not write this file")
        node.meta.update({k: self.value(v) for k, v in entry["meta"].items()})
        self.env[name] = node

    def target(self, target):
        if isinstance(target, str):
            return target
        if "$op" in target:
            return get_op(target["$op"])
        if "$target" in target:
            return self.call_target(target["$target"])
        return _resolve_function(target["$function"], self.custom_objects)

    def call_target(self, row):
        """The call target of row ``row`` of the targets table, rebuilt by its registered kind."""
        if row in self._built:
            if self._built[row] is None:
                raise GraphError(f"load: call target #{row} of graph.json contains itself; the file is corrupt")
            return self._built[row]
        if type(row) is not int or not 0 <= row < len(self.targets):
            raise GraphError(f"load: graph.json refers to call target #{row!r}, which its targets table "
                             f"({len(self.targets)} rows) lacks; the file is corrupt")
        entry = self.targets[row]
        kind = target_kind(entry["kind"])
        self._built[row] = None
        self._built[row] = kind.cls.from_data(entry["data"], self.body)
        return self._built[row]

    def value(self, v):
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if not isinstance(v, dict):
            return v
        (tag, body), = v.items()
        if tag == "$node":
            node = self.env.get(body)
            if node is None:
                raise GraphError(f"load: graph.json reads %{body} where no such node is defined yet; the file is corrupt")
            return node
        if tag == "$tuple":
            return tuple(self.value(x) for x in body)
        if tag == "$location":
            return SourceLocation(*body)
        if tag == "$dict":
            return {self.value(k): self.value(x) for k, x in body}
        if tag == "$slice":
            return slice(*(self.value(x) for x in body))
        if tag == "$float":
            return float(body)
        if tag == "$int":
            if type(body) is not str or len(body) > 100_000:
                raise GraphError(f"load: graph.json holds a damaged $int ({body!r:.40})")
            return int(body, 16)
        if tag == "$ellipsis":
            return Ellipsis
        if tag == "$complex":
            return complex(*body)
        if tag == "$dtype":
            return from_name(body)
        if tag == "$device":
            return Device(body)
        if tag == "$op":
            return get_op(body)
        if tag == "$scalar":
            dtype = np.dtype(body[0]) if type(body[0]) is str and len(body[0]) <= 8 else None
            if dtype is None or dtype.kind not in "biufc" or type(body[1]) not in (bool, int, float):
                raise GraphError(f"load: graph.json holds a numpy scalar of {body[0]!r:.40}; fxkit.save writes "
                                 f"only numbers of numeric dtypes, so the file is damaged")
            return dtype.type(body[1])
        if tag == "$tensor":
            return Tensor(self.weights[body])
        if tag == "$function":
            return _resolve_function(body, self.custom_objects)
        if tag == "$target":
            return self.call_target(body)
        raise GraphError(f"load: unknown value tag {tag!r} in graph.json")
