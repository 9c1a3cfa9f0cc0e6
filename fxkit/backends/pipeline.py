"""`Pipeline`: run model stages on several devices, overlapping them on micro-batches.

Each stage gets a worker thread that runs its device's share of the work in
a fixed order, fed by queues from its neighbours (numpy and cupy release the
GIL in their kernels, so stages on different devices, or on CPU cores, run
at the same time). The batch is split into ``chunks`` micro-batches along
dimension 0:

* forward (``pipeline(x)``), the GPipe schedule: stage ``s`` runs micro-batch
  ``j`` as soon as stage ``s - 1`` hands it over; with ``k`` stages of equal
  time, a fraction ``(k - 1) / (m + k - 1)`` of the stage-time is idle (the bubble).
* training (`Pipeline.train_step`): every micro-batch runs forward and then
  backward through the stages, either GPipe's all-forwards-then-all-backwards
  or 1F1B (after ``k - s - 1`` warm-up forwards, stage ``s`` alternates one
  forward and one backward, so it holds at most ``k - s`` micro-batches of
  activations). Parameter gradients accumulate over the micro-batches.

A stage that fails stops every other stage. A stage step (one micro-batch's
forward or backward) that runs longer than ``timeout`` seconds ends the call
with a `PipelineError` naming it, and Ctrl-C ends it at once: the waiting
workers are aborted, never joined forever. Python cannot stop a thread inside a
call, so a hung stage's thread is left behind (a daemon) until its call returns.

Example:
    >>> parent = fxkit.transforms.split_pipeline(model, [x], n_stages=2)
    >>> pipe = Pipeline(parent, devices=["cuda:0", "cuda:1"], chunks=4)
    >>> pipe(x)                                   # equals model(x)
    >>> loss = pipe.train_step([x], y, F.cross_entropy)
"""
import queue
import threading
import time

from fxkit.errors import DeviceError, FxkitError, PipelineError
from fxkit.graph import GraphModule
from fxkit.runtime.autograd import backward as autograd_backward
from fxkit.runtime.autograd import no_grad
from fxkit.runtime.device import Device
from fxkit.runtime.tensor import Tensor
from fxkit.backends.microbatch import flat_tensors, join_batches, map_tensors, split_batch, split_sizes
from fxkit.transforms.stage_chain import StageChain

SCHEDULES = ("gpipe", "1f1b")
DEFAULT_TIMEOUT = 300.0
"""Seconds one stage step may take before the pipeline gives up on it (``Pipeline(timeout=...)``)."""
_POLL_SECONDS = 0.05
_JOIN_SECONDS = 2.0  # how long an ending call waits for its workers to notice the abort


class ModuleChain:
    """Plain modules as a chain: each stage's result is the next stage's arguments.

    A stage returning a tuple hands its items on as separate arguments; the
    last stage's result is the output (a single value when it returns one).
    """

    def __init__(self, modules):
        self.stages = [_ModuleStage(i, m) for i, m in enumerate(modules)]
        if not self.stages:
            raise PipelineError("Pipeline: got no stages")

    def __len__(self):
        return len(self.stages)

    def first_inputs(self, args):
        return list(args)

    def run_stage(self, index, values):
        out = self.stages[index].module(*values)
        return list(out) if type(out) is tuple else [out]

    def assemble(self, values):
        return values[0] if len(values) == 1 else tuple(values)


class _ModuleStage:
    def __init__(self, index, module):
        self.index = index
        self.module = module


def as_chain(stages):
    """A split `GraphModule` (from `split_module`/`split_pipeline`) or a list of modules, as a chain."""
    if isinstance(stages, GraphModule):
        return StageChain(stages)
    if isinstance(stages, (StageChain, ModuleChain)):
        return stages
    if isinstance(stages, (list, tuple)):
        return ModuleChain(list(stages))
    raise PipelineError(f"Pipeline: stages must be a split GraphModule (split_pipeline/split_module) or a list of "
                        f"modules, got {type(stages).__name__}")


def stage_schedule(kind, stage, n_stages, chunks):
    """The ordered ``("F"|"B", micro-batch)`` steps of one stage.

    Args:
        kind: ``"forward"`` (forwards only), ``"gpipe"`` or ``"1f1b"``.
        stage: the stage's index.
        n_stages: the number of stages.
        chunks: the number of micro-batches.
    """
    forwards = [("F", j) for j in range(chunks)]
    if kind == "forward":
        return forwards
    backwards = [("B", j) for j in range(chunks)]
    if kind == "gpipe":
        return forwards + backwards
    warm = min(n_stages - 1 - stage, chunks)
    steps = forwards[:warm]
    for j in range(chunks - warm):
        steps += [forwards[warm + j], backwards[j]]
    return steps + backwards[chunks - warm:]


class Pipeline:
    """Runs stages on devices with micro-batches.

    Args:
        stages: a split `GraphModule` (values a later stage needs are passed
            along the stages in between), or a list of modules chained output to input.
        devices: one device per stage (``"cpu"``, ``"cuda:0"``, ...; a device may
            repeat). Each stage's module is moved there. Defaults to cpu for all.
        chunks: micro-batches per batch (``m``).
        timeout: seconds one stage may spend on one micro-batch's forward or
            backward before the call fails with a `PipelineError` naming it
            (default 300); None waits forever.

    Example:
        >>> pipe = Pipeline([sub_net1, sub_net2], devices=["cuda:0", "cuda:1"], chunks=4)
        >>> pipe(x)
    """

    def __init__(self, stages, devices=None, chunks=1, timeout=DEFAULT_TIMEOUT):
        self.chain = as_chain(stages)
        k = len(self.chain)
        devices = ["cpu"] * k if devices is None else list(devices)
        if len(devices) != k:
            raise DeviceError(f"Pipeline: {k} stages need {k} devices, got {len(devices)} ({devices}); name one "
                              f"device per stage (repeat one to put several stages on it)")
        if not isinstance(chunks, int) or chunks < 1:
            raise PipelineError(f"Pipeline: chunks is the number of micro-batches, a positive int; got {chunks!r}")
        if timeout is not None and not (isinstance(timeout, (int, float)) and 0 < timeout < float("inf")):
            raise PipelineError(f"Pipeline: timeout is seconds a stage step may take, a positive number or None; "
                                f"got {timeout!r}")
        self.devices = [Device(d) for d in devices]
        self.chunks = chunks
        self.timeout = timeout
        for stage, device in zip(self.chain.stages, self.devices):
            stage.module.to(device)

    def __call__(self, *inputs):
        """The model's output for ``inputs``, computed micro-batch by micro-batch (GPipe).

        Runs without recording gradients (inference); `train_step` trains.
        """
        batches = split_batch(self.chain.first_inputs(inputs), self.chunks)
        results = self._run("forward", batches, self._forward)
        return join_batches([self.chain.assemble(values) for values in results])

    def train_step(self, inputs, target, loss_fn, schedule="1f1b"):
        """Forward and backward over the micro-batches; gradients accumulate in ``.grad``.

        Args:
            inputs: the forward arguments (a list or tuple).
            target: what ``loss_fn`` compares the output with; split along
                dimension 0 like the inputs.
            loss_fn: ``loss_fn(output, target) -> 0-d tensor``, a mean over the
                micro-batch; each micro-batch's loss is weighted by its share of
                the batch, so the gradients are those of the whole batch's mean loss.
            schedule: ``"1f1b"`` or ``"gpipe"``.

        Returns:
            The batch's loss (a Python float).
        """
        if schedule not in SCHEDULES:
            raise PipelineError(f"Pipeline.train_step: schedule={schedule!r} is not one of {', '.join(SCHEDULES)}")
        first = list(self.chain.first_inputs(inputs))
        batches = split_batch([first, target], self.chunks)
        sizes = split_sizes(flat_tensors([first, target])[0].shape[0], self.chunks)
        step = _TrainStep(self, loss_fn, [b[1] for b in batches], [size / sum(sizes) for size in sizes])
        losses = self._run(schedule, [b[0] for b in batches], step.forward, step.backward)
        return float(sum(losses))

    # -- the worker threads ---------------------------------------------------------------------
    def _forward(self, s, j, values):
        # NOTE: grad mode is per thread: each stage thread turns recording off itself.
        with no_grad():
            return self.chain.run_stage(s, _to_device(values, self.devices[s]))

    def _run(self, kind, batches, forward, backward=None):
        """Run every stage's schedule on its own thread; returns what the last stage produced per micro-batch."""
        k = len(self.chain)
        fwd = [queue.SimpleQueue() for _ in range(k + 1)]
        bwd = [queue.SimpleQueue() for _ in range(k)]
        abort = threading.Event()
        errors = []
        busy = {}  # stage -> (step, when it started) while the stage computes, not while it waits

        def receive(q):
            while True:
                try:
                    return q.get(timeout=_POLL_SECONDS)
                except queue.Empty:
                    if abort.is_set():
                        raise _Aborted() from None

        def work(s):
            step = None
            try:
                with self.devices[s].activate():
                    for step in stage_schedule(kind, s, k, len(batches)):
                        direction, j = step
                        if direction == "F":
                            got, values = receive(fwd[s])
                            assert got == j, f"stage {s}: micro-batch {got} arrived, {j} expected"
                            busy[s] = (step, time.monotonic())
                            out = forward(s, j, values)
                            busy.pop(s, None)
                            fwd[s + 1].put((j, out))
                        else:
                            got, grads = receive(bwd[s]) if s < k - 1 else (j, None)
                            assert got == j, f"stage {s}: gradients of {got} arrived, {j} expected"
                            busy[s] = (step, time.monotonic())
                            grads = backward(s, j, grads)
                            busy.pop(s, None)
                            if s > 0:
                                bwd[s - 1].put((j, grads))
            except _Aborted:
                pass
            except BaseException as exc:  # noqa: BLE001  (re-raised by the caller's thread)
                errors.append((s, step, exc))
                abort.set()

        def check_timeout():
            """A stage computing for longer than the timeout is an error: stop everything."""
            if self.timeout is None:
                return
            now = time.monotonic()
            for s, (step, since) in list(busy.items()):
                if now - since > self.timeout:
                    errors.append((s, step, PipelineError(
                        f"did not finish within timeout={self.timeout:g} s; the stage hangs or needs a "
                        f"larger Pipeline(timeout=...)")))
                    raise _Aborted()

        def wait_result():
            while True:
                try:
                    return fwd[k].get(timeout=_POLL_SECONDS)
                except queue.Empty:
                    if abort.is_set():
                        raise _Aborted() from None
                    check_timeout()

        def wait_workers():
            """Until every stage ran its schedule (training: the backwards after the last output)."""
            for w in workers:
                while w.is_alive():
                    w.join(_POLL_SECONDS)
                    if abort.is_set():
                        raise _Aborted()
                    check_timeout()

        workers = [threading.Thread(target=work, args=(s,), name=f"fxkit-pipeline-stage{s}", daemon=True)
                   for s in range(k)]
        for w in workers:
            w.start()
        for j, values in enumerate(batches):
            fwd[0].put((j, values))
        results = {}
        try:
            while len(results) < len(batches):
                j, out = wait_result()
                results[j] = out
            wait_workers()
        except _Aborted:
            pass
        finally:
            # NOTE: on an error, a timeout or Ctrl-C (KeyboardInterrupt raised in this thread)
            # the workers are told to stop and given a moment; a worker stuck inside a stage
            # cannot be stopped and is left behind as a daemon instead of being joined forever.
            abort.set()
            deadline = time.monotonic() + _JOIN_SECONDS
            for w in workers:
                w.join(max(0.0, deadline - time.monotonic()))
        if errors:
            raise _stage_error(*errors[0], self.devices) from errors[0][2]
        return [results[j] for j in range(len(batches))]


class _TrainStep:
    """The forward and backward of one micro-batch on one stage, with the values kept between them."""

    def __init__(self, pipeline, loss_fn, targets, shares):
        self.pipeline = pipeline
        self.loss_fn = loss_fn
        self.targets = targets
        self.shares = shares
        self.saved = {}

    def forward(self, s, j, values):
        pipe = self.pipeline
        device = pipe.devices[s]
        values = _to_device(values, device)
        leaves = values
        if s > 0:
            # NOTE: a stage's inputs become leaves, so backward stops at the stage boundary and
            # their gradients are what the previous stage receives. The stage computes on copies:
            # a layer that writes its input in place (ReLU(inplace=True)) may not write a leaf,
            # nor the previous stage's output, which its backward may still read.
            leaves = map_tensors(values, _as_leaf)
            values = map_tensors(leaves, lambda t: t.to(copy=True) if t.requires_grad else t)
        out = pipe.chain.run_stage(s, values)
        if s < len(pipe.chain) - 1:
            self.saved[s, j] = (leaves, out)
            return out
        loss = self.loss_fn(pipe.chain.assemble(out), _to_device(self.targets[j], device))
        if not isinstance(loss, Tensor) or loss.ndim != 0:
            raise PipelineError(f"Pipeline.train_step: loss_fn must return a 0-d tensor (a mean over the "
                                f"micro-batch), got {type(loss).__name__} {getattr(loss, 'shape', '')}")
        weighted = loss * self.shares[j]
        self.saved[s, j] = (leaves, [weighted])
        return weighted.item()

    def backward(self, s, j, grads):
        leaves, out = self.saved.pop((s, j))
        if grads is None:  # the last stage: out is the weighted loss
            autograd_backward(out)
        else:
            grads = _to_device(grads, self.pipeline.devices[s])
            pairs = [(r, g) for r, g in zip(flat_tensors(out), grads) if g is not None and r.requires_grad]
            if pairs:
                autograd_backward([r for r, _ in pairs], [g for _, g in pairs])
        return [t.grad if t.requires_grad else None for t in flat_tensors(leaves)] if s > 0 else None


def _as_leaf(t):
    leaf = t.detach()
    if t.dtype.is_floating_point:
        leaf.requires_grad_(True)
    return leaf


def _to_device(values, device):
    return map_tensors(values, lambda t: t if t.device is device else t.to(device))


class _Aborted(Exception):
    """Another stage failed: this one stops waiting."""


def _stage_error(stage, step, exc, devices):
    where = f"Pipeline stage {stage} on {devices[stage]}"
    if step is not None:
        where += f", {'forward' if step[0] == 'F' else 'backward'} of micro-batch {step[1]}"
    message = f"{where}: {exc}"
    kind = type(exc) if isinstance(exc, FxkitError) else PipelineError
    try:
        return kind(message)
    except TypeError:
        return PipelineError(message)
