"""Cases for fxkit/runtime/ops/factories.py (random ones are checked by their statistics)."""
import numpy as np

import fxkit
from tests.runtime.opcheck import case, randf


def _uniform01(a):
    assert a.min() >= 0 and a.max() < 1
    assert abs(a.mean() - 0.5) < 0.02 and abs(a.std() - (1 / 12) ** 0.5) < 0.02


def _standard_normal(a):
    assert abs(a.mean()) < 0.03 and abs(a.std() - 1) < 0.03


def _no_ref(*args, **kwargs):
    raise AssertionError("random ops are checked by statistics")


case("zeros", lambda r: ((2, 3), {}), lambda *s, **k: np.zeros(s), factory=True)
case("zeros", lambda r: (((2, 0),), {"dtype": fxkit.int32}), lambda s, dtype: np.zeros(s, np.int32), id="tuple-int32-empty",
     factory=True, dtype=fxkit.int32)
case("ones", lambda r: ((4,), {"dtype": fxkit.float16}), lambda *s, dtype: np.ones(s, np.float16), factory=True,
     dtype=fxkit.float16)
case("empty", lambda r: ((3, 2), {}), None, factory=True, dtype=fxkit.float32,
     check=lambda a: (a.shape == (3, 2)) or (_ for _ in ()).throw(AssertionError(a.shape)))
case("full", lambda r: (((2, 2), 7), {}), lambda s, v: np.full(s, 7, np.int64), factory=True, dtype=fxkit.int64,
     id="int-value-int64")
case("full", lambda r: (((2, 2), 1.5), {}), lambda s, v: np.full(s, 1.5), factory=True, id="float-value-float32")
case("full", lambda r: (([3], True), {}), lambda s, v: np.full(s, True), factory=True, id="bool-value")
case("arange", lambda r: ((5,), {}), lambda e: np.arange(5), factory=True)
case("arange", lambda r: ((1, 2.0, 0.25), {}), lambda s, e, st: np.arange(1, 2.0, 0.25), factory=True,
     id="float-step")
case("arange", lambda r: ((10, 0, -3), {}), lambda s, e, st: np.arange(10, 0, -3), factory=True, id="negative-step")
case("rand", lambda r: ((200, 100), {}), None, factory=True, dtype=fxkit.float32, check=_uniform01)
case("randn", lambda r: ((200, 100), {"dtype": fxkit.float64}), None, factory=True, dtype=fxkit.float64,
     check=_standard_normal)
case("zeros_like", lambda r: ((randf(r, 2, 3),), {}), lambda a: np.zeros_like(a))
case("ones_like", lambda r: ((randf(r, 2, 3).T,), {"dtype": fxkit.int64}), lambda a, dtype: np.ones(a.shape, np.int64),
     dtype=fxkit.int64)
case("empty_like", lambda r: ((randf(r, 5),), {}), None, dtype=fxkit.float32,
     check=lambda a: (a.shape == (5,)) or (_ for _ in ()).throw(AssertionError(a.shape)))
case("full_like", lambda r: ((randf(r, 2, 2), 3.5), {}), lambda a, v: np.full(a.shape, 3.5))
case("rand_like", lambda r: ((randf(r, 300, 100),), {}), None, dtype=fxkit.float32, check=_uniform01)
case("randn_like", lambda r: ((randf(r, 300, 100, dtype=np.float64),), {}), None, dtype=fxkit.float64,
     check=_standard_normal)
