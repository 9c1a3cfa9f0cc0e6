"""Installs the op registry onto `Tensor`: operators, one method per op, and
in-place variants. The tracer's Proxy installs the same `OPERATORS` table, so
``x + y`` on a tensor and on a proxy is the same `Op`.
"""
from fxkit.errors import DTypeError
from fxkit.runtime.registry import all_ops, get_op
from fxkit.runtime.tensor import Tensor

OPERATORS = {
    # dunder: (op name, reflected)
    "__add__": ("add", False), "__radd__": ("add", True),
    "__sub__": ("sub", False), "__rsub__": ("sub", True),
    "__mul__": ("mul", False), "__rmul__": ("mul", True),
    "__truediv__": ("div", False), "__rtruediv__": ("div", True),
    "__floordiv__": ("floor_divide", False), "__rfloordiv__": ("floor_divide", True),
    "__mod__": ("remainder", False), "__rmod__": ("remainder", True),
    "__pow__": ("pow", False), "__rpow__": ("pow", True),
    "__matmul__": ("matmul", False), "__rmatmul__": ("matmul", True),
    "__and__": ("bitwise_and", False), "__rand__": ("bitwise_and", True),
    "__or__": ("bitwise_or", False), "__ror__": ("bitwise_or", True),
    "__xor__": ("bitwise_xor", False), "__rxor__": ("bitwise_xor", True),
    "__eq__": ("eq", False), "__ne__": ("ne", False),
    "__lt__": ("lt", False), "__le__": ("le", False),
    "__gt__": ("gt", False), "__ge__": ("ge", False),
    "__getitem__": ("getitem", False),
}
UNARY_OPERATORS = {"__neg__": "neg", "__abs__": "abs", "__invert__": "bitwise_not"}
INPLACE_OPERATORS = {
    "__iadd__": "add", "__isub__": "sub", "__imul__": "mul", "__itruediv__": "div",
    "__ifloordiv__": "floor_divide", "__imod__": "remainder", "__ipow__": "pow",
    "__imatmul__": "matmul", "__iand__": "bitwise_and", "__ior__": "bitwise_or",
    "__ixor__": "bitwise_xor",
}

# Ops that are no elementwise op but have PyTorch's in-place method (``x.scatter_(...)``).
INPLACE_METHODS = ("scatter", "scatter_add", "index_put", "index_add")


def binary_operator(op, reflected):
    """``self <op> other`` (or ``other <op> self`` when reflected) as a method."""
    # NOTE: calling ``type(op).__call__`` directly skips the lookup of ``op(...)``: a
    # measured share of the per-op overhead of ``x + y``.
    call = type(op).__call__
    if reflected:
        def method(self, other):
            return call(op, other, self)
    else:
        def method(self, other):
            return call(op, self, other)
    method.__name__ = op.name
    return method


def unary_operator(op):
    """``<op> self`` (``-x``, ``abs(x)``, ``~x``) as a method."""
    call = type(op).__call__

    def method(self):
        return call(op, self)
    method.__name__ = op.name
    return method


def assign_inplace(target, result, name):
    """Write ``result`` into ``target``'s storage, refusing PyTorch's unsafe casts."""
    if result.dtype is not target.dtype and result.dtype.category > target.dtype.category:
        raise DTypeError(
            f"{name}: result type {result.dtype.name} can't be cast to the desired output type "
            f"{target.dtype.name}; write `x = x {name} y` instead, or cast x first"
        )
    if result.device is not target.device:
        raise DTypeError(f"{name}: result on {result.device} can't be written into a tensor on {target.device}")
    target._data[...] = result._data
    return target


def _tracked(self, args, kwargs):
    """Whether an in-place call involves a tensor that takes part in autograd."""
    return self._grad is not None or any(isinstance(a, Tensor) and a._grad is not None
                                         for a in (*args, *kwargs.values()))


def _inplace_operator(op):
    def method(self, other):
        if self._grad is not None or isinstance(other, Tensor) and other._grad is not None:
            from fxkit.runtime.autograd.inplace import apply_inplace

            return apply_inplace(op, self, (other,), {}, op.name)
        return assign_inplace(self, op(self, other), op.name)
    method.__name__ = op.name
    return method


def _inplace_method(op):
    def method(self, *args, **kwargs):
        if _tracked(self, args, kwargs):
            from fxkit.runtime.autograd.inplace import apply_inplace

            return apply_inplace(op, self, args, kwargs, op.name + "_")
        return assign_inplace(self, op(self, *args, **kwargs), op.name + "_")
    method.__name__ = op.name + "_"
    method.__doc__ = f"In-place ``{op.name}``: writes the result into this tensor and returns it."
    return method


def install_operators(cls):
    """Put the operator table on ``cls`` (Tensor here, the tracer's Proxy there)."""
    for dunder, (name, reflected) in OPERATORS.items():
        setattr(cls, dunder, binary_operator(get_op(name), reflected))
    for dunder, name in UNARY_OPERATORS.items():
        setattr(cls, dunder, unary_operator(get_op(name)))
    cls.__pos__ = lambda self: self


def op_method(op):
    """``x.<name>(...)`` calling ``op(x, ...)``: a plain function, so binding stays in C."""
    call = type(op).__call__

    def method(self, *args, **kwargs):
        return call(op, self, *args, **kwargs)
    method.__name__ = op.method
    method.__qualname__ = f"Tensor.{op.method}"
    method.__doc__ = getattr(op.impl, "__doc__", None)
    method.op = op
    return method


def install_methods(cls, skip=()):
    """One method per registered op that declares a method name."""
    for op in all_ops():
        name = op.method
        if name and name not in skip and name not in cls.__dict__:
            setattr(cls, name, op_method(op))


def install_transposes(cls):
    """``x.T`` (every dimension reversed, the ``numpy_T`` op) and ``x.mT`` (the last two swapped)
    as properties of ``cls`` (Tensor here, the tracer's Proxy there: both record the ops)."""
    numpy_t, transpose = get_op("numpy_T"), get_op("transpose")

    def reversed_dims(self):
        return numpy_t(self)

    def matrix_transpose(self):
        return transpose(self, -2, -1)

    cls.T = property(reversed_dims, doc="Every dimension reversed, as numpy's and PyTorch's ``x.T``.")
    cls.mT = property(matrix_transpose, doc="The last two dimensions swapped: a batch of matrices transposed.")


def install_tensor():
    install_operators(Tensor)
    install_transposes(Tensor)
    for dunder, name in INPLACE_OPERATORS.items():
        setattr(Tensor, dunder, _inplace_operator(get_op(name)))
    install_methods(Tensor)
    for op in all_ops():
        if (op.kind == "elementwise" or op.name in INPLACE_METHODS) and op.method \
                and op.method + "_" not in Tensor.__dict__:
            setattr(Tensor, op.method + "_", _inplace_method(op))
    Tensor.__hash__ = object.__hash__
