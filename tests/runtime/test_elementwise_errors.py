"""Mistakes with elementwise ops give fxkit errors that name the op, the values and the fix."""
import numpy as np
import pytest

import fxkit
from fxkit.errors import DeviceError, DTypeError, ShapeError
from fxkit.runtime.meta import TensorMeta
from tests.conftest import HAS_CUDA


def floats(*shape):
    return fxkit.rand(*shape) + 0.5


def ints(*shape):
    return fxkit.from_numpy(np.arange(1, 1 + int(np.prod(shape))).reshape(shape))


def bools(*shape):
    return fxkit.from_numpy(np.arange(int(np.prod(shape))).reshape(shape) % 2 == 0)


# -- shapes -------------------------------------------------------------------
@pytest.mark.parametrize("call,name", [
    (lambda: fxkit.add(floats(3, 4), floats(5)), "add"),
    (lambda: floats(3, 4) * floats(5), "mul"),
    (lambda: fxkit.lerp(floats(3, 4), floats(5), 0.5), "lerp"),
    (lambda: fxkit.where(bools(3, 4), floats(3, 4), floats(5)), "where"),
    (lambda: fxkit.clamp(floats(3, 4), min=floats(5)), "clamp"),
], ids=["add", "mul-operator", "lerp", "where", "clamp-tensor-bound"])
def test_broadcasting_failure_names_op_and_shapes(call, name):
    with pytest.raises(ShapeError, match=rf"^{name}: operands could not be broadcast together with shapes "
                                         rf".*\(3,4\).*\(5,\)"):
        call()


def test_shape_rule_broadcasting_failure_names_op_and_shapes():
    with pytest.raises(ShapeError, match=r"add: shapes \[3, 4\] and \[5\] cannot be broadcast together "
                                         r"\(dimension -1: 4 vs 5\)"):
        fxkit.ops.add.shape_rule(TensorMeta((3, 4), fxkit.float32), TensorMeta((5,), fxkit.float32))


# -- dtypes -------------------------------------------------------------------
@pytest.mark.parametrize("call,name", [
    (lambda: floats(3) & floats(3), "bitwise_and"),
    (lambda: fxkit.bitwise_or(ints(3), floats(3)), "bitwise_or"),
    (lambda: floats(3) ^ 1, "bitwise_xor"),
    (lambda: ~floats(3), "bitwise_not"),
])
def test_bitwise_op_on_floats_names_op_and_dtype(call, name):
    with pytest.raises(DTypeError, match=rf"{name}: needs integer or bool tensors, got float32; cast with \.int\(\)"):
        call()


@pytest.mark.parametrize("call,pattern", [
    (lambda: bools(3) - bools(3), r"sub: subtraction, the `-` operator, with two bool tensors is not supported; "
                                  r"use logical_xor\(\) or the `\^` operator"),
    (lambda: -bools(3), r"neg: negation, the `-` operator, on a bool tensor is not supported; use logical_not\(\)"),
    (lambda: fxkit.add(ints(3), ints(3), alpha=0.5), r"add: alpha=0\.5 is a float, but the inputs are integer "
                                                     r"tensors; pass an integer alpha or cast the inputs with \.float"),
    (lambda: fxkit.sub(ints(3), 1, alpha=1.5), r"sub: alpha=1\.5 is a float"),
    (lambda: ints(3) ** -1, r"pow: integers to negative integer powers are not allowed; cast the base to float"),
    (lambda: fxkit.pow(bools(3), bools(3)), r"pow: not supported for bool tensors"),
    (lambda: fxkit.div(bools(3), bools(3), rounding_mode="floor"),
     r"div\(rounding_mode='floor'\): not supported for bool tensors; cast them with \.int\(\)"),
    (lambda: bools(3) // bools(3), r"floor_divide: not supported for bool tensors"),
    (lambda: bools(3) % bools(3), r"remainder: not supported for bool tensors"),
    (lambda: fxkit.where(ints(3), floats(3), 0.0), r"where: condition must be a bool tensor, got dtype int64; "
                                                   r"compare first, e\.g\. where\(x > 0, \.\.\.\)"),
    (lambda: fxkit.round(ints(3), decimals=1), r"round: decimals=1 needs a floating-point tensor, got int64"),
    (lambda: fxkit.floor(bools(3)), r"floor: not supported for bool tensors"),
    (lambda: bools(3).ceil(), r"ceil: not supported for bool tensors"),
])
def test_dtype_mistakes_are_explained(call, pattern):
    with pytest.raises(DTypeError, match=pattern):
        call()


# -- arguments ----------------------------------------------------------------
@pytest.mark.parametrize("call,pattern", [
    (lambda: fxkit.div(floats(3), floats(3), rounding_mode="round"),
     r"div: rounding_mode must be None, 'trunc' or 'floor', got 'round'"),
    (lambda: fxkit.gelu(floats(3), approximate="fast"), r"gelu: approximate must be 'none' or 'tanh', got 'fast'"),
    (lambda: fxkit.clamp(floats(3)), r"clamp: at least one of min and max must be given"),
    (lambda: floats(3).clamp(None, None), r"clamp: at least one of min and max must be given"),
])
def test_invalid_arguments_are_explained(call, pattern):
    with pytest.raises(ShapeError, match=pattern):
        call()


def test_shape_rules_reject_the_same_arguments():
    meta = TensorMeta((3,), fxkit.float32)
    with pytest.raises(ShapeError, match="clamp: at least one of min and max"):
        fxkit.ops.clamp.shape_rule(meta)
    with pytest.raises(ShapeError, match="div: rounding_mode must be"):
        fxkit.ops.div.shape_rule(meta, meta, rounding_mode="ceil")


def test_in_place_op_refuses_an_unsafe_cast():
    x = ints(3)
    with pytest.raises(DTypeError, match="sigmoid_: result type float32 can't be cast to the desired output "
                                         "type int64"):
        x.sigmoid_()


# -- devices ------------------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU with cupy")
def test_mixing_devices_names_both():
    with pytest.raises(DeviceError, match=r"add: expected all tensors on the same device, found cpu and cuda:0"):
        fxkit.add(floats(3), floats(3).cuda())
