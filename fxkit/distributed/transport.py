"""The MPI transport shared by the pipeline executor and the collectives: timed waits and messages.

`import_mpi` loads mpi4py; `poll` is the one deadline loop every wait on a
peer goes through (``Test``/``Iprobe`` and short sleeps, no blocking call);
`Channel` sends values point to point for `fxkit.backends.mpi_pipeline`;
`fxkit.distributed.work` waits on non-blocking collectives with `poll`.

Point-to-point messages of tensors between MPI ranks, with deadlines:
A message is a small JSON header (the nesting of the values, each array's
shape and dtype, the micro-batch number) followed by one message per array,
sent from its own memory through the buffer protocol: nothing is pickled, so
a peer can never make this rank run code. Every wait polls with a deadline
(``Iprobe``/``Test`` and short sleeps, no blocking call), so a peer that died
or hangs ends in a `PipelineError` naming it instead of a hang. A rank that
fails sends an error message to its neighbours, which pass it on, so every
rank stops with the first failure's text instead of waiting out its deadline.

Values may be Tensors (sent from the host; received on the cpu), and ints,
floats, bools, strings and None, nested in tuples, lists and dicts.
"""
import contextlib
import json
import sys
import threading
import time
import traceback

import numpy as np

from fxkit.errors import FxkitError, PipelineError
from fxkit.runtime.tensor import Tensor

HEADER, DATA, ERROR, HELLO = 11, 12, 13, 14
_FIRST_PAUSE, _LONGEST_PAUSE = 2e-5, 2.5e-4


def import_mpi(error=PipelineError):
    """mpi4py's ``MPI``, or an ``error`` (a `PipelineError` by default) saying how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise error("running on several processes needs mpi4py and an MPI runtime; install them from PyPI with "
                            "`pip install fxkit[mpi]` (mpi4py and the mpich wheel), then start the script with "
                            "`mpiexec -n K python script.py`") from exc
    return MPI


def poll(ready, seconds, on_idle=None, spin=0.0):
    """Call ``ready()`` until it is true or ``seconds`` have passed; True when it became ready.

    Sleeps between tries, from 20 us growing to 250 us, so a wait costs little
    CPU on a shared machine yet notices completion quickly. With ``spin``, the
    first ``spin`` seconds try without pausing, as a blocking MPI call does: a
    collective in MPI moves on only while this process is inside an MPI call,
    so a long reduction waited for with sleeps would run at a fraction of its speed.
    ``on_idle()`` runs between tries (checking for a peer's error message,
    answering a roll call), at most every 1 ms while spinning, and may raise
    to end the wait.
    """
    start = time.monotonic()
    deadline = start + seconds
    spin_until = start + spin
    pause = _FIRST_PAUSE
    idle_at = start
    while not ready():
        now = time.monotonic()
        if now < spin_until:
            if on_idle is not None and now >= idle_at:
                on_idle()
                idle_at = now + 1e-3
            continue  # NOTE: no sleep at all, as a blocking MPI call spins (time.sleep(0) would wait ~50 us)
        if on_idle is not None:
            on_idle()
        if time.monotonic() > deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, _LONGEST_PAUSE)
    return True


def encode(values, j):
    """``(header bytes, arrays)`` of a nesting of values; arrays are host-side, contiguous."""
    arrays = []

    def tree(v):
        if isinstance(v, Tensor):
            host = v.cpu().numpy() if v.device.type != "cpu" else v.numpy()
            arrays.append(np.ascontiguousarray(host))
            return {"array": len(arrays) - 1}
        if isinstance(v, (tuple, list)):
            return {"tuple" if isinstance(v, tuple) else "list": [tree(x) for x in v]}
        if isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                raise PipelineError(f"MPI pipeline: only dicts with str keys can be sent, got keys {list(v)}")
            return {"dict": {k: tree(x) for k, x in v.items()}}
        if v is None or isinstance(v, (bool, int, float, str)):
            return {"value": v}
        raise PipelineError(f"MPI pipeline: a {type(v).__name__} value cannot be sent between ranks (tensors, "
                            f"numbers, strings, None and tuples/lists/dicts of them can)")

    shape = tree(values)
    header = {"j": j, "tree": shape, "arrays": [[list(a.shape), a.dtype.str] for a in arrays]}
    return json.dumps(header).encode(), arrays


def decode(header, arrays):
    """The values of a decoded header, with its arrays as cpu Tensors."""

    def build(t):
        if "array" in t:
            return Tensor(arrays[t["array"]])
        if "tuple" in t:
            return tuple(build(x) for x in t["tuple"])
        if "list" in t:
            return [build(x) for x in t["list"]]
        if "dict" in t:
            return {k: build(x) for k, x in t["dict"].items()}
        return t["value"]

    return build(header["tree"])


class Channel:
    """Timed sends and receives of value messages on one communicator.

    Args:
        comm: the communicator (``MPI.COMM_WORLD``).
        timeout: seconds any one wait may take before the peer is declared lost.
        describe: ``rank -> str`` naming a rank in messages (``"rank 1 (stage 1)"``).

    Attributes:
        stopped: set it to make every wait on other threads give up at once
            (this rank failed; its helper threads must not wait out the deadline).
    """

    def __init__(self, comm, timeout, describe):
        self.MPI = import_mpi()
        self.comm = comm
        self.rank = comm.Get_rank()
        self.timeout = timeout
        self.describe = describe
        self.stopped = threading.Event()

    def send(self, values, dest, j, tag=HEADER):
        """Send ``values`` (micro-batch ``j``) to ``dest``; returns once the data left this rank's buffers."""
        header, arrays = encode(values, j)
        requests = [self.comm.Isend([np.frombuffer(header, np.uint8), self.MPI.BYTE], dest=dest, tag=tag)]
        for a in arrays:
            requests.append(self.comm.Isend([a.reshape(-1).view(np.uint8), self.MPI.BYTE], dest=dest, tag=DATA))
        self.wait(lambda: self.MPI.Request.Testall(requests), f"{self.describe(dest)} to take micro-batch {j}",
                  dest, on_timeout=lambda: _cancel(requests))

    def recv(self, source, tag=HEADER, what="micro-batch"):
        """``(j, values)`` of the next message from ``source``."""
        status = self.MPI.Status()
        self.wait(lambda: self.comm.Iprobe(source=source, tag=tag, status=status),
                  f"{what} from {self.describe(source)}", source)
        raw = np.empty(status.Get_count(self.MPI.BYTE), np.uint8)
        self.comm.Recv([raw, self.MPI.BYTE], source=source, tag=tag)
        header = json.loads(raw.tobytes())
        arrays = [np.empty(shape, np.dtype(dtype)) for shape, dtype in header["arrays"]]
        requests = [self.comm.Irecv([a.reshape(-1).view(np.uint8), self.MPI.BYTE], source=source, tag=DATA)
                    for a in arrays]
        self.wait(lambda: self.MPI.Request.Testall(requests),
                  f"the tensors of micro-batch {header['j']} from {self.describe(source)}", source,
                  on_timeout=lambda: _cancel(requests))
        return header["j"], decode(header, arrays)

    def wait(self, ready, what, peer, on_timeout=None):
        """Poll ``ready()`` until it is true; raise when ``peer`` reported an error or the deadline passed."""

        def idle():
            if self.stopped.is_set():
                raise PipelineError(f"{self.describe(self.rank)}: stopped waiting for {what}: this rank failed")
            self.check_error(peer)

        if not poll(ready, self.timeout, idle):
            if on_timeout is not None:
                on_timeout()
            raise PipelineError(
                f"{self.describe(self.rank)}: waited {self.timeout:g} s for {what}, which never came: that "
                f"rank died, hangs, or runs a different pipeline (every rank must run the same script with "
                f"the same arguments, one rank per stage); pass a larger timeout= if its stage is just slow")

    def check_error(self, peer):
        """Raise the error ``peer`` reported, if it sent one."""
        if peer is None or not self.comm.Iprobe(source=peer, tag=ERROR):
            return
        status = self.MPI.Status()
        self.comm.Probe(source=peer, tag=ERROR, status=status)
        raw = np.empty(status.Get_count(self.MPI.BYTE), np.uint8)
        self.comm.Recv([raw, self.MPI.BYTE], source=peer, tag=ERROR)
        raise PeerError(raw.tobytes().decode(errors="replace"))

    def report_error(self, message, peers):
        """Tell ``peers`` that the pipeline failed (best effort, bounded wait)."""
        payload = np.frombuffer(message.encode(), np.uint8)
        requests = [self.comm.Isend([payload, self.MPI.BYTE], dest=p, tag=ERROR) for p in peers]
        deadline = time.monotonic() + min(self.timeout, 2.0)
        while not self.MPI.Request.Testall(requests) and time.monotonic() < deadline:
            time.sleep(_LONGEST_PAUSE)


class PeerError(PipelineError):
    """Another rank failed and told this one; the text is that rank's error."""


def _cancel(requests):
    for r in requests:
        try:
            r.Cancel()
        except Exception:  # noqa: BLE001  (the peer is gone; a request that cannot be cancelled is left)
            pass


@contextlib.contextmanager
def abort_on_error(comm=None, exit_code=1, grace=1.0):
    """End the whole MPI job when the block raises: print the error, then ``MPI_Abort``.

    A rank that fails cannot just exit: a peer that hangs would keep ``mpiexec``
    waiting, and ``MPI_Finalize`` may wait on messages to a dead peer.

    Args:
        comm: the communicator to abort; defaults to ``MPI.COMM_WORLD``.
        exit_code: the job's exit status.
        grace: seconds to wait before aborting, so neighbours this rank told
            of its failure print their own errors first.

    Example:
        >>> with abort_on_error():
        ...     out = MPIPipeline(parent, chunks=4)(x)
    """
    MPI = import_mpi()
    comm = comm if comm is not None else MPI.COMM_WORLD
    try:
        yield
    except BaseException as exc:  # noqa: BLE001  (anything that ends this rank ends the job)
        if isinstance(exc, FxkitError):
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        else:
            traceback.print_exc()
            sys.stderr.flush()
        time.sleep(grace)
        comm.Abort(exit_code)
