"""The integer engines the kernel tests run on: the reference, the numba engine as this CPU runs it, and
the numba engine's int16 tiles even where this CPU has VNNI's byte tiles (so both paths are checked here)."""
import contextlib

from fxkit.backends import numba_int8, numba_int8_vnni
from fxkit.runtime.ops import quantized_ops as Q

ENGINES = ["reference", "numba"] + (["numba-int16"] if numba_int8_vnni.available() else [])


@contextlib.contextmanager
def running_on(name):
    """``with running_on("numba-int16"): ...``: run the integer kernels on engine ``name``."""
    forced = name == "numba-int16"
    previous = numba_int8._VNNI
    with Q.use_quantized_engine("numba" if forced else name):
        numba_int8._VNNI = previous and not forced
        try:
            yield
        finally:
            numba_int8._VNNI = previous
