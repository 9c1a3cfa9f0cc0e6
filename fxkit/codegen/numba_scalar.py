"""Scalar numba code from the registry's kernel templates, one statement a graph node.

Every elementwise op's ``template`` (a Python expression over ``a, b, c``
and the op's defaulted keyword names, calling the intrinsics of
``fxkit.runtime.ops.intrinsics``) is parsed and rewritten as an ``ast``:
inputs are cast to the dtype the op computes in (its PyTorch promotion, as
eager's ``Op.run`` casts arrays), constants are typed in that dtype (numba
would otherwise widen ``float32 * 0.5`` to float64), intrinsics become numba
calls (``exp`` of float32 the vectorisable ``exp32``, ``where`` a conditional
expression, ``maximum`` numpy's NaN-propagating one) and the result is cast
to the node's dtype::

    %gelu = call[gelu](%add)
    ->  gelu = np.float32(np.float32(0.5) * add * (np.float32(1.0) + erf32(add * np.float32(0.7071067811865476))))

`ScalarEmitter` writes these statements into a kernel's loop body; the loop
nests around them are `fxkit.codegen.numba_kernel`'s and
`fxkit.codegen.numba_reduction`'s.
"""
import ast

# NOTE: binding a template to a call is shared with the CUDA generator (fxkit.codegen.template_expr);
# value_metas is re-exported for numba_kernel and numba_reduction.
from fxkit.codegen.template_expr import compute_dtype, is_node, template_names, value_metas  # noqa: F401
from fxkit.errors import LoweringError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import Op

_LOAD = ast.Load()
_MATH = {"log": "log", "log1p": "log1p", "expm1": "expm1", "sqrt": "sqrt", "sin": "sin", "cos": "cos",
         "exp": "exp", "tanh": "tanh", "erf": "erf"}
_FLOAT32_FAST = {"exp": "exp32", "tanh": "tanh32", "erf": "erf32"}
_ROUNDING = ("floor", "ceil", "rint", "trunc")
_LOGICAL = {"logical_and": ast.BitAnd, "logical_or": ast.BitOr, "logical_xor": ast.BitXor}
_OPERATORS = {"floor_divide": ast.FloorDiv, "remainder": ast.Mod, "pow": ast.Pow}


def np_attr(name):
    return ast.Attribute(ast.Name("np", _LOAD), name, _LOAD)


def cast(expr, dtype):
    """``np.<dtype>(expr)``: numba's scalar conversion (truncating, like numpy's astype)."""
    return ast.Call(np_attr("bool_" if dtype.name == "bool" else dtype.name), [expr], [])


def typed_constant(value, dtype):
    """A Python number as a literal of ``dtype`` (None: left as Python writes it)."""
    if dtype is None or type(value) not in (int, float, bool):
        return ast.Constant(value)
    if dtype.name == "bool":
        return ast.Constant(bool(value))
    if not dtype.is_floating_point and not (type(value) is float and value != int(value)):
        return cast(ast.Constant(int(value)), dtype)
    number = float(value)
    if number != number:
        literal = np_attr("nan")
    elif number in (float("inf"), float("-inf")):
        literal = np_attr("inf") if number > 0 else ast.UnaryOp(ast.USub(), np_attr("inf"))
    else:
        literal = ast.Constant(number)
    return cast(literal, dtype) if dtype.is_floating_point else literal


class _Template(ast.NodeTransformer):
    """Rewrite a template's AST into numba scalar code over given input expressions."""

    def __init__(self, names, dtype):
        self.names = names      # template name -> ast expression
        self.dtype = dtype      # the compute dtype, or None (inputs as they are)

    def visit_Name(self, node):
        return self.names[node.id]

    def visit_Constant(self, node):
        return typed_constant(node.value, self.dtype)

    def visit_Call(self, node):
        args = [self.visit(a) for a in node.args]
        name = node.func.id
        dtype = self.dtype
        floating = dtype is not None and dtype.is_floating_point
        if name in _MATH:
            if floating and dtype.name == "float32" and name in _FLOAT32_FAST:
                return ast.Call(ast.Name(_FLOAT32_FAST[name], _LOAD), args, [])
            return ast.Call(ast.Attribute(ast.Name("math", _LOAD), _MATH[name], _LOAD), args, [])
        if name in _ROUNDING:
            return ast.Call(np_attr(name), args, []) if floating else args[0]
        if name == "abs":
            return ast.Call(ast.Name("abs", _LOAD), args, [])
        if name == "isnan":
            return (ast.Compare(args[0], [ast.NotEq()], [args[0]]) if floating or dtype is None
                    else ast.Constant(False))
        if name in ("isinf", "isfinite"):
            if floating or dtype is None:
                return ast.Call(ast.Attribute(ast.Name("math", _LOAD), name, _LOAD), args, [])
            return ast.Constant(name == "isfinite")
        if name == "where":
            return ast.IfExp(args[0], args[1], args[2])
        if name in ("maximum", "minimum"):
            return ast.Call(ast.Name(name, _LOAD), args, [])
        if name == "logical_not":
            return ast.Compare(args[0], [ast.Eq()], [ast.Constant(0)])
        if name in _LOGICAL:
            truth = [ast.Compare(a, [ast.NotEq()], [ast.Constant(0)]) for a in args]
            return ast.BinOp(truth[0], _LOGICAL[name](), truth[1])
        if name in _OPERATORS:
            return ast.BinOp(args[0], _OPERATORS[name](), args[1])
        raise LoweringError(f"numba kernels: no translation for the intrinsic {name!r}; add one to "
                            f"fxkit/codegen/numba_kernel.py when adding it to ops/intrinsics.py")


_VECTORISED_FLOAT32 = frozenset(("exp", "tanh", "sqrt"))
"""Intrinsics whose float32 code LLVM vectorises (`fxkit.backends.numba_math`'s polynomial ``exp32`` and
``tanh32``, the ``sqrt`` instruction): a kernel of them streams memory like plain arithmetic."""


def calls_slow_functions(graph, metas):
    """Whether a group's scalar code calls a function run element by element (``erf32``'s float64
    rational, ``math.log``, any float64 ``math.exp``): its kernels are compute-bound, not
    memory-bound, which decides whether the thread pool pays (`fxkit.codegen.numba_kernel.parallel_for`).

    ``metas``: node -> `TensorMeta` or value, from `value_metas`.
    """
    for node in graph.nodes:
        op = node.target
        if node.op != "call" or not isinstance(op, Op):
            continue
        dtype = getattr(metas[node], "dtype", None)
        template = op.kernel_template(dtype)
        if template is None:
            continue
        if callable(template):
            template = template(**template_names(op, node.args, node.kwargs)[1])
        for call in ast.walk(ast.parse(template, mode="eval")):
            name = getattr(getattr(call, "func", None), "id", None) if isinstance(call, ast.Call) else None
            if name in _MATH and not (name in _VECTORISED_FLOAT32 and getattr(dtype, "name", None) == "float32"):
                return True
    return False


class ScalarEmitter:
    """Emits one statement a body node into a `CodeBlock`, tracking each value's local and dtype.

    Args:
        namespace: the kernel's `Namespace`.
        metas: node -> `TensorMeta` (or Python value), from `value_metas`.
    """

    def __init__(self, namespace, metas):
        self.namespace = namespace
        self.metas = metas
        self.values = {}    # node -> ast expression of its scalar value

    @staticmethod
    def name(identifier):
        """The expression reading the local ``identifier``."""
        return ast.Name(identifier, _LOAD)

    def text(self, node):
        """The source text of ``node``'s value."""
        return ast.unparse(self.values[node])

    def bind(self, node, expr):
        """Make ``expr`` the scalar value of ``node`` (an input load, a scalar parameter)."""
        self.values[node] = expr

    def emit(self, block, node):
        """Append ``<local> = <cast>(<translated template>)`` for the call ``node``."""
        op = node.target
        result = self.metas[node]
        template = op.kernel_template(getattr(result, "dtype", None)) if isinstance(op, Op) else None
        if template is None:
            raise LoweringError(f"numba kernels: {node.format_node()} has no kernel template"
                                f"{' for integer results (its impl checks their values)' if op.template else ''}")
        names, options = template_names(op, node.args, node.kwargs)
        metas = [self._meta(v) for v in names.values()]
        dtype = compute_dtype(op, metas, self.metas[node])
        promoted = set(list(names)[op.promote_from:]) if dtype is not None else set()
        exprs = {}
        for key, value in names.items():
            exprs[key] = self.operand(value, dtype if key in promoted else None)
        for key, value in options.items():
            exprs[key] = self.operand(value, dtype)
        template = template(**options) if callable(template) else template
        tree = ast.parse(template, mode="eval").body
        expr = _Template(exprs, dtype).visit(tree)
        local = self.namespace.create_name(op.name)
        block.line(f"{local} = {ast.unparse(cast(expr, result.dtype))}")
        self.values[node] = ast.Name(local, _LOAD)
        return local

    def operand(self, value, dtype):
        """The expression of an argument, converted to ``dtype`` when given."""
        if is_node(value):
            expr = self.values[value]
            meta = self.metas[value]
            if dtype is None:
                return expr
            if isinstance(meta, TensorMeta) and meta.dtype is dtype:
                return expr
            return cast(expr, dtype)
        return typed_constant(value, dtype)

    def _meta(self, value):
        return self.metas[value] if is_node(value) else value
