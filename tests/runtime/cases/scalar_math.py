"""Cases for fxkit/runtime/ops/scalar_math.py: ``math`` functions on Python numbers (traced sizes).

References are numpy float64 (or Python integer arithmetic for floor/ceil/gcd/isqrt),
not the ``math`` module the ops call.
"""
import numpy as np

from tests.runtime.opcheck import case

case("math_sqrt", lambda r: ((64,), {}), lambda n: float(np.sqrt(np.float64(n))), id="int")
case("math_sqrt", lambda r: ((2.25,), {}), lambda n: float(np.sqrt(np.float64(n))), id="float")
case("math_floor", lambda r: ((7.5,), {}), lambda v: int(np.floor(v)), id="float")
case("math_floor", lambda r: ((-7,), {}), lambda v: -7, id="int")
case("math_ceil", lambda r: ((7.25,), {}), lambda v: int(np.ceil(v)), id="float")
case("math_ceil", lambda r: ((3,), {}), lambda v: 3, id="int")
case("math_trunc", lambda r: ((-7.75,), {}), lambda v: int(np.trunc(v)), id="negative")
case("math_trunc", lambda r: ((9,), {}), lambda v: 9, id="int")
case("math_exp", lambda r: ((2,), {}), lambda v: float(np.exp(np.float64(v))), id="int")
case("math_log2", lambda r: ((32,), {}), lambda v: float(np.log2(np.float64(v))), id="int")
case("math_log10", lambda r: ((1000,), {}), lambda v: float(np.log10(np.float64(v))), id="int")
case("math_fabs", lambda r: ((-3,), {}), lambda v: 3.0, id="int")
case("math_log", lambda r: ((100,), {}), lambda v: float(np.log(np.float64(v))), id="natural")
case("math_log", lambda r: ((81, 3), {}), lambda v, b: float(np.log(np.float64(v)) / np.log(np.float64(b))),
     id="base")
case("math_pow", lambda r: ((3, 4), {}), lambda a, b: float(np.power(np.float64(a), b)), id="int")
case("math_gcd", lambda r: ((84, 36), {}), lambda a, b: int(np.gcd(a, b)), id="int")
case("math_isqrt", lambda r: ((99,), {}), lambda n: int(np.floor(np.sqrt(np.float64(n)))), id="int")
