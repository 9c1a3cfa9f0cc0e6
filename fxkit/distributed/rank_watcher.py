"""One rank of ``fxkit launch``: run the script as a child process and say how it ended.

mpiexec starts this file once per rank. It imports nothing of fxkit (it is
ready at once) and sets a no-op handler for SIGUSR1, which mpiexec sends the
ranks' processes when one of them ends; the child, in its own process group,
runs the script. When the child is killed by a signal, this process prints
which rank it was, something mpiexec's own notice (a pid) does not say. The
child dies with this process (``PR_SET_PDEATHSIG``), so ending the job leaves
nothing behind.
"""
import ctypes
import os
import signal
import subprocess
import sys

signal.signal(signal.SIGUSR1, lambda *_: None)
_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the child may outlive a killed watcher
        pass


def watch_rank(script, args):
    """Run the script of one rank as a child and report how it ended; the child's exit status."""
    rank = os.environ.get("PMI_RANK", "?")
    # NOTE: close_fds=False: the child talks to mpiexec through the PMI socket this process inherited. Its own
    # process group: mpiexec's signals to this rank's group (SIGUSR1 when a peer ends) reach the watcher only.
    child = subprocess.Popen([sys.executable, script, *args], close_fds=False, preexec_fn=_die_with_parent,
                             start_new_session=True)
    while True:
        try:
            code = child.wait()
            break
        except KeyboardInterrupt:
            child.send_signal(signal.SIGINT)
    if code < 0:
        name = signal.Signals(-code).name
        print(f"DistributedError: rank {rank} (pid {child.pid}) was killed by signal {name}: the other ranks "
              f"stop at their next collective", file=sys.stderr, flush=True)
        return 128 - code
    return code


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: fxkit launch -n N script.py [args] (this file runs one rank for it)")
    code = watch_rank(sys.argv[1], sys.argv[2:])
    sys.stdout.flush()
    sys.stderr.flush()
    # NOTE: os._exit: interpreter shutdown restores SIGUSR1's default action, and mpiexec signals this
    # process when the other ranks end; a signal in that window would end the job with "signal 10".
    os._exit(code)
