"""`MPIPipeline`: the stages of a split model, one per MPI rank (``mpiexec -n k``).

Every rank builds the same split model and runs only its own stage: rank 0
splits the batch into micro-batches and feeds them in, each rank receives a
micro-batch's values from the rank before it, runs its stage and sends the
values the later stages need on to the next rank; the last rank joins the
outputs. Receiving the next micro-batch and sending the last result happen on
two helper threads while the stage computes, so the ranks overlap as in
GPipe's schedule. Messages carry tensors through the buffer protocol (see
`fxkit.distributed.transport`): no arrays are pickled.

Failures never hang the job: a rank whose stage raises tells its neighbours
(who pass it on) and every rank raises a `PipelineError`; a rank that died or
hangs is detected by the deadline on every wait; a wrong number of ranks is
refused by every rank before any data moves. `abort_on_error` then ends the
whole job (``MPI_Abort``), including a rank that hangs.

Example (``mpiexec -n 2 python script.py``):
    >>> parent = split_pipeline(model, [x], n_stages=MPI.COMM_WORLD.Get_size(), verbose=False)
    >>> with abort_on_error():
    ...     out = MPIPipeline(parent, chunks=4)(x)      # the output on the last rank, None elsewhere
"""
import queue
import threading
import time

from fxkit.errors import PipelineError
from fxkit.runtime.autograd import no_grad
from fxkit.runtime.device import Device
from fxkit.backends.microbatch import join_batches, map_tensors, split_batch
from fxkit.distributed.transport import HELLO, Channel, PeerError, abort_on_error, import_mpi  # noqa: F401
from fxkit.backends.pipeline import as_chain

_POLL_SECONDS = 0.05


class MPIPipeline:
    """Runs stage ``rank`` of a chain of stages on this MPI rank.

    Args:
        stages: a split `GraphModule` (or a list of modules), the same on every rank.
        chunks: micro-batches per batch.
        timeout: seconds any wait for a peer may take before it counts as lost.
        device: where this rank's stage runs (``"cpu"``, ``"cuda:0"``, ...).
        comm: the communicator; defaults to ``MPI.COMM_WORLD``.

    Attributes:
        busy_seconds: time this rank's stage spent computing in the last call.
        wall_seconds: the last call's duration on this rank.

    Raises:
        PipelineError: the number of ranks differs from the number of stages, or a
            neighbour does not answer the start-up handshake in time, or runs a
            different pipeline.
    """

    def __init__(self, stages, chunks=1, timeout=60.0, device="cpu", comm=None):
        MPI = import_mpi()
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.chain = as_chain(stages)
        k = len(self.chain)
        if self.size != k:
            raise PipelineError(f"rank {self.rank}: the pipeline has {k} stages but {self.size} MPI ranks run it; "
                                f"start it with `mpiexec -n {k} ...` (one rank per stage) or split into "
                                f"{self.size} stages")
        if not isinstance(chunks, int) or chunks < 1:
            raise PipelineError(f"MPIPipeline: chunks is the number of micro-batches, a positive int; got {chunks!r}")
        self.chunks = chunks
        self.device = Device(device)
        self.channel = Channel(self.comm, timeout, self._describe)
        self.stage = self.chain.stages[self.rank]
        self.stage.module.to(self.device)
        self.busy_seconds = self.wall_seconds = 0.0
        self._threads_ok = MPI.Query_thread() == MPI.THREAD_MULTIPLE
        self._handshake()

    def _describe(self, rank):
        return f"rank {rank} (stage {rank})"

    def _handshake(self):
        """Neighbours agree on the pipeline: stage count, micro-batches and the values passed between them."""
        mine = {"stages": len(self.chain), "chunks": self.chunks}
        right, left = self.rank + 1, self.rank - 1
        if right < self.size:
            self.channel.send({**mine, "sends": getattr(self.stage, "output_names", None)}, right, 0, tag=HELLO)
        if left >= 0:
            _, theirs = self.channel.recv(left, tag=HELLO, what="the start-up handshake")
            expected = {**mine, "sends": getattr(self.stage, "input_names", None)}
            if theirs != expected:
                raise PipelineError(f"{self._describe(self.rank)}: {self._describe(left)} runs a different pipeline "
                                    f"(it has {theirs}, this rank expects {expected}); run the same script with "
                                    f"the same arguments on every rank")

    def __call__(self, *inputs):
        """Run the batch through the pipeline.

        Args:
            *inputs: the model's inputs; only rank 0 reads them (others may pass nothing).

        Returns:
            The model's output on the last rank; None on the others.
        """
        start = time.perf_counter()
        self.busy_seconds = 0.0
        first, last = self.rank == 0, self.rank == self.size - 1
        batches = split_batch(self.chain.first_inputs(inputs), self.chunks) if first else None
        try:
            with no_grad():
                results = self._run(batches, first, last)
        except PeerError as exc:
            self.channel.report_error(str(exc), self._neighbours())
            raise PipelineError(f"{self._describe(self.rank)} stops: {exc}") from None
        except Exception as exc:
            message = f"{self._describe(self.rank)} failed: {type(exc).__name__}: {exc}"
            self.channel.report_error(message, self._neighbours())
            if isinstance(exc, PipelineError):
                raise
            raise PipelineError(message) from exc
        finally:
            self.wall_seconds = time.perf_counter() - start
        if not last:
            return None
        return join_batches([self.chain.assemble(values) for values in results])

    def _neighbours(self):
        return [r for r in (self.rank - 1, self.rank + 1) if 0 <= r < self.size]

    def _run(self, batches, first, last):
        m = self.chunks
        received = queue.SimpleQueue()
        to_send = queue.SimpleQueue()
        failed = []
        stop = threading.Event()
        helpers = []
        if first:
            for j, values in enumerate(batches):
                received.put((j, values))
        elif self._threads_ok:
            helpers.append(_helper(self._receive_all, received, failed, stop))
        if not last and self._threads_ok:
            helpers.append(_helper(self._send_all, to_send, failed, stop))
        outputs = []
        try:
            for j in range(m):
                if first or self._threads_ok:
                    got, values = self._next(received, failed)
                else:
                    got, values = self.channel.recv(self.rank - 1)
                if got != j:
                    raise PipelineError(f"{self._describe(self.rank)}: micro-batch {got} arrived where {j} was due")
                tick = time.perf_counter()
                with self.device.activate():
                    out = self.chain.run_stage(self.rank, map_tensors(values, self._to_device))
                self.busy_seconds += time.perf_counter() - tick
                if last:
                    outputs.append(out)
                elif self._threads_ok:
                    to_send.put((j, out))
                else:
                    self.channel.send(out, self.rank + 1, j)
            for h in helpers:
                while h.is_alive():
                    h.join(_POLL_SECONDS)
                    if failed:
                        break
            if failed:
                raise failed[0]
        finally:
            stop.set()
            self.channel.stopped.set()
            for h in helpers:
                h.join()
            self.channel.stopped.clear()
        return outputs

    def _to_device(self, t):
        return t if t.device is self.device else t.to(self.device)

    def _next(self, received, failed):
        while True:
            try:
                return received.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if failed:
                    raise failed[0] from None

    def _receive_all(self, received, stop):
        for _ in range(self.chunks):
            if stop.is_set():
                return
            received.put(self.channel.recv(self.rank - 1))

    def _send_all(self, to_send, stop):
        sent = 0
        while sent < self.chunks:
            try:
                j, out = to_send.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if stop.is_set():
                    return
                continue
            self.channel.send(out, self.rank + 1, j)
            sent += 1


def _helper(fn, channel_queue, failed, stop):
    def run():
        try:
            fn(channel_queue, stop)
        except Exception as exc:  # noqa: BLE001  (re-raised on the stage's thread)
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
