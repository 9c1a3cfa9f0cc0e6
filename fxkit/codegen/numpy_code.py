"""Graph nodes -> straight-line Python over raw arrays, for the numpy (and cupy) backends.

The nodes are a specialised graph: every value's dtype and shape is known
(``meta["tensor_meta"]``), so the generated function does no dispatch at run
time. Each registry op is either one ufunc call (writing into a dead buffer
when the memory plan gives one) or a call of the op's implementation on raw
arrays; the dtype promotion eager mode performs per call is written out as
``astype`` casts where it changes anything; parameters and constants are
globals bound to their arrays::

    def forward(input, hx, cx):
        linear = linear_impl(np, input, weight_ih, bias_ih)
        ...
        sigmoid = sigmoid_impl(np, getitem)
        mul = multiply(sigmoid_1, cx)
        mul_1 = multiply(sigmoid, tanh, out=getitem)
        add_1 = add(mul, mul_1, out=mul)
        ...
        return (mul_2, add_1)

Calls of anything but a registry op (a wrapped function) run on Tensors
wrapped around the arrays, and give raw arrays back.

Built on `fxkit.codegen.python`'s emitter, so identifiers come from the same
`Namespace` and constants are AST nodes: nothing in a graph can inject code.
Like that module, this one reads nodes (``op``, ``target``, ``args``,
``kwargs``, ``name``, ``meta``) without importing `fxkit.graph`.
"""
import ast

import numpy as np

from fxkit.codegen.namespace import is_plain_identifier
from fxkit.codegen.promotion import input_casts
# NOTE: the Python emitter's names, globals and constant emission are reused as they are;
# only how statements are formed differs here.
from fxkit.codegen.python import PythonCode, _Emitter
from fxkit.errors import LoweringError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.device import device_of_array
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import Op
from fxkit.runtime.ops.scalar_bounds import maximum_of, minimum_of
from fxkit.runtime.tensor import Tensor

_LOAD = ast.Load()
_STORE = ast.Store()
_MODULE_NAMES = {"numpy": "np", "cupy": "cp"}
# Ufunc forms of one array and a number run through these (see `fxkit.runtime.ops.scalar_bounds`).
_AGAINST_A_NUMBER = {"maximum": maximum_of, "minimum": minimum_of}


def generate_array_code(nodes, attributes, ufuncs=None, buffers=None, xp=np, calls=None):
    """Generate ``def forward(<placeholders>)`` computing ``nodes`` on raw arrays.

    Args:
        nodes: the graph's nodes in order, each ``meta["tensor_meta"]`` filled.
        attributes: ``{qualified name: value}`` for every ``get_attr`` target
            (raw arrays) and every submodule a ``call`` names.
        ufuncs: ``{node: (ufunc name, inputs, extra)}`` for the nodes run as one
            ufunc of ``xp`` (see `fxkit.backends.memory_plan.UfuncForm`).
        buffers: ``{node: holder node}``: ``node`` (a ufunc node) writes into
            ``holder``'s array.
        xp: the array module the code calls (numpy or cupy).
        calls: ``{node: function}`` for nodes run as ``function(*args)`` on raw
            arrays (a backend's compiled kernels), positional arguments only; one
            that ``buffers`` gives a holder is called ``function(*args, out=holder)``.

    Returns:
        ``(code, line_nodes)``: a `PythonCode` and ``{line number: node}`` of its statements.
    """
    return _ArrayEmitter(list(nodes), attributes, ufuncs or {}, buffers or {}, xp, calls or {}).generate()


class _ArrayEmitter(_Emitter):
    def __init__(self, nodes, attributes, ufuncs, buffers, xp, calls):
        super().__init__(nodes, root_name="self")
        self.calls = calls
        self.attributes = attributes
        self.ufuncs = ufuncs
        self.buffers = buffers
        self.xp = xp
        self.module_name = _MODULE_NAMES.get(xp.__name__, "xp")

    def generate(self):
        names = self.names
        params, defaults, body, made, line_nodes = [], [], [], [], {}
        frees = self._frees()
        line = 1
        for node in self.nodes:
            name = names[id(node)]
            if node.op == "placeholder":
                params.append(ast.arg(name, lineno=1, col_offset=0))
                if node.args:
                    defaults.append(self.expr(node.args[0]))
                continue
            if node.op == "get_attr":
                self.globals[name] = self._attribute(node.target)
                continue
            line += 1
            self.pos = pos = {"lineno": line, "col_offset": 0}
            line_nodes[line] = node
            made.append(node)
            if node.op == "output":
                body.append(ast.Return(self.expr(node.args[0]) if node.args else self.none, **pos))
                continue
            body.append(ast.Assign([ast.Name(name, _STORE, **pos)], self.statement(node), **pos))
            dead = frees.get(node)
            if dead:
                line += 1
                pos = {"lineno": line, "col_offset": 0}
                body.append(ast.Assign([ast.Name(n, _STORE, **pos) for n in dead], self.none, **pos))
                made.append(None)
        signature = ast.arguments(posonlyargs=[], args=params, vararg=None, kwonlyargs=[], kw_defaults=[],
                                  kwarg=None, defaults=defaults)
        function = ast.FunctionDef("forward", signature, body or [ast.Pass(lineno=2, col_offset=0)], [], None,
                                   lineno=1, col_offset=0)
        code = PythonCode(ast.Module([function], []), self.globals, made, self.one_line_each)
        return code, line_nodes

    def _attribute(self, qualname):
        try:
            return self.attributes[qualname]
        except KeyError:
            raise LoweringError(f"generated code reads the attribute {qualname!r}, which the module does not "
                                f"provide") from None

    def _frees(self):
        """node -> local names whose last read (as input or ``out=`` buffer) is that node."""
        local = {id(n): self.names[id(n)] for n in self.nodes if n.op == "call"}
        seen = set()
        frees = {}
        for node in reversed(self.nodes):
            reads = node.all_input_nodes
            holder = self.buffers.get(node)
            if holder is not None:
                reads = reads + [holder]
            dead = []
            for used in reads:
                key = id(used)
                if key in local and key not in seen:
                    seen.add(key)
                    if used is not holder:  # its array lives on as this node's value
                        dead.append(local[key])
            if node.op == "call" and id(node) not in seen:
                dead.append(local[id(node)])  # never read: freed right after it is made
                seen.add(id(node))
            if dead and node.op != "output":
                frees[node] = dead
        return frees

    # -- statements ----------------------------------------------------------------
    def statement(self, node):
        target = node.target
        direct = self.calls.get(node)
        if direct is not None:
            function = self.global_name(direct, direct.__name__)
            holder = self.buffers.get(node)
            out = [ast.keyword("out", self.load(self.names[id(holder)]), **self.pos)] if holder is not None else []
            return ast.Call(function, [self.expr(a) for a in node.args], out, **self.pos)
        if target is getattr and _is_field(node.args):
            # A field of an op's namedtuple result (``x.max(1).values``): the raw result has it too.
            return ast.Attribute(self.expr(node.args[0]), node.args[1], _LOAD, **self.pos)
        if not isinstance(target, Op):
            function = self._attribute(target) if type(target) is str else target
            return self.on_tensors(function, node)
        arg_metas = [_meta(a) for a in node.args]
        casts = input_casts(target, arg_metas)
        args = [self.cast(self.expr(a), casts.get(i)) for i, a in enumerate(node.args)]
        form = self.ufuncs.get(node)
        if form is not None:
            ufunc, inputs, extra = form
            call_args = args[:inputs] + [self.expr(e) for e in extra]
            holder = self.buffers.get(node)
            out = [ast.keyword("out", self.load(self.names[id(holder)]), **self.pos)] if holder is not None else []
            bounded = _AGAINST_A_NUMBER.get(ufunc) if inputs == 1 and extra else None
            if bounded is not None:  # relu: numpy's loop against a broadcast number is not vectorised
                module = self.global_name(self.xp, self.module_name)
                return ast.Call(self.global_name(bounded, bounded.__name__), [module] + call_args, out, **self.pos)
            function = self.global_name(getattr(self.xp, ufunc), f"{self.module_name}_{ufunc}")
            return ast.Call(function, call_args, out, **self.pos)
        kwargs = dict(node.kwargs)
        if "dtype" in kwargs:
            kwargs["dtype"] = _dt.as_dtype(kwargs["dtype"])
        if target.factory:
            kwargs.pop("device", None)  # the array module chooses the device; the specialisation fixed it
        impl = self.global_name(target.impl, f"{target.name}_impl")
        call = ast.Call(impl, [self.global_name(self.xp, self.module_name)] + args,
                        self.keywords(kwargs) if kwargs else [], **self.pos)
        if _has_zero_dim(node.meta.get("tensor_meta")):
            # numpy gives scalars, not 0-d arrays, from whole-array reductions; eager wraps them.
            return ast.Call(self.global_name(as_arrays, "as_arrays"), [call], [], **self.pos)
        return call

    def cast(self, expr, dtype):
        if dtype is None:
            return expr
        astype = ast.Attribute(expr, "astype", _LOAD, **self.pos)
        return ast.Call(astype, [self.global_name(dtype.np, dtype.name)], [], **self.pos)

    def on_tensors(self, function, node):
        name = getattr(function, "__name__", None) or type(function).__name__.lower()
        args = [self.global_name(function, name)] + [self.expr(a) for a in node.args]
        keywords = self.keywords(node.kwargs) if node.kwargs else []
        return ast.Call(self.global_name(call_on_tensors, "call_on_tensors"), args, keywords, **self.pos)


def _meta(value):
    """A node argument as `input_casts` reads it: a node's `TensorMeta`, or the constant."""
    meta = getattr(value, "meta", None)
    if meta is not None and hasattr(value, "op"):
        return meta.get("tensor_meta")
    return value


def _is_field(args):
    """True for ``getattr`` arguments naming a field of a namedtuple value."""
    if len(args) != 2 or type(args[1]) is not str or not is_plain_identifier(args[1]):
        return False
    fields = getattr(_meta(args[0]), "_fields", ())
    return args[1] in fields


def _has_zero_dim(meta):
    if isinstance(meta, TensorMeta):
        return not meta.shape
    if isinstance(meta, (tuple, list)):
        return any(_has_zero_dim(m) for m in meta)
    return False


def as_arrays(value):
    """``value`` with numpy scalars turned into 0-d arrays (tuples, namedtuples, lists kept)."""
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, tuple):
        items = [as_arrays(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [as_arrays(v) for v in value]
    return value


def call_on_tensors(function, *args, **kwargs):
    """Call ``function`` with Tensors around the array arguments; raw arrays out."""
    result = function(*_to_tensors(args), **{k: _to_tensors(v) for k, v in kwargs.items()})
    return _to_arrays(result)


def _to_tensors(value):
    if isinstance(value, np.ndarray) or hasattr(value, "__cuda_array_interface__"):
        return Tensor._make(value, device_of_array(value))
    if isinstance(value, tuple):
        items = [_to_tensors(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [_to_tensors(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_tensors(v) for k, v in value.items()}
    return value


def _to_arrays(value):
    if isinstance(value, Tensor):
        return value._data
    if isinstance(value, tuple):
        items = [_to_arrays(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [_to_arrays(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_arrays(v) for k, v in value.items()}
    return value
