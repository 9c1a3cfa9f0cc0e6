"""Generated CUDA kernels checked without a GPU: compiled by nvcc, and compiled and run on the CPU.

* `nvcc_check(sources)` compiles kernel modules with the local nvcc
  (``nvcc -c -arch=sm_90``), all in one translation unit: each module sits in
  a namespace of its own and its ``extern "C"`` entries are renamed by macros,
  so the text compiled is exactly the text cupy's NVRTC gets.
* `HostCompiler` compiles the same text with g++ behind a prelude that turns
  the CUDA keywords into C++ (``__global__`` -> nothing, ``threadIdx`` and
  ``blockIdx`` -> 0, ``blockDim`` and ``gridDim`` -> 1): a kernel then runs
  as one thread of one block, whose grid-stride loops cover every element and
  every row. The math library functions are the C ones CUDA also provides, and
  the helpers' ``#ifndef __CUDA_ARCH__`` branches stand in for the half
  conversions and warp shuffles (a block of one thread reduces nothing). Its
  modules have cupy's ``get_function(name)(grid, block, args)`` interface, so
  `fxkit.backends.cupy_backend.lower_arrays` runs whole models on them.
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

import numpy as np

from fxkit.backends.cupy_backend import CupyBackend, kernel_source, lower_arrays
from fxkit.transforms.fused_op import FusedOp

NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if os.path.exists("/usr/local/bin/nvcc") else None)
CXX = shutil.which("g++")
ENTRIES = ("kernel", "kernel_strided")
HOST_PRELUDE = """\
#include <math.h>
struct fx_dim3 { unsigned int x, y, z; };
static const fx_dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
"""


def module_key(source):
    return "m" + hashlib.sha1(source.encode()).hexdigest()[:16]


def translation_unit(sources):
    """One C++ text holding every module of ``sources``, entries renamed ``<key>_kernel``."""
    parts = []
    for source in dict.fromkeys(sources):
        key = module_key(source)
        defines = "".join(f"#define {e} {key}_{e}\n" for e in ENTRIES)
        undefs = "".join(f"#undef {e}\n" for e in ENTRIES)
        parts.append(f"{defines}namespace {key} {{\n{source}}}\n{undefs}")
    return "\n".join(parts)


def _run(command, text, suffix, workdir):
    path = os.path.join(workdir, f"unit{suffix}")
    with open(path, "w") as f:
        f.write(text)
    done = subprocess.run(command + [path], capture_output=True, text=True, cwd=workdir)
    if done.returncode != 0:
        numbered = "\n".join(f"{i + 1:4d} {line}" for i, line in enumerate(text.splitlines()))
        raise AssertionError(f"{' '.join(command)} failed:\n{done.stderr}\n{numbered}")
    return done


def nvcc_check(sources):
    """Compile kernel modules with nvcc for sm_90 (AssertionError with the compiler's output if one fails)."""
    with tempfile.TemporaryDirectory() as workdir:
        _run([NVCC, "-c", "-arch=sm_90", "-o", os.path.join(workdir, "unit.o")], translation_unit(sources), ".cu",
             workdir)


class HostFunction:
    """A kernel entry compiled for the CPU, called like a cupy kernel: ``f(grid, block, args)``."""

    def __init__(self, function):
        self.function = function
        function.restype = None

    def __call__(self, grid, block, args):
        self.function(*[_c_argument(a) for a in args])


def _c_argument(value):
    if isinstance(value, np.ndarray):
        return ctypes.c_void_p(value.ctypes.data)
    if isinstance(value, np.bool_):
        return ctypes.c_bool(bool(value))
    if isinstance(value, np.integer):
        return ctypes.c_longlong(int(value))
    if isinstance(value, np.floating):
        return ctypes.c_double(float(value))
    raise TypeError(f"a kernel argument must be an array or a numpy scalar, got {type(value).__name__}")


class HostModule:
    """One kernel module inside a host library."""

    def __init__(self, library, key):
        self.library = library
        self.key = key

    def get_function(self, name):
        return HostFunction(getattr(self.library, f"{self.key}_{name}"))


class HostCompiler:
    """Compiles kernel modules for the CPU with g++ (a library per batch), loads them by source.

    Args:
        workdir: where the libraries are written.
    """

    def __init__(self, workdir):
        self.workdir = workdir
        self.modules = {}
        self._count = 0

    def compile(self, sources):
        """Compile every module of ``sources`` not compiled yet, in one g++ run."""
        missing = [s for s in dict.fromkeys(sources) if s not in self.modules]
        if not missing:
            return
        self._count += 1
        library = os.path.join(self.workdir, f"kernels{self._count}.so")
        _run([CXX, "-std=c++17", "-O1", "-shared", "-fPIC", "-o", library], HOST_PRELUDE + translation_unit(missing),
             f"{self._count}.cpp", self.workdir)
        loaded = ctypes.CDLL(library)
        for source in missing:
            self.modules[source] = HostModule(loaded, module_key(source))

    def load(self, source):
        """The module of ``source`` (compiling it alone if no batch held it): `lower_arrays`' loader."""
        self.compile([source])
        return self.modules[source]


class HostCupyBackend(CupyBackend):
    """The cupy backend's passes and generated code with its kernels compiled for the CPU.

    Every kernel of a specialisation is also compiled by nvcc (when ``nvcc``),
    so ``fxkit.compile(model, backend=HostCupyBackend(compiler))`` checks what
    the cupy backend would run on a GPU: its kernels compile, and the model
    computes what eager mode computes.

    Attributes:
        sources: the `CudaKernelSource` of each kernel of the last lowering.
    """

    name = "cupy-on-host"
    device_types = ("cpu",)

    def __init__(self, compiler, nvcc=True):
        self.compiler = compiler
        self.nvcc = nvcc
        self.sources = []

    def lower(self, gm, specs):
        fused = [n for n in gm.graph.nodes if n.op == "call" and isinstance(n.target, FusedOp)]
        self.sources = [s for s in map(kernel_source, fused) if s is not None]
        texts = [s.source for s in self.sources]
        self.compiler.compile(texts)
        if self.nvcc and texts:
            nvcc_check(texts)
        return lower_arrays(gm, np, self.compiler.load, 1, self.name)
