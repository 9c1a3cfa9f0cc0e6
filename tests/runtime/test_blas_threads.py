"""numpy's OpenBLAS running its parallel jobs on numba's threads (`fxkit.runtime.blas_threads`)."""
import ctypes
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from fxkit.runtime import blas_threads  # noqa: E402

SHARED = blas_threads.share_blas_threads()
needs_sharing = pytest.mark.skipif(not SHARED, reason="no loaded OpenBLAS takes a threading callback here")
JOB = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p, ctypes.c_int)


def test_sharing_is_decided_once():
    assert blas_threads.share_blas_threads() == SHARED


def test_every_job_runs_once_with_its_own_data_and_the_callers_argument():
    calls, lock = [], threading.Lock()

    @JOB
    def job(index, data, argument):
        with lock:
            calls.append((index, data, argument, threading.get_ident()))

    base, size = 4096, 48
    blas_threads._run_jobs(ctypes.cast(job, ctypes.c_void_p).value, 5, size, base, 7)
    assert sorted(c[:3] for c in calls) == [(i, base + i * size, 7) for i in range(5)]


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="one numba thread")
def test_two_jobs_run_on_two_threads_even_when_the_caller_limited_numba_to_one():
    """OpenBLAS asked for two threads (threadpoolctl's limit, not numba's, sets its job count)."""
    threads, arrived, lock = set(), [], threading.Lock()

    @JOB
    def job(index, data, argument):
        with lock:
            arrived.append(index)
            threads.add(threading.get_ident())
        deadline = time.monotonic() + 5
        while len(arrived) < 2 and time.monotonic() < deadline:  # both jobs must be running at once
            time.sleep(0.001)

    previous = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        blas_threads._run_jobs(ctypes.cast(job, ctypes.c_void_p).value, 2, 8, 0, 0)
        assert numba.get_num_threads() == 1
    finally:
        numba.set_num_threads(previous)
    assert len(threads) == 2


@needs_sharing
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 5, 4), (64, 64, 64), (256, 384, 512), (1000, 8, 700)])
def test_threaded_products_match_float64(rng, dtype, shape):
    m, k, n = shape
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64) * k * np.finfo(dtype).eps
    assert np.all(np.abs(a @ b - expected) <= bound)


@needs_sharing
def test_lapack_through_the_shared_threads_solves(rng):
    a = rng.standard_normal((400, 400)) + 400 * np.eye(400)
    b = rng.standard_normal((400, 30))
    np.testing.assert_allclose(a @ np.linalg.solve(a, b), b, atol=1e-10)


@needs_sharing
def test_threads_multiplying_at_once_get_their_own_products(rng):
    """Pipeline stages multiply on several threads at once; OpenBLAS's jobs of two calls share packing
    buffers, so the callback runs one call's jobs at a time. Shapes of ResNet-18's convolutions and head,
    both operand layouts, against float64."""
    shapes = [(1024, 576, 64), (256, 1152, 128), (64, 2304, 256), (16, 4608, 512), (2, 512, 1000), (4096, 147, 64)]
    cases = []
    for m, k, n in shapes:
        a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
        expected = a.astype(np.float64) @ b.T.astype(np.float64)
        cases += [(a, b.T, expected), (a, np.ascontiguousarray(b.T), expected)]
    wrong = []

    def work(seed):
        order = np.random.default_rng(seed)
        for _ in range(40):
            a, b, expected = cases[order.integers(len(cases))]
            if np.abs(a @ b - expected).max() > 1e-3 * np.abs(expected).max():
                wrong.append((a.shape, b.shape))

    workers = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not wrong


@needs_sharing
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_multiplies_on_openblas_threads_again(rng):
    a = rng.standard_normal((400, 400))
    expected = a @ a
    pid = os.fork()
    if pid == 0:  # NOTE: the child must never return into pytest
        os._exit(0 if not blas_threads._SHARED and np.allclose(a @ a, expected) else 1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    pytest.fail("the forked child hung multiplying")


def test_opting_out_keeps_openblas_threads_and_quiets_numbas():
    script = ("import os; from fxkit.runtime.blas_threads import share_blas_threads; "
              "print(share_blas_threads(), os.environ['OMP_WAIT_POLICY'], os.environ['GOMP_SPINCOUNT'])")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env["FXKIT_SHARE_BLAS_THREADS"] = "0"
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "PASSIVE", "300"]


@numba.njit(parallel=True)
def _products_in_parallel(a, b, out):
    for i in numba.prange(out.shape[0]):
        out[i] = np.dot(a[i], b[i])


@needs_sharing
def test_blas_called_from_inside_a_parallel_kernel_runs_and_is_right(rng):
    """numba's ``np.dot`` calls scipy's OpenBLAS from numba's own threads: the jobs nest into the pool."""
    a, b = rng.standard_normal((4, 300, 300)), rng.standard_normal((4, 300, 300))
    out = np.empty_like(a)
    _products_in_parallel(a, b, out)
    for i in range(4):
        np.testing.assert_allclose(out[i], a[i] @ b[i], rtol=1e-12, atol=1e-10)
