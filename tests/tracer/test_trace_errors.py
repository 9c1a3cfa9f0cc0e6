"""What tracing cannot do raises TraceError naming the user's file and line and the way out."""
import os

import numpy as np
import pytest

import fxkit
from fxkit import nn

# Every case's offending statement is the first line of its body.


def branch_on_value(self, x):
    if x.sum() > 0:
        return x
    return -x


def length(self, x):
    return x * len(x)


def truth(self, x):
    return x if bool(x) else -x


def loop_over_rows(self, x):
    for row in x:
        x = x + row
    return x


def int_of_mean(self, x):
    return x * int(x.mean())


def float_of_value(self, x):
    return x * float(x.sum())


def range_of_dim(self, x):
    return [x[i] for i in range(x.shape[0])]


def numpy_function(self, x):
    return np.sum(x)


def numpy_ufunc(self, x):
    return np.exp(x)


def numpy_asarray(self, x):
    return np.asarray(x)


def item(self, x):
    return x * x.sum().item()


def to_numpy(self, x):
    return x.numpy()


CONCRETE = [branch_on_value, length, truth, loop_over_rows, int_of_mean, float_of_value, range_of_dim,
            numpy_function, numpy_ufunc, numpy_asarray, item, to_numpy]


def augmented_buffer(self, x):
    self.buf += x
    return x


def inplace_method_on_buffer(self, x):
    self.buf.add_(x)
    return x


def assign_attribute(self, x):
    self.attr = x
    return x


def setitem_on_parameter(self, x):
    self.weight[0] = x
    return x


MUTATIONS = [augmented_buffer, inplace_method_on_buffer, assign_attribute, setitem_on_parameter]


def module_with(forward):
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("buf", fxkit.rand(4))
            self.weight = nn.Parameter(fxkit.rand(3, 4))
            self.attr = None

    Model.forward = forward
    return Model()


def check_message(err, forward):
    message = str(err.value)
    line = forward.__code__.co_firstlineno + 1
    assert f"{__file__}:{line} in {forward.__name__}" in message, message
    assert f"{os.path.basename(__file__)}:{line}" in message
    return message


@pytest.mark.parametrize("forward", CONCRETE, ids=[f.__name__ for f in CONCRETE])
def test_values_tracing_cannot_know(forward):
    with pytest.raises(fxkit.TraceError) as err:
        fxkit.symbolic_trace(module_with(forward))
    message = check_message(err, forward)
    assert "not known while tracing" in message or "does not exist while tracing" in message \
        or "received traced value %x" in message
    assert "concrete_args" in message and "fxkit.wrap" in message and "is_leaf_module" in message


@pytest.mark.parametrize("forward", MUTATIONS, ids=[f.__name__ for f in MUTATIONS])
def test_module_state_mutation(forward):
    model = module_with(forward)
    buf_before = model.buf.numpy().copy()
    with pytest.raises(fxkit.TraceError) as err:
        fxkit.symbolic_trace(model)
    message = check_message(err, forward)
    assert "in-place mutation of a module attribute" in message
    assert "is_leaf_module" in message
    np.testing.assert_array_equal(model.buf.numpy(), buf_before)
    assert model.attr is None


def test_numpy_messages_name_the_function():
    with pytest.raises(fxkit.TraceError, match=r"np\.sum received traced value %x"):
        fxkit.symbolic_trace(module_with(numpy_function))
    with pytest.raises(fxkit.TraceError, match=r"np\.exp received traced value %x"):
        fxkit.symbolic_trace(module_with(numpy_ufunc))


def test_loop_message_names_the_loop():
    with pytest.raises(fxkit.TraceError, match="iterating over traced value %x"):
        fxkit.symbolic_trace(module_with(loop_over_rows))


def test_the_ways_out_work(rng):
    x = fxkit.from_numpy(rng.standard_normal(4).astype(np.float32))

    class Flagged(nn.Module):
        def forward(self, x, positive):
            if positive:
                return x
            return -x

    gm = fxkit.symbolic_trace(Flagged(), concrete_args={"positive": False})
    np.testing.assert_array_equal(gm(x).numpy(), -x.numpy())


def test_concrete_args_must_name_arguments():
    with pytest.raises(fxkit.TraceError, match=r"concrete_args names \['y'\].*its arguments: \['x'\]"):
        fxkit.symbolic_trace(lambda x: x, concrete_args={"y": 1})


def test_a_forward_taking_self_in_star_args_is_refused():
    class NoSelf(nn.Module):
        def forward(*args):  # noqa: N805
            return args[1]

    with pytest.raises(fxkit.TraceError, match=r"NoSelf.forward has no self parameter: self cannot be part of "
                                               r"\*args expansion; write forward\(self, \.\.\.\)"):
        fxkit.symbolic_trace(NoSelf())


def test_non_callable_root():
    with pytest.raises(fxkit.TraceError, match="expected an fxkit.nn.Module or a function, got int"):
        fxkit.symbolic_trace(3)


class _DictTaker(nn.Module):
    def forward(self, d):
        return d


class _KeyedByProxy(nn.Module):
    def __init__(self):
        super().__init__()
        self.m = _DictTaker()

    def forward(self, x):
        return self.m({x: x})


class _DictTakerIsLeaf(fxkit.Tracer):
    def is_leaf_module(self, module, qualname):
        return isinstance(module, _DictTaker) or super().is_leaf_module(module, qualname)


def test_traced_value_as_dict_key_is_refused():
    # Regression (issue 15): the Proxy used to land in the graph as a dict key; torch.fx
    # refuses it at trace time (test_fx.py::test_dict_keys_proxy_error_message in spirit).
    with pytest.raises(fxkit.TraceError) as info:
        _DictTakerIsLeaf().trace(_KeyedByProxy())
    message = str(info.value)
    assert "a traced value is used as a dict key" in message
    line = _KeyedByProxy.forward.__code__.co_firstlineno + 1
    assert f"{__file__}:{line} in forward" in message
    assert "hint: key the dict by a constant" in message
