"""One thread pool for numba's kernels and numpy's BLAS: OpenBLAS's parallel jobs run on numba's threads.

numpy's OpenBLAS keeps its own worker threads, and after each threaded call
they spin for about 0.1 s (``2**28`` cycles) waiting for the next one. A numba
parallel kernel that starts in that window shares a core with a spinning BLAS
thread, and its static halves finish at half speed: on 2 cores an int8
convolution took 17 ms right after a float32 one and 9.6 ms alone, and a model
that mixes the two (a quantized network with a float head, dynamic int8
linears between float attention products, any interleaved benchmark) pays
that on every kernel. The reverse starves BLAS behind numba's spinning
OpenMP threads. PyTorch avoids both by running every kernel on one OpenMP
pool; this module does the same for numpy's BLAS.

OpenBLAS 0.3.27+ takes a threading callback
(``openblas_set_threads_callback_function``): instead of waking its workers it
hands the caller ``numjobs`` jobs, and `_callback`, a numba ``cfunc``, runs
them with ``prange`` on numba's OpenMP threads, one job per thread (as many
threads as OpenBLAS asked for, so ``threadpoolctl`` limits still hold).
OpenBLAS computes exactly what its own pool would; only the threads differ. The
jobs of concurrent calls would share OpenBLAS's packing buffers, so `_callback`
runs one call's jobs at a time (threads multiplying at once wait their turn).

`share_blas_threads` installs it once, before numba's pool starts (the numba
backend, the numba int8 engine and SGD's fused update call it), in every
OpenBLAS this process has loaded (numpy's and scipy's, which numba's
``np.dot`` calls). Nothing is installed, and the previous behaviour stays,
when:

- ``FXKIT_SHARE_BLAS_THREADS=0`` is set;
- no loaded OpenBLAS has the callback (MKL or Accelerate builds of numpy,
  OpenBLAS before 0.3.27, a platform without ``/proc/self/maps``);
- numba's threading layer is ``workqueue``, which aborts the process when two
  threads launch parallel work at once (two Python threads calling BLAS).

A forked child gets OpenBLAS's own threads back (`_restore_in_child`): GNU
OpenMP's pool does not survive ``fork``.
"""
import ctypes
import os
import threading

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic

_SETTERS = tuple(f"{prefix}openblas_set_threads_callback_function{suffix}"
                 for prefix in ("", "scipy_") for suffix in ("", "64_", "_64"))
"""The callback setter's exported name, as plain OpenBLAS and the scipy-openblas wheels
(numpy's and scipy's, with their symbol prefix and 64-bit-integer suffix) spell it."""
_THREAD_SAFE_LAYERS = ("omp", "tbb")
_LOCK = threading.Lock()
_SHARED = []  # (library path, setter) of every OpenBLAS running its jobs on numba's threads
_DECIDED = []  # one entry once share_blas_threads has run in this process


@intrinsic
def _run_job(typingctx, dojob, index, jobdata, dojob_data):
    """Call OpenBLAS's ``void dojob(int index, void *jobdata, int dojob_data)`` at address ``dojob``."""
    signature = types.void(types.intp, types.int32, types.intp, types.int32)

    def codegen(context, builder, sig, args):
        byte_pointer = ir.IntType(8).as_pointer()
        job_type = ir.FunctionType(ir.VoidType(), [ir.IntType(32), byte_pointer, ir.IntType(32)])
        function = builder.inttoptr(args[0], job_type.as_pointer())
        builder.call(function, [args[1], builder.inttoptr(args[2], byte_pointer), args[3]])
        return context.get_dummy_value()

    return signature, codegen


@numba.njit(parallel=True, nogil=True)
def _run_jobs(dojob, numjobs, element_size, jobdata, dojob_data):
    """Job ``i`` (its data at ``jobdata + i * element_size``) on numba's thread ``i``."""
    previous = numba.get_num_threads()
    numba.set_num_threads(max(1, min(numjobs, numba.config.NUMBA_NUM_THREADS)))
    for i in prange(numjobs):
        _run_job(dojob, np.int32(i), jobdata + i * element_size, dojob_data)
    numba.set_num_threads(previous)


_BUSY = np.zeros(8, np.int64)  # word 0: 1 while some thread runs OpenBLAS jobs (a cache line of its own)
_BUSY_ADDRESS = _BUSY.ctypes.data


@intrinsic
def _hold(typingctx, address):
    """Take the lock word at ``address``: compare-and-swap 0 -> 1, yielding the core between tries."""
    signature = types.void(types.intp)

    def codegen(context, builder, sig, args):
        word = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        yield_core = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []),
                                                    "sched_yield")
        retry = builder.append_basic_block("retry")
        wait = builder.append_basic_block("wait")
        held = builder.append_basic_block("held")
        builder.branch(retry)
        builder.position_at_end(retry)
        swapped = builder.cmpxchg(word, ir.Constant(ir.IntType(64), 0), ir.Constant(ir.IntType(64), 1),
                                  "acquire", "monotonic")
        builder.cbranch(builder.extract_value(swapped, 1), held, wait)
        builder.position_at_end(wait)
        builder.call(yield_core, [])
        builder.branch(retry)
        builder.position_at_end(held)
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def _free(typingctx, address):
    """Release the lock word at ``address``."""
    signature = types.void(types.intp)

    def codegen(context, builder, sig, args):
        word = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        builder.store_atomic(ir.Constant(ir.IntType(64), 0), word, "release", 8)
        return context.get_dummy_value()

    return signature, codegen


# NOTE: pointers arrive as intp: on every 64-bit C ABI a pointer and an int64 argument pass alike.
@numba.cfunc(types.void(types.int32, types.intp, types.int32, types.intp, types.intp, types.int32), nopython=True)
def _callback(sync, dojob, numjobs, element_size, jobdata, dojob_data):
    """OpenBLAS's ``openblas_threads_callback``: run the jobs and return once all are done (any ``sync``).

    NOTE: one call's jobs at a time: OpenBLAS hands every call the same ``dojob_data`` and its jobs
    pack into per-job-index buffers, so two threads multiplying at once (pipeline stages) overwrote
    each other's packed blocks (36 of 240 products wrong, 4 threads on ResNet-18's shapes)."""
    _hold(_BUSY_ADDRESS)
    _run_jobs(dojob, numjobs, element_size, jobdata, dojob_data)
    _free(_BUSY_ADDRESS)


def _openblas_setters():
    """``(path, setter)`` of each loaded OpenBLAS that takes a threading callback."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps if len(line.split(None, 5)) == 6}
    except OSError:
        return []
    setters = []
    for path in sorted(p for p in paths if "openblas" in os.path.basename(p).lower() and os.path.isfile(p)):
        library = ctypes.CDLL(path)  # NOTE: already loaded: this only takes another reference
        for name in _SETTERS:
            setter = getattr(library, name, None)
            if setter is not None:
                setter.argtypes, setter.restype = [ctypes.c_void_p], None
                setters.append((path, setter))
                break
    return setters


def _restore_in_child():
    for _, setter in _SHARED:
        setter(None)
    _SHARED.clear()


def share_blas_threads():
    """Run OpenBLAS's parallel jobs on numba's threads from now on (see the module docstring);
    returns the paths of the libraries that do. Idempotent; call it before numba's pool starts.

    When nothing can be shared, numba's OpenMP threads are told to sleep after a kernel instead
    of spinning (``OMP_WAIT_POLICY=PASSIVE``, ``GOMP_SPINCOUNT=300``, unless the user set them),
    so that they do not starve OpenBLAS's own threads: an eager LSTM cell ran 80x slower after one
    numba kernel without it."""
    with _LOCK:
        if not _DECIDED:
            _DECIDED.append(True)
            setters = [] if os.environ.get("FXKIT_SHARE_BLAS_THREADS") == "0" else _openblas_setters()
            if not setters:
                os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
                os.environ.setdefault("GOMP_SPINCOUNT", "300")
            _run_jobs(0, 0, 0, 0, 0)  # NOTE: starts numba's pool, so that its threading layer is known
            if setters and numba.threading_layer() in _THREAD_SAFE_LAYERS:
                for path, setter in setters:
                    setter(_callback.address)
                    _SHARED.append((path, setter))
                os.register_at_fork(after_in_child=_restore_in_child)
        return [path for path, _ in _SHARED]
