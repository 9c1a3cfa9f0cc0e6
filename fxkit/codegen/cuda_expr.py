"""CUDA C statements from the registry's kernel templates, one statement a fused body node.

Each elementwise op's template (a Python expression over ``a, b, c`` and its
keyword names, calling the intrinsics of ``fxkit.runtime.ops.intrinsics``) is
bound to its arguments by `fxkit.codegen.template_expr.bind_call` (the
operands, the dtype the op computes in) and its ``ast`` translated into a C
expression here::

    %gelu = call[gelu](%add)        (add: f32)
    ->  const float gelu = 0.5f * add * (1.0f + erff(add * 0.7071067811865476f));

Types follow eager mode exactly: operands are converted to the compute dtype
(PyTorch's promotion), constants are literals of that dtype (``0.5f``, so a
float32 kernel never computes in double), math functions are the float or
double C functions (``expf``/``exp``), and each result is converted to the
node's dtype. float16 values live in ``float`` registers rounded to half after
every op (``fx_round_half``), as eager computes float16 ops in float32 and
rounds each result; arrays hold their bits (``unsigned short``), converted on
load and store. Integer and bool types are the C types of their width.

Intrinsics without a C operator or function of the same meaning (NaN-propagating
``maximum``, Python's ``floor_divide`` and ``remainder`` with numpy's rules for
zero divisors, integer ``pow``) are small ``__device__`` helpers, emitted into
a kernel only when it calls them (`HELPERS`). Helpers touching hardware (half
conversion, warp shuffles) have an ``#ifndef __CUDA_ARCH__`` path in portable
C++, so the very same source also compiles on a CPU (tests run kernels there,
one thread a block).
"""
import ast
import math
from typing import NamedTuple

from fxkit.codegen.cuda_helpers import HELPERS
from fxkit.codegen.template_expr import bind_call, is_node
from fxkit.errors import LoweringError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import Op

__all__ = ["CTYPES", "CudaEmitter", "Expr", "HELPERS", "Helpers", "STORAGE", "convert", "ctype", "literal"]

CTYPES = {"float16": "float", "float32": "float", "float64": "double", "int8": "signed char",
          "uint8": "unsigned char", "int16": "short", "int32": "int", "int64": "long long", "bool": "bool"}
"""dtype name -> the C type a kernel computes its values in (float16 computes in float)."""
STORAGE = dict(CTYPES, float16="unsigned short")
"""dtype name -> the C element type of an array (float16 arrays are accessed as their bits)."""
SCALAR_DTYPES = {bool: "bool", int: "int64", float: "float64"}
"""Python scalar type of a kernel argument -> the dtype it is passed as (``bool``, ``long long``, ``double``)."""

# C operator precedence, higher binds tighter.
PRIMARY, UNARY, MUL, ADD, SHIFT, REL, EQ, BAND, BXOR, BOR, LAND, LOR, COND = 16, 15, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3
_BINARY = {ast.Add: ("+", ADD), ast.Sub: ("-", ADD), ast.Mult: ("*", MUL), ast.Div: ("/", MUL),
           ast.BitAnd: ("&", BAND), ast.BitOr: ("|", BOR), ast.BitXor: ("^", BXOR),
           ast.LShift: ("<<", SHIFT), ast.RShift: (">>", SHIFT)}
_HELPER_OPERATORS = {ast.FloorDiv: "floor_divide", ast.Mod: "remainder", ast.Pow: "pow"}
_COMPARE = {ast.Eq: ("==", EQ), ast.NotEq: ("!=", EQ), ast.Lt: ("<", REL), ast.LtE: ("<=", REL),
            ast.Gt: (">", REL), ast.GtE: (">=", REL)}
_MATH = ("exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tanh", "erf", "floor", "ceil", "rint", "trunc")
_ROUNDING = ("floor", "ceil", "rint", "trunc")
_HELPER_CALLS = ("maximum", "minimum", "floor_divide", "remainder", "pow")
RESERVED = frozenset((
    # C++ keywords and the names a kernel module binds
    "auto", "bool", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
    "extern", "false", "float", "for", "goto", "if", "inline", "int", "long", "register", "return", "short",
    "signed", "sizeof", "static", "struct", "switch", "true", "typedef", "union", "unsigned", "void",
    "volatile", "while", "asm", "class", "delete", "friend", "namespace", "new", "operator", "private",
    "protected", "public", "template", "this", "throw", "try", "catch", "typename", "using", "virtual",
    "kernel", "kernel_strided", "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "abs", "fabs",
    "fabsf", "fmod", "fmodf", "fmax", "fmaxf", "pow", "powf", "copysign", "copysignf", "isinf", "isfinite",
    *_MATH, *(f"{name}f" for name in _MATH), *HELPERS))


def ctype(dtype):
    """The C type values of ``dtype`` are computed in."""
    try:
        return CTYPES[dtype.name]
    except KeyError:
        raise LoweringError(f"CUDA kernels: no C type for {dtype.name} values") from None


def _kind(dtype):
    """The helper flavour of a compute dtype: ``f`` (float, half), ``d`` (double) or ``i`` (integers, bool)."""
    if dtype.name == "float64":
        return "d"
    return "f" if dtype.is_floating_point else "i"


class Expr(NamedTuple):
    """A C expression and the precedence of its outermost operator (`PRIMARY` for names, calls)."""

    text: str
    prec: int = PRIMARY

    def at(self, prec):
        """The text, parenthesised when it binds looser than ``prec``."""
        return self.text if self.prec >= prec else f"({self.text})"


class Helpers:
    """The helpers a kernel calls, in an order where each follows the helpers it calls."""

    def __init__(self):
        self._used = {}

    def use(self, name):
        """Record that the kernel calls helper ``name``; returns the name."""
        if name not in self._used:
            for dependency in HELPERS[name][0]:
                self.use(dependency)
            self._used[name] = None
        return name

    def source(self):
        """The definitions of the helpers used (one text, blank-line separated)."""
        return "\n".join(HELPERS[name][1] for name in self._used)


def literal(value, dtype, helpers):
    """A Python number as a C literal of ``dtype`` (None: of the type C gives it)."""
    if type(value) is bool or (dtype is not None and dtype.name == "bool"):
        return Expr("true" if value else "false")
    if type(value) not in (int, float):
        raise LoweringError(f"CUDA kernels: cannot write the constant {value!r} in C")
    if type(value) is float:
        floating = dtype is None or dtype.is_floating_point or not value.is_integer()
    else:
        floating = dtype is not None and dtype.is_floating_point
        value = float(value) if floating else value
    if not floating:
        number = int(value)
        suffix = "LL" if (dtype is not None and dtype.name == "int64") or abs(number) >= 2**31 else ""
        return Expr(f"{number}{suffix}", UNARY if number < 0 else PRIMARY)
    single = dtype is not None and ctype(dtype) == "float"
    if math.isnan(value) or math.isinf(value):
        name = helpers.use(f"fx_{'nan' if math.isnan(value) else 'inf'}_{'f' if single else 'd'}")
        return Expr(f"-{name}()", UNARY) if value < 0 else Expr(f"{name}()")
    text = repr(value) + ("f" if single else "")
    return Expr(text, UNARY if value < 0 or text.startswith("-") else PRIMARY)


def convert(expr, source, target, helpers):
    """``expr`` (of dtype ``source``) as a value of ``target``: a C cast, or rounding to half."""
    if target.name == "float16":
        if source is not None and source.name == "float16":
            return expr
        return Expr(f"{helpers.use('fx_round_half')}({expr.text})")
    if source is not None and ctype(source) == ctype(target):
        return expr
    return Expr(f"({ctype(target)}){expr.at(UNARY)}", UNARY)


class _Translate:
    """A template's ``ast`` -> `Expr` over given operand expressions, computing in ``dtype``."""

    def __init__(self, names, dtype, helpers, op_name):
        self.names = names          # template name -> Expr
        self.dtype = dtype          # the compute dtype, or None
        self.helpers = helpers
        self.op_name = op_name

    def __call__(self, node):
        method = getattr(self, f"visit_{type(node).__name__}", None)
        if method is None:
            raise LoweringError(f"CUDA kernels: the template of {self.op_name} uses {type(node).__name__}, "
                                f"which has no C translation")
        return method(node)

    def _operator(self, table, op):
        try:
            return table[type(op)]
        except KeyError:
            raise LoweringError(f"CUDA kernels: the template of {self.op_name} uses the operator "
                                f"{type(op).__name__}, which has no C translation") from None

    def _floating(self):
        return self.dtype is not None and self.dtype.is_floating_point

    def _helper(self, name, args):
        kind = _kind(self.dtype) if self.dtype is not None else "i"
        helper = self.helpers.use(f"fx_{name}_{kind}")
        return Expr(f"{helper}({', '.join(a.text for a in args)})")

    def visit_Name(self, node):
        return self.names[node.id]

    def visit_Constant(self, node):
        return literal(node.value, self.dtype, self.helpers)

    def visit_UnaryOp(self, node):
        operand = self(node.operand).at(UNARY)
        if isinstance(node.op, ast.Invert):
            sign = "!" if self.dtype is not None and self.dtype.name == "bool" else "~"
        else:
            sign = self._operator({ast.USub: "-", ast.UAdd: "+"}, node.op)
        # NOTE: a space keeps "- -x" from reading as the decrement operator.
        return Expr(f"{sign}{' ' if operand[:1] in '-+' else ''}{operand}", UNARY)

    def visit_BinOp(self, node):
        left, right = self(node.left), self(node.right)
        kind = type(node.op)
        if kind in _HELPER_OPERATORS:
            return self._helper(_HELPER_OPERATORS[kind], [left, right])
        if kind is ast.Div and not self._floating():
            # Python's true division of integers: in double, as numba and numpy compute it.
            left, right = (Expr(f"(double){e.at(UNARY)}", UNARY) for e in (left, right))
        sign, prec = self._operator(_BINARY, node.op)
        return Expr(f"{left.at(prec)} {sign} {right.at(prec + 1)}", prec)

    def visit_Compare(self, node):
        parts = []
        left = self(node.left)
        for op, comparator in zip(node.ops, node.comparators):
            right = self(comparator)
            sign, prec = self._operator(_COMPARE, op)
            parts.append(Expr(f"{left.at(prec)} {sign} {right.at(prec + 1)}", prec))
            left = right
        if len(parts) == 1:
            return parts[0]
        return Expr(" && ".join(p.at(LAND + 1) for p in parts), LAND)

    def visit_Call(self, node):
        name = node.func.id
        args = [self(a) for a in node.args]
        floating = self._floating()
        if name in _MATH:
            if not floating:
                if name in _ROUNDING:
                    return args[0]
                raise LoweringError(f"CUDA kernels: {self.op_name} calls {name} on {self.dtype} values")
            suffix = "f" if ctype(self.dtype) == "float" else ""
            return Expr(f"{name}{suffix}({args[0].text})")
        if name == "abs":
            if floating:
                return Expr(f"fabs{'f' if ctype(self.dtype) == 'float' else ''}({args[0].text})")
            return args[0] if self.dtype is not None and self.dtype.name == "bool" else self._helper("abs", args)
        if name == "isnan":
            if self.dtype is not None and not floating:
                return Expr("false")
            return Expr(f"{args[0].at(EQ + 1)} != {args[0].at(EQ + 1)}", EQ)
        if name in ("isinf", "isfinite"):
            if self.dtype is not None and not floating:
                return Expr("true" if name == "isfinite" else "false")
            return Expr(f"{name}({args[0].text})")
        if name == "where":
            return Expr(f"{args[0].at(LOR)} ? {args[1].at(COND)} : {args[2].at(COND)}", COND)
        if name in _HELPER_CALLS:
            return self._helper(name, args)
        if name == "logical_not":
            return Expr(f"!{args[0].at(UNARY)}", UNARY)
        if name == "logical_and":
            return Expr(f"{args[0].at(LAND)} && {args[1].at(LAND + 1)}", LAND)
        if name == "logical_or":
            return Expr(f"{args[0].at(LOR)} || {args[1].at(LOR + 1)}", LOR)
        if name == "logical_xor":
            return Expr(f"!{args[0].at(UNARY)} != !{args[1].at(UNARY)}", EQ)
        raise LoweringError(f"CUDA kernels: no translation for the intrinsic {name!r} (template of {self.op_name}); "
                            f"add one to fxkit/codegen/cuda_expr.py when adding it to ops/intrinsics.py")


class CudaEmitter:
    """Emits one C statement a body node into a `CodeBlock`, tracking each value's expression and dtype.

    Args:
        namespace: the kernel's `Namespace` (reserve `RESERVED` in it).
        metas: body node -> `TensorMeta` or Python value (`fxkit.codegen.template_expr.value_metas`).
        helpers: the kernel's `Helpers`.
    """

    def __init__(self, namespace, metas, helpers):
        self.namespace = namespace
        self.metas = metas
        self.helpers = helpers
        self.values = {}  # node -> (Expr, dtype)

    def bind(self, node, text, dtype):
        """Make the C expression ``text`` (of ``dtype``) the value of ``node`` (a load, a scalar argument)."""
        self.values[node] = (Expr(text), dtype)

    def text(self, node):
        """The C expression of ``node``'s value."""
        return self.values[node][0].text

    def dtype(self, node):
        return self.values[node][1]

    def operand(self, value, dtype):
        """The expression of an argument (a node or a Python number), converted to ``dtype`` when given."""
        if is_node(value):
            expr, source = self.values[value]
            return expr if dtype is None else convert(expr, source, dtype, self.helpers)
        return literal(value, dtype, self.helpers)

    def emit(self, block, node):
        """Append ``const <type> <local> = <translated template>;`` for the call ``node``; returns the local."""
        op = node.target
        result = self.metas.get(node)
        if not isinstance(op, Op) or op.kernel_template(getattr(result, "dtype", None)) is None:
            raise LoweringError(f"CUDA kernels: {node.format_node()} has no kernel template"
                                f"{' for integer results (its impl checks their values)' if op.template else ''}")
        call = bind_call(node, self.metas)
        if not isinstance(call.result, TensorMeta):
            raise LoweringError(f"CUDA kernels: {node.format_node()} does not compute one tensor")
        used = {n.id for n in ast.walk(call.tree) if isinstance(n, ast.Name)}
        names = {key: self.operand(value, dtype) for key, (value, dtype) in call.operands.items() if key in used}
        expr = _Translate(names, call.dtype, self.helpers, op.name)(call.tree)
        result = call.result.dtype
        local = self.namespace.create_name(op.name)
        if result.name == "float16":
            expr = Expr(f"{self.helpers.use('fx_round_half')}({expr.text})")
        block.line(f"const {ctype(result)} {local} = {expr.text};")
        self.values[node] = (Expr(local), result)
        return local
