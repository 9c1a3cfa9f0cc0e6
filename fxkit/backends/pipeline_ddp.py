"""`PipelineDataParallel`: P pipeline stages times D data-parallel replicas on P x D MPI ranks.

Rank ``r`` runs stage ``r % P`` of replica ``r // P``: ranks ``0..P-1`` are
replica 0's pipeline, the next P ranks replica 1's, and so on. Within a
replica, the stages pass activations forward and their gradients backward
point to point over the MPI transport (`fxkit.distributed.transport.Channel`),
micro-batch by micro-batch in GPipe's order (every forward, then every
backward; with blocking sends this order cannot deadlock). The D ranks
running the same stage form a sub-group (`fxkit.distributed.new_group`) that
starts from replica 0's weights and averages its stage's gradients after the
backward, so each stage's replicas stay equal as data-parallel replicas do.
This is the talk's "distributed data parallel with model parallel".

Example (``fxkit launch -n 4 train.py``: 2 stages x 2 replicas):
    >>> dist.init_process_group("mpi")
    >>> parent = split_pipeline(model, [x], n_stages=2, verbose=False)
    >>> trainer = PipelineDataParallel(parent, chunks=2)
    >>> opt = fxkit.optim.SGD(trainer.parameters(), lr=0.1)   # this rank's stage only
    >>> loss = trainer.train_step([x_share], y_share, F.nll_loss)
    >>> opt.step()
"""
import time

from fxkit.backends.microbatch import flat_tensors, join_batches, map_tensors, split_batch, split_sizes
from fxkit.backends.pipeline import _TrainStep, as_chain, stage_schedule
from fxkit.distributed import average_gradients, broadcast, new_group
from fxkit.distributed.process_group import default_group
from fxkit.distributed.transport import Channel
from fxkit.errors import DistributedError
from fxkit.runtime.autograd import no_grad
from fxkit.runtime.device import Device


class PipelineDataParallel:
    """Trains stage ``rank % P`` of a chain of P stages, averaged over the D replicas of that stage.

    Args:
        stages: a split `GraphModule` (`split_pipeline`) or a list of modules, the same on every rank.
        chunks: micro-batches per replica batch.
        timeout: seconds a wait on a neighbour stage may take before it counts as lost.
        device: where this rank's stage runs.

    Attributes:
        stage, replica: this rank's stage index and replica index.
        module: this rank's stage module.
        stage_group: the process group of the ranks running this stage.
        busy_seconds, wall_seconds: compute and total time of the last step here.
    """

    def __init__(self, stages, chunks=1, timeout=60.0, device="cpu"):
        world = default_group()
        self.chain = as_chain(stages)
        p, size = len(self.chain), world.size()
        if size % p:
            raise DistributedError(f"PipelineDataParallel: {size} ranks cannot run {p} stages times a whole number "
                                   f"of replicas; start {p} x D ranks (`fxkit launch -n {p * max(1, size // p)} ...`)")
        if not isinstance(chunks, int) or chunks < 1:
            raise DistributedError(f"PipelineDataParallel: chunks is a positive int, got {chunks!r}")
        rank = world.rank()
        self.n_stages, self.n_replicas = p, size // p
        self.stage, self.replica = rank % p, rank // p
        self.chunks = chunks
        self.device = Device(device)
        groups = [new_group([d * p + s for d in range(self.n_replicas)]) for s in range(p)]
        self.stage_group = groups[self.stage]
        pipe_comm = world.comm.Split(self.replica, self.stage)
        self.channel = Channel(pipe_comm, timeout, self._describe)
        self.module = self.chain.stages[self.stage].module
        self.module.to(self.device)
        root = self.stage_group.ranks[0]
        for t in list(self.module.parameters()) + list(self.module.buffers()):
            broadcast(t, root, self.stage_group)
        self.busy_seconds = self.wall_seconds = 0.0
        # _TrainStep reads the devices of the stages; only this rank's entry is used.
        self.devices = [self.device] * p

    def _describe(self, stage):
        return f"rank {self.replica * self.n_stages + stage} (stage {stage} of replica {self.replica})"

    def parameters(self):
        """This rank's stage parameters (give them to the optimizer)."""
        return self.module.parameters()

    def train_step(self, inputs, target, loss_fn):
        """Forward and backward of this replica's batch; gradients averaged over the replicas in ``.grad``.

        Args:
            inputs: the model's inputs for this replica's share of the global batch
                (every rank of the replica passes them; the first stage reads them).
            target: the loss target for the same share (the last stage reads it).
            loss_fn: ``loss_fn(output, target)``: a mean over the micro-batch.

        Returns:
            The replica's mean loss on the last stage, None on the others.
        """
        start = time.perf_counter()
        self.busy_seconds = 0.0
        s, last = self.stage, self.stage == self.n_stages - 1
        first = list(self.chain.first_inputs(inputs))
        batches = split_batch([first, target], self.chunks)
        sizes = split_sizes(flat_tensors([first, target])[0].shape[0], self.chunks)
        step = _TrainStep(self, loss_fn, [b[1] for b in batches], [size / sum(sizes) for size in sizes])
        loss = 0.0
        for direction, j in stage_schedule("gpipe", s, self.n_stages, self.chunks):
            if direction == "F":
                values = batches[j][0] if s == 0 else self._receive(s - 1, j)
                tick = time.perf_counter()
                out = step.forward(s, j, values)
                self.busy_seconds += time.perf_counter() - tick
                if last:
                    loss += out
                else:
                    self.channel.send(map_tensors(out, lambda t: t.detach()), s + 1, j)
            else:
                grads = None if last else self._receive(s + 1, j)
                tick = time.perf_counter()
                grads = step.backward(s, j, grads)
                self.busy_seconds += time.perf_counter() - tick
                if s > 0:
                    self.channel.send(grads, s - 1, j)
        if self.n_replicas > 1:
            average_gradients([p.grad for p in self.module.parameters() if p.grad is not None], self.stage_group)
        self.wall_seconds = time.perf_counter() - start
        return loss if last else None

    def __call__(self, *inputs):
        """The model's output for ``inputs`` (no gradients): on the last stage's ranks; None elsewhere."""
        s, last = self.stage, self.stage == self.n_stages - 1
        batches = split_batch(list(self.chain.first_inputs(inputs)), self.chunks)
        outputs = []
        with no_grad():
            for j in range(self.chunks):
                values = batches[j] if s == 0 else self._receive(s - 1, j)
                out = self.chain.run_stage(s, map_tensors(values, lambda t: t.to(self.device)))
                if last:
                    outputs.append(self.chain.assemble(out))
                else:
                    self.channel.send(out, s + 1, j)
        return join_batches(outputs) if last else None

    def _receive(self, peer, j):
        got, values = self.channel.recv(peer)
        if got != j:
            raise DistributedError(f"{self._describe(self.stage)}: micro-batch {got} arrived from "
                                   f"{self._describe(peer)} where {j} was due")
        return values
