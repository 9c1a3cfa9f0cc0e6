"""Cases for fxkit/runtime/ops/casts.py."""
import numpy as np

import fxkit
from tests.runtime.opcheck import case, randf, randi

case("to", lambda r: ((randf(r, 3, 4), fxkit.float64), {}), lambda a, d: a, dtype=fxkit.float64)
case("to", lambda r: ((randf(r, 3, 4),), {"dtype": fxkit.int32}), lambda a, dtype: a.astype(np.int32),
     id="kw-dtype-truncates", dtype=fxkit.int32)
case("to", lambda r: ((randi(r, 5), "cpu"), {}), lambda a, d: a, id="same-device")
case("to", lambda r: ((randf(r, 4)[::2], np.zeros(1, np.float16)), {}), lambda a, o: a.astype(np.float16),
     id="like-tensor-noncontiguous", dtype=fxkit.float16, rtol=1e-3, atol=1e-3)
case("float", lambda r: ((randi(r, 2, 3),), {}), lambda a: a.astype(np.float32), dtype=fxkit.float32)
case("double", lambda r: ((randf(r, 2, 3),), {}), lambda a: a, dtype=fxkit.float64)
case("half", lambda r: ((randf(r, 2, 3),), {}), lambda a: a.astype(np.float16), dtype=fxkit.float16, rtol=1e-3, atol=1e-3)
case("int", lambda r: ((randf(r, 2, 3) * 10,), {}), lambda a: a.astype(np.float32).astype(np.int32), dtype=fxkit.int32)
case("long", lambda r: ((np.array([True, False]),), {}), lambda a: a.astype(np.int64), dtype=fxkit.int64)
case("bool", lambda r: ((np.array([0.0, -1.5, 2.0], np.float32),), {}), lambda a: a.astype(bool), dtype=fxkit.bool_)
