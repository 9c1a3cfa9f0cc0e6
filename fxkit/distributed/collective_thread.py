"""`CollectiveThread`: a thread sitting inside blocking MPI all-reduces, so they move on while the host is busy.

MPI (MPICH here) moves a non-blocking collective on only inside MPI calls of
the process. Between autograd nodes the reducer tests its all-reduces, but a
long node (a matmul) or a wait off the cpu (an accelerator computing, here a
``time.sleep`` standing for one) makes no MPI call, so a bucket all-reduce
started before it stalls until it ends. A Python thread that wakes every
100 us to call ``Iprobe`` keeps MPI going, yet each wake-up takes the GIL
from the main thread, whose backward is Python between the numpy calls:
measured (benchmarks/distributed.py, 2 ranks, backward waiting 20 ms off the
cpu per layer), it hid the all-reduces and slowed the backward more than it
hid. This thread instead runs each all-reduce as one blocking
``MPI_Allreduce`` on a communicator of its own, as PyTorch's
``ProcessGroupMPI`` runs its collectives on a worker thread: mpi4py releases
the GIL for the whole call, so the thread takes it twice per collective
(to pick it up and to report it done) and never while MPI works.

The main thread never blocks inside MPI: it waits for the thread's `ThreadWork`
with the group's deadline and answers roll calls meanwhile, so a lost peer is
still named (`fxkit.distributed.process_group`); the thread then stays in its
call, and the process ends with ``MPI_Abort``, as after any broken collective.

MPICH's own progress thread (``MPICH_ASYNC_PROGRESS=1``) needs no GIL but
spins a core all the time: on a machine with no core to spare per rank it
slows everything (measured there too).
"""
import atexit
import queue
import threading
import time
import weakref

from fxkit.distributed.work import mpi_failure

# How long a wait sleeps on the thread's signal between two looks at roll calls and the deadline.
_WAKE_SECONDS = 0.01
# How long exiting waits for a thread to leave its collective (one stuck with a lost peer never does).
_JOIN_SECONDS = 1.0


class CollectiveThread:
    """Runs ``group``'s all-reduces queued by `all_reduce`, one at a time, in the order queued.

    Building it is collective over ``group`` (it duplicates the communicator):
    every member builds its own at the same point. Every rank must queue the
    same all-reduces in the same order, as for any collective.
    """

    def __init__(self, group):
        self.group = group
        self.comm = group.comm.Dup()  # NOTE: collective; never matches the main thread's own collectives
        self._queue = queue.SimpleQueue()
        self._thread = None

    def all_reduce(self, array, mpi_op, what):
        """Queue an in-place all-reduce of ``array`` (a contiguous numpy array of an MPI type) with ``mpi_op``.

        Returns:
            its `ThreadWork`; ``array`` must not be touched until that completed.
        """
        work = ThreadWork(self.group, what, array)
        if self._thread is None:
            _RUNNING.add(self)
            self._thread = threading.Thread(target=self._run, name="fxkit-mpi-collectives", daemon=True)
            self._thread.start()
        self._queue.put((work, array, mpi_op))
        return work

    def _run(self):
        MPI = self.group.MPI
        while True:
            item = self._queue.get()
            if item is None:
                return
            work, array, mpi_op = item
            try:
                self.comm.Allreduce(MPI.IN_PLACE, array, mpi_op)
            except MPI.Exception as exc:
                work.error = exc
            work.done.set()

    def stop(self):
        """End the thread once the all-reduces queued so far are done (waits at most `_JOIN_SECONDS`)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(_JOIN_SECONDS)
        _RUNNING.discard(self)


class ThreadWork:
    """An all-reduce queued on a `CollectiveThread` (the same methods as `fxkit.distributed.Work`)."""

    def __init__(self, group, what, keep):
        self._group = group
        self._what = what
        self._keep = keep  # NOTE: the buffer MPI writes must live until the all-reduce completed
        self.done = threading.Event()
        self.error = None

    def is_completed(self):
        """Whether the all-reduce finished (never blocks; raises if it failed)."""
        if not self.done.is_set():
            return False
        self._check()
        return True

    def wait(self, timeout=None):
        """Block until the all-reduce finished; past the group's deadline, the roll call names the lost rank."""
        done = self.done
        if not done.is_set():
            group = self._group
            seconds = group.timeout if timeout is None else timeout
            group.waiting_on = self._what
            try:
                deadline = time.monotonic() + seconds
                # NOTE: Event.wait sleeps without the GIL, which the thread needs to report the all-reduce done.
                while not done.wait(_WAKE_SECONDS):
                    group.answer_roll_calls()
                    if time.monotonic() > deadline:
                        group.roll_call(self._what)
            finally:
                group.waiting_on = None
        self._check()
        return True

    def _check(self):
        self._keep = None
        if self.error is not None:
            raise mpi_failure(self._group, self._what, self.error)

    def __repr__(self):
        return f"ThreadWork({self._what}, completed={self.done.is_set()})"


_RUNNING = weakref.WeakSet()


@atexit.register
def _stop_collective_threads():
    # NOTE: registered after mpi4py's exit hook, so it runs first: no thread may call MPI during MPI_Finalize.
    for thread in list(_RUNNING):
        thread.stop()
