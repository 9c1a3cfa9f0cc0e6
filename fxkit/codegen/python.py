"""Graph nodes -> a Python ``forward`` function, built as an `ast` tree.

Each node becomes one statement named after the node::

    def forward(self, x):
        param = self.param
        add = x + param
        x = param = None          # values are freed after their last use
        linear = self.linear(add)
        add = None
        clamp = ops.clamp(linear, min=0.0, max=1.0)
        linear = None
        return clamp

Ops that have a Python operator (the registry's operator table) are written
as that operator; other ops as ``ops.<name>(...)``; submodules as attribute
chains on ``self``; wrapped functions and non-literal constants as globals
bound in the returned globals dict. Identifiers come from a `Namespace` and
constants are AST nodes, so no name or string can inject code.

This module reads only ``op``, ``target``, ``args``, ``kwargs`` and ``name``
of the nodes it is given: it knows nothing of `fxkit.graph`.
"""
import ast
import importlib
import math
import operator
import types

import fxkit.ops as _ops_module
from fxkit.codegen.namespace import Namespace, is_plain_identifier
from fxkit.codegen.signature import Signature
from fxkit.errors import GraphError
from fxkit.runtime.device import Device
from fxkit.runtime.dtypes import DType
from fxkit.runtime.op import Op
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor_methods import OPERATORS, UNARY_OPERATORS

_LOAD = ast.Load()
_STORE = ast.Store()
_BINARY = {"__add__": ast.Add, "__sub__": ast.Sub, "__mul__": ast.Mult, "__truediv__": ast.Div,
           "__floordiv__": ast.FloorDiv, "__mod__": ast.Mod, "__pow__": ast.Pow,
           "__matmul__": ast.MatMult, "__and__": ast.BitAnd, "__or__": ast.BitOr, "__xor__": ast.BitXor,
           "__lshift__": ast.LShift, "__rshift__": ast.RShift}
_COMPARE = {"__eq__": ast.Eq, "__ne__": ast.NotEq, "__lt__": ast.Lt, "__le__": ast.LtE,
            "__gt__": ast.Gt, "__ge__": ast.GtE}
_UNARY = {"__neg__": ast.USub, "__invert__": ast.Invert}  # abs() is a builtin a node may shadow
# operator.imul(a, b) and its kin, written ``a *= b`` as torch.fx writes them: the name ``a`` is rebound
# (a call would leave it unchanged for immutable values such as ints).
_AUGMENTED = {getattr(operator, "i" + dunder.strip("_")): symbol for dunder, symbol in _BINARY.items()}

# Op -> how its two-argument (or one-argument) call is written as an operator.
_OPERATOR_FORMS = {}
for _dunder, (_name, _reflected) in OPERATORS.items():
    if _reflected:
        continue
    if _dunder in _BINARY:
        _OPERATOR_FORMS[get_op(_name)] = ("binary", _BINARY[_dunder]())
    elif _dunder in _COMPARE:
        _OPERATOR_FORMS[get_op(_name)] = ("compare", _COMPARE[_dunder]())
    elif _dunder == "__getitem__":
        _OPERATOR_FORMS[get_op(_name)] = ("subscript", None)
for _dunder, _name in UNARY_OPERATORS.items():
    if _dunder in _UNARY:
        _OPERATOR_FORMS[get_op(_name)] = ("unary", _UNARY[_dunder]())

_NUMBERS = (int, float)
# NOTE: what source text cannot hold: ints past CPython's 4,300-digit str limit (about 14,000
# bits), and containers nested deeper than ast.unparse and compile() recurse. Such constants
# are bound as globals of the generated code instead of written out.
_MAX_LITERAL_BITS = 13_000
_MAX_DEPTH = 64
_CONTAINERS = frozenset({tuple, list, dict, slice})
_CONTAINER_TYPES = (tuple, list, dict, slice)  # with subclasses: namedtuples, a node's immutable lists
_LITERALS = frozenset({bool, str, bytes, type(None), type(Ellipsis)})


class PythonCode:
    """A generated ``forward``: its AST, the globals it needs, its source on demand.

    Attributes:
        tree: the ``ast.Module`` holding ``def forward(...)``.
        globals: the globals the function runs in (``ops``, ``fxkit``, wrapped
            functions and constants).
        statement_nodes: for each statement of the body, the node it computes
            (None for the lines freeing values).
    """

    __slots__ = ("tree", "globals", "statement_nodes", "_src", "_one_line_each")

    def __init__(self, tree, globals_dict, statement_nodes, one_line_each):
        self.tree = tree
        self.globals = globals_dict
        self.statement_nodes = statement_nodes
        self._src = None
        # NOTE: when every statement renders on one line, the statements' line
        # numbers already match `src`, and the tree compiles without the source.
        self._one_line_each = one_line_each

    @property
    def src(self):
        """The source text, rendered by ``ast.unparse`` on first use."""
        if self._src is None:
            self._src = ast.unparse(self.tree) + "\n"
        return self._src

    def compile(self, filename):
        """Compile to a code object whose line numbers match `src`."""
        if self._one_line_each:
            return compile(self.tree, filename, "exec")
        return compile(self.src, filename, "exec")

    def __iter__(self):
        # ``source, globals_dict = generate_forward(...)``
        return iter((self.src, self.globals))


def generate_forward(nodes, root_name="self"):
    """Generate ``def forward(<root_name>, <placeholders>)`` from ``nodes``.

    Args:
        nodes: the nodes in execution order (any objects with ``op``, ``target``,
            ``args``, ``kwargs`` and ``name``).
        root_name: the name of the module parameter that attributes hang off.

    Returns:
        A `PythonCode`; unpacks as ``(source, globals_dict)``.

    Raises:
        GraphError: a placeholder without a default follows one with a default.
    """
    if not is_plain_identifier(root_name):
        raise GraphError(f"generate_forward: the root name {root_name!r} is no valid identifier")
    return _Emitter(list(nodes), root_name).run()


class _Emitter:
    """One code generation: names, globals and the statements built so far.

    NOTE: loads of a variable, the ``self.layer1`` prefixes of attribute chains
    and ``None`` are single AST nodes shared by every statement using them
    (they carry the position of their first use), so far fewer objects are
    built; a statement's own nodes (the call, operator, assignment) always
    carry the statement's line, which is what tracebacks report.
    """

    def __init__(self, nodes, root_name):
        self.nodes = nodes
        self.root = root_name
        self.ns = Namespace(reserved=(root_name,))
        # NOTE: generated code spells dtypes and devices through the package (``fxkit.float32``,
        # ``fxkit.device("cpu")``), so it runs with the package in its globals. The package is looked
        # up here, when code is generated and it is fully imported, rather than imported by this module,
        # which would run back up the layers.
        self.globals = {"fxkit": importlib.import_module("fxkit"), "ops": _ops_module}
        self.global_names = {}
        self.names = {}
        self.depth = 0  # containers entered by expr()
        for node in nodes:
            self.names[id(node)] = self.ns.create_name(node.name)
        self.one_line_each = True
        self.pos = {"lineno": 1, "col_offset": 0}
        self.loads = {}
        self.chains = {}
        self.none = ast.Constant(None, lineno=1, col_offset=0)

    # -- the function ------------------------------------------------------------
    def run(self):
        frees = self._frees_after()
        variadic = Signature(ast.arg(self.root, lineno=1, col_offset=0))
        body = []
        made = []
        line = 1
        names = self.names
        for node in self.nodes:
            op = node.op
            if op == "placeholder":
                variadic.place(node, ast.arg(names[id(node)], lineno=1, col_offset=0),
                               self.expr(node.args[0]) if node.args else None)
                continue
            line += 1
            self.pos = pos = {"lineno": line, "col_offset": 0}
            augmented = self._augmented(node) if op == "call" else None
            if augmented is not None:
                body.append(augmented)
                made.append(node)
                line += 1
                self.pos = pos = {"lineno": line, "col_offset": 0}
                value = ast.Name(names[id(node.args[0])], _LOAD, **pos)
            elif op == "call":
                value = self.call(node.target, node.args, node.kwargs)
            elif op == "get_attr":
                value = self.attribute_chain(node.target)
            elif op == "output":
                body.append(ast.Return(self.expr(node.args[0]) if node.args else self.none, **pos))
                made.append(node)
                continue
            else:
                raise GraphError(f"node %{node.name}: unknown opcode {op!r}; expected placeholder, get_attr, "
                                 f"call or output")
            body.append(ast.Assign([ast.Name(names[id(node)], _STORE, **pos)], value, **pos))
            made.append(node)
            dead = frees.get(id(node))
            if dead:
                line += 1
                pos = {"lineno": line, "col_offset": 0}
                body.append(ast.Assign([ast.Name(n, _STORE, **pos) for n in dead], self.none, **pos))
                made.append(None)
        if not body:
            body.append(ast.Pass(lineno=2, col_offset=0))
        signature = variadic.arguments()
        function = ast.FunctionDef("forward", signature, body, [], None, lineno=1, col_offset=0)
        return PythonCode(ast.Module([function], []), self.globals, made, self.one_line_each)

    def _augmented(self, node):
        """``a *= b`` for a call of operator.imul (or kin) on a node and a value, else None."""
        target, args = node.target, node.args
        if type(target) is not type(operator.imul) or node.kwargs or len(args) != 2 \
                or id(args[0]) not in self.names:
            return None
        symbol = _AUGMENTED.get(target)
        if symbol is None:
            return None
        return ast.AugAssign(ast.Name(self.names[id(args[0])], _STORE, **self.pos), symbol(), self.expr(args[1]),
                             **self.pos)

    def _frees_after(self):
        """id(node) -> names whose last use is that node (freed right after it)."""
        names = self.names
        seen = set()
        frees = {}
        for node in reversed(self.nodes):
            dead = []
            for used in _input_ids(node, names):
                if used not in seen:
                    seen.add(used)
                    dead.append(names[used])
            key = id(node)
            if key not in seen and node.op not in ("placeholder", "output"):
                dead.append(names[key])  # never used: freed right after it is made
            if dead and node.op != "output":
                frees[key] = dead
        return frees

    # -- calls -------------------------------------------------------------------
    def call(self, target, args, kwargs):
        if type(target) is str:
            func = self.attribute_chain(target)
        elif isinstance(target, Op):
            form = _OPERATOR_FORMS.get(target)
            if form is not None and not kwargs:
                written = self.operator(form, args)
                if written is not None:
                    return written
            func = self.op_reference(target)
        elif target is getattr:
            if len(args) == 2 and not kwargs and type(args[1]) is str and _plain(args[1]):
                return ast.Attribute(self.expr(args[0]), args[1], _LOAD, **self.pos)
            func = self.load("getattr")
        else:
            func = self.global_name(target, getattr(target, "__name__", "fn"))
        if type(func) is ast.Attribute and func.lineno != self.pos["lineno"]:
            # NOTE: CPython reports a call of an attribute (``ops.relu(x)``, ``self.fc(x)``) at the
            # attribute's line; a cached one made for an earlier statement would name that line, and
            # errors and `Specialize` map lines back to nodes.
            func = ast.Attribute(func.value, func.attr, _LOAD, **self.pos)
        expr = self.expr
        return ast.Call(func, [expr(a) for a in args], self.keywords(kwargs) if kwargs else [], **self.pos)

    def operator(self, form, args):
        kind, symbol = form
        if kind == "unary":
            return ast.UnaryOp(symbol, self.expr(args[0]), **self.pos) if len(args) == 1 else None
        if len(args) != 2:
            return None
        if kind == "binary":
            return ast.BinOp(self.expr(args[0]), symbol, self.expr(args[1]), **self.pos)
        if kind == "compare":
            return ast.Compare(self.expr(args[0]), [symbol], [self.expr(args[1])], **self.pos)
        return ast.Subscript(self.expr(args[0]), self.index(args[1]), _LOAD, **self.pos)

    def keywords(self, kwargs):
        written, odd = [], {}
        for key, value in kwargs.items():
            if type(key) is str and _plain(key) and key != "__debug__":  # ``f(__debug__=1)`` is no syntax
                written.append(ast.keyword(key, self.expr(value), **self.pos))
            else:
                odd[key] = value
        if odd:
            # Keys that are no identifiers still arrive by name: ``f(**{'a b': 1})``.
            written.append(ast.keyword(None, self.expr(odd), **self.pos))
        return written

    def op_reference(self, op):
        if getattr(_ops_module, op.name, None) is op and _plain(op.name):
            return self.shared(("ops", op.name), lambda: ast.Attribute(self.load("ops"), op.name, _LOAD,
                                                                       **self.pos))
        return self.global_name(op, op.name)

    def attribute_chain(self, qualname):
        """``self.layer1`` then ``getattr(..., '0')`` for parts that are no plain identifiers."""
        chain = self.chains.get(qualname)
        if chain is not None:
            return chain
        if "." in qualname:
            prefix, _, part = qualname.rpartition(".")
            value = self.attribute_chain(prefix)
        else:
            part, value = qualname, self.load(self.root)
        if _plain(part):
            chain = ast.Attribute(value, part, _LOAD, **self.pos)
        else:
            chain = ast.Call(self.load("getattr"), [value, self.constant(part)], [], **self.pos)
        self.chains[qualname] = chain
        return chain

    def global_name(self, value, candidate):
        known = self.global_names.get(id(value))
        if known is None:
            known = self.ns.create_name(str(candidate))
            self.global_names[id(value)] = known
            self.globals[known] = value
        return self.load(known)

    def named_float(self, value, candidate):
        key = ("float", candidate)
        name = self.global_names.get(key)
        if name is None:
            name = self.global_names[key] = self.ns.create_name(candidate)
            self.globals[name] = value
        return self.load(name)

    def load(self, name):
        node = self.loads.get(name)
        if node is None:
            node = self.loads[name] = ast.Name(name, _LOAD, **self.pos)
        return node

    def shared(self, key, make):
        node = self.chains.get(key)
        if node is None:
            node = self.chains[key] = make()
        return node

    # -- values ------------------------------------------------------------------
    def expr(self, value):
        name = self.names.get(id(value))
        if name is not None:
            return self.load(name)
        kind = type(value)
        if kind is int and value.bit_length() > _MAX_LITERAL_BITS:
            return self.global_name(value, "_int")
        if kind in _NUMBERS or kind in _LITERALS:
            return self.constant(value)
        if kind in _CONTAINERS or isinstance(value, (list, dict)):  # node arguments hold list/dict subclasses
            self.depth += 1
            try:
                if self.depth > _MAX_DEPTH:
                    return self.deep_constant(value)
                return self.container(kind, value)
            finally:
                self.depth -= 1
        return self.other(kind, value)

    def deep_constant(self, value):
        """A container nested past `_MAX_DEPTH`, bound as a global (it may hold no graph values)."""
        stack = [value]
        while stack:
            item = stack.pop()
            if id(item) in self.names:
                raise GraphError(f"a node argument nests %{self.names[id(item)]} more than {_MAX_DEPTH} "
                                 f"containers deep, which generated code cannot spell; flatten the argument")
            kind = type(item)
            if isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())
            elif kind is slice:
                stack.extend((item.start, item.stop, item.step))
            elif kind in _CONTAINERS or isinstance(item, (tuple, list)):
                stack.extend(item)
        return self.global_name(value, "_nested")

    def container(self, kind, value):
        if kind is tuple:
            return ast.Tuple([self.expr(v) for v in value], _LOAD, **self.pos)
        if isinstance(value, list):  # node arguments hold list subclasses (fxkit.graph.immutable)
            return ast.List([self.expr(v) for v in value], _LOAD, **self.pos)
        if isinstance(value, dict):
            return ast.Dict([self.expr(k) for k in value], [self.expr(v) for v in value.values()], **self.pos)
        if kind is slice:
            parts = [self.expr(value.start), self.expr(value.stop), self.expr(value.step)]
            return ast.Call(self.load("slice"), parts, [], **self.pos)
        raise AssertionError(f"container(): {kind.__name__} is no container kind")

    def other(self, kind, value):
        if kind is DType and getattr(self.globals["fxkit"], value.name, None) is value:
            return self.shared(("dtype", value.name),
                               lambda: ast.Attribute(self.load("fxkit"), value.name, _LOAD, **self.pos))
        if kind is Device:
            device = ast.Attribute(self.load("fxkit"), "device", _LOAD, **self.pos)
            return ast.Call(device, [self.constant(str(value))], [], **self.pos)
        if kind is Op:
            return self.op_reference(value)
        if isinstance(value, tuple) and hasattr(kind, "_fields"):
            elements = [self.expr(v) for v in value]
            return ast.Call(self.global_name(kind, kind.__name__), elements, [], **self.pos)
        if kind is complex and value.real == 0 and math.copysign(1, value.real) > 0 and value.imag >= 0:
            return self.constant(value)
        if hasattr(value, "users") and hasattr(value, "op"):
            # A node, but not one of ours: binding it as a constant would compute garbage.
            raise GraphError(f"a node reads %{value.name}, which is not in the graph (erased, or from "
                             f"another graph); graph.lint() names the reader")
        return self.global_name(value, _constant_name(value))

    def index(self, value):
        """A subscript: slices and tuples of them are written ``x[1:, ::2]``."""
        if type(value) is slice:
            return self.slice(value)
        if type(value) is tuple:
            return ast.Tuple([self.slice(v) if type(v) is slice else self.expr(v) for v in value], _LOAD,
                             **self.pos)
        return self.expr(value)

    def slice(self, value):
        parts = [None if v is None else self.expr(v) for v in (value.start, value.stop, value.step)]
        return ast.Slice(*parts, **self.pos)

    def constant(self, value):
        kind = type(value)
        if value is None:
            return self.none
        if kind is float and not math.isfinite(value):
            # ast.unparse spells these 1e309 and (1e309-1e309); globals read better.
            if math.isnan(value):
                return self.named_float(math.nan, "nan")
            infinity = self.named_float(math.inf, "inf")
            return infinity if value > 0 else ast.UnaryOp(ast.USub(), infinity, **self.pos)
        if kind in _NUMBERS and (value < 0 or (kind is float and math.copysign(1, value) < 0)):
            # ``-1`` as a negative literal: ast.unparse writes Constant(-1) ** 2 as ``-1 ** 2``.
            return ast.UnaryOp(ast.USub(), ast.Constant(-value, **self.pos), **self.pos)
        if kind is str and "\n" in value:
            # ast.unparse writes such strings as multi-line literals: lines shift.
            self.one_line_each = False
        return ast.Constant(value, **self.pos)


_PLAIN = {}


def _plain(name):
    """`is_plain_identifier`, memoised: attribute and keyword names repeat a lot."""
    flag = _PLAIN.get(name)
    if flag is None:
        if len(_PLAIN) > 50_000:
            _PLAIN.clear()
        flag = _PLAIN[name] = is_plain_identifier(name)
    return flag


def _constant_name(value):
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        return value.__name__
    return "_" + type(value).__name__.lower()


def _input_ids(node, names):
    """ids of the nodes among ``names`` that ``node`` reads, in argument order."""
    found = []
    for value in node.args:
        if id(value) in names:
            found.append(id(value))
        elif isinstance(value, _CONTAINER_TYPES):
            _nested_ids(value, names, found)
    kwargs = node.kwargs
    if kwargs:
        _nested_ids(kwargs, names, found)
    return found


def _nested_ids(value, names, found):
    if isinstance(value, dict):
        value = value.values()
    elif type(value) is slice:
        value = (value.start, value.stop, value.step)
    for item in value:
        if id(item) in names:
            found.append(id(item))
        elif isinstance(item, _CONTAINER_TYPES):
            _nested_ids(item, names, found)
