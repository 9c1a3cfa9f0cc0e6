"""Backends: `fxkit.compile` and the code generators it drives.

``fxkit.compile(model, backend=...)`` traces, runs the backend's passes and
lowers one specialisation per input signature (`fxkit.backends.compile`);
a backend is a `Backend` subclass registered by name (`fxkit.backends.backend`).
Importing a backend's module registers it.
"""
from fxkit.backends.backend import Backend, Lowered, backend_names, get_backend, register_backend
from fxkit.backends.compile import CompiledModule, CompileStats, compile
from fxkit.backends import numpy_backend  # noqa: F401  (registers "numpy")
from fxkit.backends import numba_backend  # noqa: F401  (registers "numba" where numba is installed)
from fxkit.backends import cupy_backend  # noqa: F401  (registers "cupy"; cupy is imported when a GPU is used)
from fxkit.runtime.ops.quantized_ops import register_quantized_engine


def _numba_int8_kernels():
    # NOTE: imported when the engine is chosen: numba takes a second to load.
    from fxkit.backends import numba_int8

    return numba_int8.KERNELS


register_quantized_engine("numba", _numba_int8_kernels)  # set_quantized_engine("numba") picks it

__all__ = ["Backend", "CompileStats", "CompiledModule", "Lowered", "backend_names", "compile", "get_backend",
           "register_backend"]
