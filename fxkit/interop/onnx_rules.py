"""The ONNX export tables, and the rules of elementwise ops.

``OP_RULES`` maps each exportable registry `Op` to a rule
``rule(b, op, a, out)``: ``b`` is the `OnnxBuilder`, ``a`` the op's arguments
bound to its signature (``a.input``, ``a.dim``; tensors arrive as `Value`),
``out`` the node's output `TensorMeta` (from `infer_shapes`). A rule returns
the ONNX name of its result (a tuple of names for several results).

``MODULE_RULES`` maps an `fxkit.nn` layer class to a rule
``rule(b, module, qualname, args, kwargs, out)``; a layer without one is
exported as the registry ops its ``forward`` records.

Other files add their rules to these tables (``onnx_rules_shape``,
``onnx_rules_nn``); `fxkit.interop.onnx_export` imports them all.
"""
import math

from fxkit.errors import LoweringError
from fxkit.interop.onnx_builder import Value, onnx_dtype
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.registry import get_op

OP_RULES = {}
MODULE_RULES = {}


def export_rule(*names):
    """Register the decorated function as the ONNX rule of the ops ``names``."""
    def register(fn):
        for name in names:
            OP_RULES[get_op(name)] = fn
        return fn
    return register


def module_rule(*classes):
    """Register the decorated function as the ONNX rule of the layer ``classes``."""
    def register(fn):
        for cls in classes:
            MODULE_RULES[cls] = fn
        return fn
    return register


class Args:
    """An op's arguments bound to its signature, as attributes (``a.input``, ``a.dim``)."""

    def __init__(self, arguments):
        self.__dict__.update(arguments)


def unsupported(op, what, hint=None):
    """The `LoweringError` of an argument value a rule cannot express in ONNX."""
    message = f"{op.name}: {what} has no ONNX export"
    return LoweringError(message + (f"\n  hint: {hint}" if hint else ""))


def concrete(op, name, value):
    """``value`` as an int (or tuple of ints); symbolic dimensions are refused."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    if not all(type(v) is int for v in items):
        raise unsupported(op, f"a symbolic {name} ({value})", "export with static shapes for this dimension")
    return value


def axis(dim, rank):
    """A dimension index made non-negative."""
    return dim + rank if dim < 0 else dim


# -- elementwise ---------------------------------------------------------------------------
_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "pow": "Pow", "maximum": "Max", "minimum": "Min",
           "eq": "Equal", "lt": "Less", "le": "LessOrEqual", "gt": "Greater", "ge": "GreaterOrEqual",
           "logical_and": "And", "logical_or": "Or", "logical_xor": "Xor",
           "bitwise_and": "BitwiseAnd", "bitwise_or": "BitwiseOr", "bitwise_xor": "BitwiseXor"}
# NOTE: on bool the Bitwise* ops are the logical ones, which every opset has (Bitwise* needs opset 18)
_BOOL_BITWISE = {"BitwiseAnd": "And", "BitwiseOr": "Or", "BitwiseXor": "Xor", "BitwiseNot": "Not"}
_UNARY = {"neg": "Neg", "abs": "Abs", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "sin": "Sin", "cos": "Cos",
          "tanh": "Tanh", "erf": "Erf", "reciprocal": "Reciprocal", "sigmoid": "Sigmoid", "relu": "Relu",
          "sign": "Sign", "logical_not": "Not", "bitwise_not": "BitwiseNot", "isnan": "IsNaN"}


def compute_dtype(op, values, out):
    """The dtype an elementwise op computes in: its result's, except for comparisons
    (the inputs' promoted dtype) and logical ops (bool)."""
    if op.promote == "bool":
        return _dt.bool_
    if op.promote != "compare":
        return out.dtype
    metas = [v.meta for v in values if isinstance(v, Value)]
    return _dt.result_type([m.dtype for m in metas if m.shape], [m.dtype for m in metas if not m.shape],
                           [v for v in values if type(v) in (bool, int, float)])


def operands(b, op, out, *values):
    """Each value as an ONNX tensor of the op's compute dtype."""
    dtype = compute_dtype(op, values, out)
    return [b.operand(v, dtype) for v in values]


@export_rule(*_BINARY)
def _binary(b, op, a, out):
    x, y = operands(b, op, out, a.input, a.exponent if op.name == "pow" else a.other)
    alpha = getattr(a, "alpha", 1)
    if alpha != 1:
        y = b.op("Mul", y, b.scalar(alpha, out.dtype))
    op_type = _BINARY[op.name]
    if out.dtype is _dt.bool_:
        op_type = _BOOL_BITWISE.get(op_type, op_type)
    return b.op(op_type, x, y)


@export_rule(*_UNARY)
def _unary(b, op, a, out):
    x, = operands(b, op, out, a.input)
    op_type = _UNARY[op.name]
    if out.dtype is _dt.bool_:
        op_type = _BOOL_BITWISE.get(op_type, op_type)
    return b.op(op_type, x)


@export_rule("isinf", "isfinite")
def _infinity_checks(b, op, a, out):
    """IsInf, and for isfinite neither IsNaN nor IsInf; both take floats only, and an integer
    tensor (never infinite) goes in as float32."""
    dtype = a.input.meta.dtype if isinstance(a.input, Value) else _dt.float32
    x = b.operand(a.input, dtype if dtype.is_floating_point else _dt.float32)
    if op.name == "isinf":
        return b.op("IsInf", x)
    return b.op("Not", b.op("Or", b.op("IsNaN", x), b.op("IsInf", x)))


@export_rule("ne")
def _ne(b, op, a, out):
    return b.op("Not", b.op("Equal", *operands(b, op, out, a.input, a.other)))


@export_rule("floor", "ceil", "round")
def _rounding(b, op, a, out):
    x, = operands(b, op, out, a.input)
    if not out.dtype.is_floating_point:
        return x  # integers are already whole
    decimals = getattr(a, "decimals", 0)
    if decimals:
        scale = b.scalar(10.0 ** decimals, out.dtype)
        return b.op("Div", b.op("Round", b.op("Mul", x, scale)), scale)
    return b.op({"floor": "Floor", "ceil": "Ceil", "round": "Round"}[op.name], x)


@export_rule("div")
def _div(b, op, a, out):
    x, y = operands(b, op, out, a.input, a.other)
    if a.rounding_mode is None or not out.dtype.is_floating_point:
        if a.rounding_mode == "floor":
            raise unsupported(op, "integer division with rounding_mode='floor'", "divide floats, then floor")
        return b.op("Div", x, y)  # ONNX's integer Div truncates, as rounding_mode='trunc'
    q = b.op("Div", x, y)
    if a.rounding_mode == "floor":
        return b.op("Floor", q)
    return b.op("Mul", b.op("Sign", q), b.op("Floor", b.op("Abs", q)))


@export_rule("floor_divide")
def _floor_divide(b, op, a, out):
    if not out.dtype.is_floating_point:
        raise unsupported(op, f"floor division of {out.dtype.name} tensors", "divide floats, then floor")
    return b.op("Floor", b.op("Div", *operands(b, op, out, a.input, a.other)))


@export_rule("remainder")
def _remainder(b, op, a, out):
    x, y = operands(b, op, out, a.input, a.other)
    if not out.dtype.is_floating_point:
        return b.op("Mod", x, y, fmod=0)  # Python's sign convention, as torch.remainder
    return b.op("Sub", x, b.op("Mul", b.op("Floor", b.op("Div", x, y)), y))


@export_rule("rsqrt")
def _rsqrt(b, op, a, out):
    return b.op("Reciprocal", b.op("Sqrt", *operands(b, op, out, a.input)))


@export_rule("log1p", "expm1")
def _log1p_expm1(b, op, a, out):
    x, = operands(b, op, out, a.input)
    one = b.scalar(1, out.dtype)
    return b.op("Log", b.op("Add", x, one)) if op.name == "log1p" else b.op("Sub", b.op("Exp", x), one)


@export_rule("silu")
def _silu(b, op, a, out):
    x, = operands(b, op, out, a.input)
    return b.op("Mul", x, b.op("Sigmoid", x))


@export_rule("leaky_relu")
def _leaky_relu(b, op, a, out):
    x, = operands(b, op, out, a.input)
    return b.op("LeakyRelu", x, alpha=float(a.negative_slope))


@export_rule("gelu")
def _gelu(b, op, a, out):
    x, = operands(b, op, out, a.input)
    if b.opset >= 20:
        return b.op("Gelu", x, approximate=a.approximate)
    half, one = b.scalar(0.5, out.dtype), b.scalar(1.0, out.dtype)
    if a.approximate == "tanh":
        # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), PyTorch's tanh approximation
        cube = b.op("Mul", b.op("Mul", x, x), x)
        inner = b.op("Add", x, b.op("Mul", cube, b.scalar(0.044715, out.dtype)))
        t = b.op("Tanh", b.op("Mul", inner, b.scalar(math.sqrt(2.0 / math.pi), out.dtype)))
    else:
        t = b.op("Erf", b.op("Mul", x, b.scalar(1.0 / math.sqrt(2.0), out.dtype)))
    return b.op("Mul", b.op("Mul", x, half), b.op("Add", t, one))


@export_rule("clamp")
def _clamp(b, op, a, out):
    x, = operands(b, op, out, a.input)
    low, high = (None if v is None else b.operand(v, out.dtype) for v in (a.min, a.max))
    if not any(isinstance(v, Value) for v in (a.min, a.max)):
        return b.op("Clip", x, low, high)
    # Clip takes scalar bounds only; tensor bounds broadcast through Max/Min.
    y = x if low is None else b.op("Max", x, low)
    return y if high is None else b.op("Min", y, high)


@export_rule("where")
def _where(b, op, a, out):
    cond = b.operand(a.condition, _dt.bool_)
    return b.op("Where", cond, b.operand(a.input, out.dtype), b.operand(a.other, out.dtype))


@export_rule("masked_fill")
def _masked_fill(b, op, a, out):
    mask = b.operand(a.mask, _dt.bool_)
    return b.op("Where", mask, b.operand(a.value, out.dtype), b.operand(a.input, out.dtype))


@export_rule("lerp")
def _lerp(b, op, a, out):
    start, end, weight = operands(b, op, out, a.input, a.end, a.weight)
    return b.op("Add", start, b.op("Mul", weight, b.op("Sub", end, start)))


@export_rule("to", "float", "double", "half", "int", "long", "bool")
def _cast(b, op, a, out):
    value = a.input
    return value.name if value.meta.dtype is out.dtype else b.op("Cast", value.name, to=onnx_dtype(out.dtype))


@export_rule("relu6")
def _relu6(b, op, a, out):
    x, = operands(b, op, out, a.input)
    return b.op("Clip", x, b.scalar(0, out.dtype), b.scalar(6, out.dtype))


@export_rule("hardsigmoid", "hardswish")
def _hard(b, op, a, out):
    x, = operands(b, op, out, a.input)
    if op.name == "hardswish":
        return b.op("HardSwish", x)
    return b.op("HardSigmoid", x, alpha=1.0 / 6.0, beta=0.5)


@export_rule("mish")
def _mish(b, op, a, out):
    x, = operands(b, op, out, a.input)
    if b.opset >= 18:
        return b.op("Mish", x)
    # x * tanh(log(1 + exp(x))), PyTorch's formula (exp overflowing to inf still gives x)
    softplus = b.op("Log", b.op("Add", b.op("Exp", x), b.scalar(1.0, out.dtype)))
    return b.op("Mul", x, b.op("Tanh", softplus))
