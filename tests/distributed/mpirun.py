"""Start a script on K MPI ranks for a test, as ``fxkit launch`` does; skip when MPI is missing."""
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
MPIEXEC = shutil.which("mpiexec", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("mpiexec")
HAS_MPI = importlib.util.find_spec("mpi4py") is not None and MPIEXEC is not None
needs_mpi = pytest.mark.skipif(not HAS_MPI, reason="needs mpi4py and mpiexec (pip install fxkit[mpi])")
# Start-up of k Python processes importing fxkit, on a loaded 2-core machine.
STARTUP_SECONDS = 30


def mpirun(n, script, *args, timeout=STARTUP_SECONDS + 60, cwd=None):
    """Run ``script`` (a path) on ``n`` ranks; returns (completed process, seconds).

    ``-disable-auto-cleanup`` keeps the other ranks alive when one dies, so they
    report the lost rank themselves (``fxkit launch`` passes it too).
    """
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    command = [MPIEXEC, "-disable-auto-cleanup", "-n", str(n), sys.executable, str(script), *map(str, args)]
    start = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd or ROOT)
    return result, time.monotonic() - start


def output(result):
    return result.stdout[-4000:] + result.stderr[-4000:]
