"""Cases for fxkit/runtime/ops/activations.py: relu6, hardsigmoid, hardswish, mish."""
import numpy as np

import fxkit
from tests.runtime.opcheck import case, randf, randi, torch_ref

HALF = {"rtol": 2e-3, "atol": 2e-3}


def _one(x):
    return (x,), {}


def _spread(rng, *shape, dtype=np.float32):
    """Values in [-8, 8): both flat regions and the ramp of every hard activation."""
    return (randf(rng, *shape) * 4).astype(dtype)


def _kinks(rng):
    """The breakpoints themselves (-3, 0, 3, 6), NaN and infinities, among random values."""
    special = [-3.0, 0.0, 3.0, 6.0, -6.0, np.nan, np.inf, -np.inf]
    return np.concatenate([_spread(rng, 16), special]).astype(np.float32)


def _torch_functional(name):
    def call(*args, **kwargs):
        import torch.nn.functional

        return getattr(torch.nn.functional, name)(*args, **kwargs)

    return torch_ref(call)


def _relu6(a, inplace=False):
    return np.minimum(np.maximum(a, 0), 6)


def _hardsigmoid(a, inplace=False):
    return np.minimum(np.maximum(a + 3, 0), 6) / 6


def _hardswish(a, inplace=False):
    return a * np.minimum(np.maximum(a + 3, 0), 6) / 6


def _mish(a, inplace=False):
    softplus = np.logaddexp(0.0, a)  # log(1 + exp(a)), exact in float64 for every a
    return a * np.tanh(softplus)


_REFERENCES = {"relu6": _relu6, "hardsigmoid": _hardsigmoid, "hardswish": _hardswish, "mish": _mish}

for _name, _ref in _REFERENCES.items():
    case(_name, lambda r: _one(_spread(r, 3, 40)), _ref)
    case(_name, lambda r: _one(_kinks(r)), _ref, id="kinks-nan-inf")
    case(_name, lambda r: _one(_spread(r, 60, dtype=np.float64)), _ref, id="float64", rtol=1e-14, atol=1e-300)
    case(_name, lambda r: _one(_spread(r, 16, dtype=np.float16)), _ref, id="float16", **HALF)
    case(_name, lambda r: _one(_spread(r, 6, 8)[:, 1::2]), _ref, id="noncontiguous")
    case(_name, lambda r: _one(np.array(r.random() * 4 - 1, np.float32)), _ref, id="0d")
    case(_name, lambda r: _one(randf(r, 0, 3)), _ref, id="empty")
    case(_name, lambda r: ((_spread(r, 3, 5),), {"inplace": True}), _ref, id="inplace-writes-input", mutates=True)
    case(_name, lambda r: _one(_kinks(r).astype(np.float64)), _torch_functional(_name), id="torch",
         rtol=1e-14, atol=1e-300)
    case(_name, lambda r: _one(_spread(r, 4, 32)), _torch_functional(_name), id="torch-float32")

case("relu6", lambda r: _one(randi(r, 12, low=-9, high=12)), _relu6, id="int64-kept")
case("relu6", lambda r: _one(randi(r, 12, low=-9, high=12, dtype=np.int8)), _relu6, id="int8-kept")
case("relu6", lambda r: ((randi(r, 12, low=-9, high=12, dtype=np.int32),), {"inplace": True}), _relu6,
     id="int32-inplace", mutates=True)
for _name in ("hardsigmoid", "hardswish", "mish"):
    case(_name, lambda r: _one(randi(r, 9)), _REFERENCES[_name], id="int64-to-float32", dtype=fxkit.float32)
# mish far out: exp(x) would overflow beyond 88 in float32; x * tanh(softplus(x)) is x there.
case("mish", lambda r: _one(np.array([-1000.0, -100.0, -30.0, 30.0, 100.0, 1000.0], np.float32)), _mish,
     id="extremes", atol=1e-30)
