"""fxkit.nn.init against torch.nn.init: the same fans, gains and bounds, and
samples whose statistics match the intended distributions."""
import math

import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.errors import ShapeError
from fxkit.nn import init

torch = pytest.importorskip("torch")

SHAPES = [(30, 20), (16, 8, 3, 3), (4, 6, 5), (64, 3, 7, 7)]


@pytest.mark.parametrize("shape", SHAPES)
def test_fans_match_torch(shape):
    expected = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
    assert init._calculate_fan_in_and_fan_out(fxkit.empty(*shape)) == expected


@pytest.mark.parametrize("nonlinearity, param", [("linear", None), ("conv2d", None), ("sigmoid", None),
                                                 ("tanh", None), ("relu", None), ("leaky_relu", None),
                                                 ("leaky_relu", 0.2), ("leaky_relu", math.sqrt(5)),
                                                 ("selu", None)])
def test_calculate_gain_matches_torch(nonlinearity, param):
    assert init.calculate_gain(nonlinearity, param) == pytest.approx(torch.nn.init.calculate_gain(nonlinearity, param))


def test_errors():
    with pytest.raises(ShapeError, match=r"fewer than 2 dimensions \(shape \[5\]\)"):
        init.kaiming_uniform_(fxkit.empty(5))
    with pytest.raises(ValueError, match="unsupported nonlinearity 'swish'"):
        init.calculate_gain("swish")
    with pytest.raises(ValueError, match="mode 'fan_avg' not supported"):
        init.kaiming_normal_(fxkit.empty(3, 3), mode="fan_avg")


def _uniform_bound_and_spread(values, bound):
    assert np.abs(values).max() <= bound
    assert np.abs(values).max() > 0.95 * bound  # the whole interval is used
    assert abs(values.mean()) < 0.05 * bound


@pytest.mark.parametrize("fn, kwargs, expected_bound", [
    (init.kaiming_uniform_, dict(a=math.sqrt(5)), lambda fi, fo: 1 / math.sqrt(fi)),
    (init.kaiming_uniform_, dict(nonlinearity="relu"), lambda fi, fo: math.sqrt(6 / fi)),
    (init.kaiming_uniform_, dict(mode="fan_out", nonlinearity="relu"), lambda fi, fo: math.sqrt(6 / fo)),
    (init.xavier_uniform_, dict(gain=2.0), lambda fi, fo: 2.0 * math.sqrt(6 / (fi + fo))),
])
def test_uniform_inits_have_torchs_bounds(fn, kwargs, expected_bound):
    t = fxkit.empty(64, 32, 3, 3)
    assert fn(t, **kwargs) is t
    _uniform_bound_and_spread(t.numpy(), expected_bound(32 * 9, 64 * 9))


@pytest.mark.parametrize("fn, kwargs, expected_std", [
    (init.kaiming_normal_, dict(mode="fan_out", nonlinearity="relu"), math.sqrt(2 / (64 * 9))),
    (init.xavier_normal_, {}, math.sqrt(2 / (32 * 9 + 64 * 9))),
    (init.normal_, dict(mean=1.5, std=0.5), 0.5),
])
def test_normal_inits_have_torchs_std(fn, kwargs, expected_std):
    values = fn(fxkit.empty(64, 32, 3, 3), **kwargs).numpy()
    assert values.std() == pytest.approx(expected_std, rel=0.03)
    assert values.mean() == pytest.approx(kwargs.get("mean", 0.0), abs=0.03 * expected_std + 1e-3)


def test_constant_fills_and_dtype_kept():
    t = fxkit.empty(3, 4, dtype=fxkit.float64)
    init.constant_(t, 0.25)
    assert t.dtype is fxkit.float64 and (t.numpy() == 0.25).all()
    init.ones_(t)
    assert (t.numpy() == 1).all()
    init.zeros_(t)
    assert not t.numpy().any()
    half = init.uniform_(fxkit.empty(100, dtype=fxkit.float16), -1, 1)
    assert half.dtype is fxkit.float16 and np.abs(half.numpy()).max() <= 1


def test_default_layer_init_like_torch():
    """Linear/Conv2d: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias."""
    for layer, fan_in in ((nn.Linear(50, 40), 50), (nn.Conv2d(6, 16, 5), 6 * 25)):
        bound = 1 / math.sqrt(fan_in)
        _uniform_bound_and_spread(layer.weight.numpy(), bound)
        assert np.abs(layer.bias.numpy()).max() <= bound
    emb = nn.Embedding(1000, 16).weight.numpy()
    assert emb.std() == pytest.approx(1.0, rel=0.05)


def test_manual_seed_reproducible_init():
    fxkit.manual_seed(7)
    a = nn.Linear(8, 8).weight.numpy().copy()
    fxkit.manual_seed(7)
    b = nn.Linear(8, 8).weight.numpy().copy()
    np.testing.assert_array_equal(a, b)
