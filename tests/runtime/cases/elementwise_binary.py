"""Cases for fxkit/runtime/ops/elementwise_binary.py."""
import numpy as np

from tests.runtime.opcheck import case, randf

case("add", lambda r: ((randf(r, 3, 4), randf(r, 4)), {}), lambda a, b: a + b, id="broadcast")
case("add", lambda r: ((randf(r, 3, 4), 2.5), {"alpha": 3}), lambda a, b, alpha: a + alpha * b, id="alpha")
