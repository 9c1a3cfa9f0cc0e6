"""Bad input to every registered op: a clear fxkit error naming the op, or PyTorch's answer.

`test_every_op_refuses_bad_input_clearly` bends sampled opcheck cases of each op
(`tests/runtime/bad_inputs.py`: wrong ranks, bool/int/float tensors, strings, None,
lists, mismatched shapes, dims out of range, floats and strings for ints). The other
tests pin the fixes this audit made, checking their messages.
"""
import random
import warnings
from collections import defaultdict

import numpy as np
import pytest

import fxkit
import fxkit.nn.functional as F
from fxkit.errors import DeviceError, DTypeError, IndexOutOfRangeError, ShapeError, ValueRangeError
from fxkit.runtime.registry import all_ops, get_op
from tests.runtime.bad_inputs import bad_calls, judge, torch_accepts
from tests.runtime.opcheck import load_all_cases, randf, randi

CASES_PER_OP = 3

# Calls PyTorch refuses that fxkit answers, (ops, mutation kinds, why the answer is right).
# Only the "refused" verdict can be excused: a crash or an answer unlike PyTorch's never is.
LENIENT = [
    ({"gelu", "silu", "leaky_relu", "lerp", "mse_loss", "hardsigmoid", "hardswish", "mish"}, {"bool", "int"},
     "integer and bool inputs are promoted to the default float dtype, as exp() does in PyTorch; "
     "PyTorch implements these ops for floating types only"),
    ({"abs", "relu", "argmax", "argmin"}, {"bool"},
     "a bool tensor gives the defined answer (abs, relu: the input; argmax: the first True); "
     "PyTorch has no bool kernel"),
    ({"sub"}, {"bool"}, "a bool tensor counts as 0/1 against a float tensor, as in add"),
    ({"interpolate"}, {"bool", "int"}, "nearest resampling copies elements of any dtype (PyTorch: uint8 only)"),
    ({"pad"}, {"bool", "rank+1", "rank-1"},
     "reflect/replicate/circular padding works for any rank and dtype (PyTorch's kernels: 2-D to "
     "5-D floats)"),
    ({"linear"}, {"rank+1"},
     "a bias that broadcasts to the output is added (PyTorch refuses some on its flattened addmm path)"),
    ({"max", "min"}, {"none"}, "dim=None (or other=None) means the whole-tensor form"),
    ({"norm"}, {"bool", "int"}, "dtype= casts the input first, as documented"),
    ({"setitem"}, {"bool", "int", "list"},
     "values are cast to the tensor's dtype, as PyTorch's basic-index copy does (its index_put "
     "refuses mixed dtypes); nested lists are accepted as values"),
    ({"scatter"}, {"list"}, "src may be a nested list of numbers"),
    ({"index_put"}, {"none"}, "a None entry of indices is a whole dimension: ATen's Optional[Tensor] form, "
     "which torch.export graphs of ``x[:, idx] = v`` carry (PyTorch's Python binding refuses it)"),
    ({"dropout", "dropout2d", "to"}, {"list"},
     "given no tensor at all, these ops hand a Python container back (graph shape arithmetic)"),
    ({"getitem"}, {"bool"}, "numpy reads an empty bool index as an empty integer index"),
]


def _lenient(op_name, kind, verdict):
    return verdict[0] == "refused" and any(op_name in ops and kind in kinds for ops, kinds, _ in LENIENT)


def _sampled_cases():
    by_op = defaultdict(list)
    for c in load_all_cases():
        by_op[c.op].append(c)
    pick = random.Random(0)
    return {name: pick.sample(cases, min(CASES_PER_OP, len(cases))) for name, cases in by_op.items()}


SAMPLED = _sampled_cases()


@pytest.mark.parametrize("op_name", sorted(op.name for op in all_ops()))
def test_every_op_refuses_bad_input_clearly(op_name):
    op = get_op(op_name)
    findings, calls = [], 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for c in SAMPLED.get(op_name, []):
            args, kwargs = c.make(np.random.default_rng(0))
            oracle = torch_accepts(op_name, args, kwargs)
            for where, kind, bad_args, bad_kwargs in bad_calls(op, args, kwargs):
                calls += 1
                verdict = judge(op_name, bad_args, bad_kwargs, c.mutates, oracle)
                if verdict is not None and not _lenient(op_name, kind, verdict):
                    findings.append(f"{c!r} {where} {kind}: {verdict[1]}")
    assert calls, f"{op_name}: its sampled cases gave no bad calls to try"
    assert not findings, f"{len(findings)} of {calls} bad calls to {op_name}:\n" + "\n".join(findings)


# -- the fixes of this audit, message by message --------------------------------------------
def _t(array):
    return fxkit.from_numpy(array)


def _raises(kind, pattern, fn, *args, **kwargs):
    with pytest.raises(kind, match=pattern):
        fn(*args, **kwargs)


def test_a_python_value_where_a_tensor_goes_is_named(rng):
    x = _t(randf(rng, 3, 4))
    _raises(DTypeError, r"add: argument 2 must be a tensor or a Python number, got NoneType", fxkit.add, x, None)
    _raises(DTypeError, r"where: argument 3 must be a tensor or a Python number, got str",
            fxkit.where, x > 0, x, "abc")
    _raises(DTypeError, r"logical_not: argument 1 .* got NoneType", fxkit.logical_not, None)
    _raises(DTypeError, r"softmax: expected a tensor, got NoneType", fxkit.softmax, None, 1)
    _raises(DTypeError, r"view: expected a tensor, got str", fxkit.view, "abc", 2, 6)
    _raises(DTypeError, r"dropout: expected a tensor, got str", F.dropout, "abc", 0.5, False)
    _raises(DTypeError, r"max: the elementwise form takes a tensor and a tensor or number, got list",
            fxkit.max, [[1.0, 2.0]], other=x)


def test_shared_helpers_errors_name_the_op(rng):
    x = _t(randf(rng, 3, 4))
    _raises(DTypeError, r"^clamp: expected a tensor or a Python number, got str", fxkit.clamp, x, max="abc")
    _raises(DeviceError, r"^to: unknown device 'abc'", fxkit.to, x, "abc")


def test_arithmetic_errors_become_value_range_errors(rng):
    a, zero = _t(randi(rng, 4, low=1, high=9)), _t(np.array([1, 0, 2, 3]))
    for fn in (fxkit.floor_divide, fxkit.remainder):
        _raises(ValueRangeError, rf"{fn.name}: integer division by zero", fn, a, zero)
    _raises(ValueRangeError, r"div: integer division by zero", fxkit.div, a, zero, rounding_mode="trunc")
    _raises(ValueRangeError, r"remainder: integer division by zero", fxkit.remainder, a, 0)
    mask = _t(np.array([True, False, True, False]))
    _raises(ValueRangeError, r"masked_fill: cannot convert float infinity to integer", fxkit.masked_fill,
            a, mask, float("inf"))


def test_float_division_by_zero_still_gives_inf():
    with np.errstate(divide="ignore"):
        out = fxkit.div(_t(np.array([1.0, -1.0], np.float32)), 0.0)
    assert np.isinf(out.numpy()).all() and out.dtype is fxkit.float32


def test_int_and_float_arguments_are_not_truncated(rng):
    x = _t(randf(rng, 1, 3))
    _raises(DTypeError, r"squeeze: dim must be an int, got float 2.5", fxkit.squeeze, x, 2.5)
    _raises(DTypeError, r"tril: diagonal must be an int, got float 1.5", fxkit.tril, x, 1.5)
    _raises(DTypeError, r"roll: shifts must be an int, got float 1.5", fxkit.roll, x, 1.5)
    assert fxkit.squeeze(x, np.int64(0)).shape == (3,)


def test_dims_of_a_0d_tensor_are_checked():
    _raises(IndexOutOfRangeError, r"flatten: dimension out of range .*\[-1, 0\], but got 1",
            fxkit.flatten, fxkit.tensor(1.0), 1)
    assert fxkit.flatten(fxkit.tensor(1.0), 0, -1).shape == (1,)


def test_arange_refuses_a_step_pointing_away_from_the_end():
    _raises(ShapeError, r"arange: upper bound and lower bound inconsistent with step sign", fxkit.arange, 2.5, 1, 0.5)
    assert fxkit.arange(5, 5).shape == (0,)


def test_random_like_refuses_integer_tensors(rng):
    for fn in (fxkit.rand_like, fxkit.randn_like):
        _raises(DTypeError, rf"{fn.name}: dtype must be floating point, got int64", fn, _t(randi(rng, 3)))
    assert fxkit.rand_like(_t(randf(rng, 3, dtype=np.float16))).dtype is fxkit.float16


def test_beta_zero_still_checks_the_input_shape(rng):
    a, b = _t(randf(rng, 3, 4)), _t(randf(rng, 4, 5))
    _raises(ShapeError, r"addmm: input of shape \[2, 3, 5\] cannot be broadcast to the product's shape \[3, 5\]",
            fxkit.addmm, _t(randf(rng, 2, 3, 5)), a, b, beta=0)
    _raises(ShapeError, r"baddbmm: input of shape \[2, 3, 6\] cannot be broadcast .* \[2, 3, 5\]",
            fxkit.baddbmm, _t(randf(rng, 2, 3, 6)), _t(randf(rng, 2, 3, 4)), _t(randf(rng, 2, 4, 5)), beta=0)


def test_linear_of_vectors_checks_the_bias(rng):
    x, w = _t(randf(rng, 4)), _t(randf(rng, 4))
    _raises(ShapeError, r"linear: bias of shape \[3\] cannot be broadcast to the product's shape \[\]",
            F.linear, x, w, _t(randf(rng, 3)))
    expected = float(x.numpy() @ w.numpy()) + 0.5
    assert F.linear(x, w, fxkit.tensor(0.5)).item() == pytest.approx(expected, rel=1e-5)


def test_setitem_refuses_none_and_strings(rng):
    x = _t(randf(rng, 3, 4))
    _raises(DTypeError, r"setitem: the value must be a tensor or a number, got NoneType", x.__setitem__, 0, None)
    _raises(DTypeError, r"setitem: the value must be a tensor or a number, got str", x.__setitem__, 0, "1")


def test_einsum_refuses_bool_operands():
    m = _t(np.ones((3, 3), bool))
    _raises(DTypeError, r"einsum: bool operands are not supported; cast them with .long\(\)", fxkit.einsum, "ii", m)


def test_inplace_activation_writes_half_inputs_and_refuses_integers():
    data = np.array([-1.0, 2.0], np.float16)
    for fn in (F.silu, F.leaky_relu):
        x = data.copy()
        out = fn(_t(x), inplace=True)
        np.testing.assert_array_equal(x, out.numpy())
        assert x[0] != data[0] and out.dtype is fxkit.float16
        _raises(DTypeError, rf"{fn.name}: inplace=True can't write a float32 result into the int64 input",
                fn, _t(np.array([-1, 2])), inplace=True)


def test_nn_parameters_must_be_floating_point(rng):
    x = _t(randf(rng, 4, 3))
    ones, zeros = _t(np.ones(3, np.int64)), _t(np.zeros(3, np.float32))
    _raises(DTypeError, r"batch_norm: expected a floating-point weight, got int64", F.batch_norm,
            x, zeros, _t(np.ones(3, np.float32)), ones)
    _raises(DTypeError, r"layer_norm: expected a floating-point bias, got int64", F.layer_norm, x, (3,), None, ones)
    _raises(DTypeError, r"group_norm: expected a floating-point weight, got int64", F.group_norm, x, 1, ones)
    _raises(DTypeError, r"nll_loss: expected a floating-point weight, got int64", F.nll_loss,
            x, _t(np.array([0, 1, 2, 0])), ones)
    _raises(DTypeError, r"embedding: expected a floating-point weight, got int64", F.embedding,
            _t(np.array([0, 1])), _t(np.ones((3, 2), np.int64)), max_norm=1.0)
    _raises(ShapeError, r"batch_norm: running_mean and running_var must either both be None or neither",
            F.batch_norm, x, zeros, None, training=True)


def test_mse_loss_of_integers_and_floats_is_float32_like_pytorch(rng):
    torch = pytest.importorskip("torch")
    a, b, w = randi(rng, 3, 4), randf(rng, 3, 4), randi(rng, 3, 4, low=1, high=4)
    for args, kwargs in (((a, b), {}), ((b, a), {}), ((b, b), {"weight": w})):
        got = F.mse_loss(*(_t(v) for v in args), **{k: _t(v) for k, v in kwargs.items()})
        want = torch.nn.functional.mse_loss(*(torch.from_numpy(v) for v in args),
                                            **{k: torch.from_numpy(v) for k, v in kwargs.items()})
        assert got.dtype is fxkit.float32 and want.dtype == torch.float32
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)
