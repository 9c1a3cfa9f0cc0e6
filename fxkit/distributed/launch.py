"""``fxkit launch -n N script.py [args]``: start a script on N MPI ranks, and name a rank that dies.

It runs ``mpiexec -disable-auto-cleanup -n N python rank_watcher.py script.py
args``: each rank is a small watcher process (`fxkit.distributed.rank_watcher`,
a file that imports nothing of fxkit, so it is ready at once) whose child runs
the script. The watcher knows how its child ended, so a rank
killed by a signal or crashing in C is reported with its rank number
("rank 1 (pid 4242) was killed by signal SIGKILL") instead of mpiexec's pid-only
notice; ``-disable-auto-cleanup`` keeps the other ranks alive long enough to
name it too, through their own collective deadline (see
`fxkit.distributed.process_group`), before the job ends. The child dies with
its watcher (``PR_SET_PDEATHSIG``), so cleaning up the job leaves nothing
behind. The plain ``mpiexec -n N python script.py`` runs the same script.
"""
import json
import pathlib
import shutil
import subprocess
import sys

from fxkit.errors import DistributedError

WATCHER = pathlib.Path(__file__).with_name("rank_watcher.py")
_RESULT = "RESULT "


def job_results(stdout):
    """The JSON values a job's ranks printed after ``RESULT ``, in the order they appear.

    mpiexec forwards each rank's output as it comes, so one rank's line can start right after another
    rank's text, before that rank's newline ("...: TrueRESULT {...}"): a result is read wherever it
    starts, not only at the start of a line, and ends where its JSON value ends.
    """
    decoder, results, at = json.JSONDecoder(), [], stdout.find(_RESULT)
    while at >= 0:
        try:
            value, end = decoder.raw_decode(stdout, at + len(_RESULT))
        except json.JSONDecodeError:
            end = at + len(_RESULT)
        else:
            results.append(value)
        at = stdout.find(_RESULT, end)
    return results


def find_mpiexec():
    """The ``mpiexec`` next to this Python (the mpich wheel's) or on PATH."""
    found = shutil.which("mpiexec", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("mpiexec")
    if found is None:
        raise DistributedError("fxkit launch: mpiexec was not found; install MPI from PyPI with "
                               "`pip install fxkit[mpi]` (mpi4py and the mpich wheel, which brings mpiexec)")
    return found


def command(n, script, args, mpiexec=None):
    """The ``mpiexec`` command line that `launch` runs."""
    if not isinstance(n, int) or n < 1:
        raise DistributedError(f"fxkit launch: -n is the number of ranks, a positive int; got {n!r}")
    return [mpiexec or find_mpiexec(), "-disable-auto-cleanup", "-n", str(n), sys.executable, str(WATCHER),
            str(script), *args]


def launch(n, script, args=(), env=None):
    """Run ``script`` with ``args`` on ``n`` ranks; returns the job's exit status."""
    if not pathlib.Path(script).is_file():
        raise DistributedError(f"fxkit launch: no script at {script}; pass the path of a Python file")
    return subprocess.call(command(n, script, list(args)), env=env)
