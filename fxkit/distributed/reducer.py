"""Gradient buckets: many small gradients averaged over the ranks as a few large all-reduces.

`Reducer` drives `fxkit.distributed.buckets.Buckets` during backward: a
post-accumulate hook on each parameter copies its final gradient into its
bucket, divided by the number of ranks on the way (PyTorch's
``copy_grad_to_bucket``: the average is then a plain sum, with no pass of its
own; a gradient with a bucket of its own is divided and reduced where it
lies, with no copy), and the moment a bucket's last gradient is in, an
asynchronous all-reduce of it starts while the backward goes on computing
the gradients of earlier layers. Buckets start in index order on every rank
(MPI matches collectives by order); they are numbered in the order the first
backward filled them, so one rarely waits for another. MPI moves a
non-blocking all-reduce on only inside MPI calls of this process, so between
the autograd nodes the reducer tests the oldest all-reduce in flight (one
test progresses them all); a node that computes long, or waits off the cpu,
makes no such call, so where the machine has a core to spare per rank the
all-reduces run as blocking calls on a `CollectiveThread` instead, which
MPI keeps moving throughout. A callback queued on the autograd engine waits
for every all-reduce and copies the averages back into ``.grad`` before
``backward()`` returns.

`average_gradients` is the same, all at once, for gradients that come from
elsewhere: ``fxkit.transforms.grad`` graphs, compiled steps, pipeline stages.
"""
import os
import time

import numpy as np

from fxkit.distributed.buckets import Buckets, host
from fxkit.distributed.collective_thread import CollectiveThread
from fxkit.distributed.collectives import MPI_NATIVE, ReduceOp, all_reduce, broadcast
from fxkit.errors import DistributedError
from fxkit.runtime.autograd.autograd_meta import bump_version
from fxkit.runtime.autograd.engine import call_between_nodes, queue_callback
from fxkit.runtime.tensor import Tensor


def average_gradients(grads, group=None, cap_bytes=25 * 2 ** 20):
    """Average a list of gradient Tensors over the ranks of ``group``, in place, bucketed.

    Every rank passes gradients of the same shapes and dtypes in the same order.
    """
    if not grads:
        return grads
    # A gradient that fills a bucket by itself is reduced where it lies: copying it in and out would cost
    # more than the reduction (every rank decides alike: the shapes are the same).
    alone, rest = [], []
    for g in grads:
        (alone if _reducible_in_place(g, cap_bytes) else rest).append(g)
    buckets = Buckets([g.shape for g in rest], [g._data.dtype for g in rest], range(len(rest)), cap_bytes)
    for i, g in enumerate(rest):
        buckets.view(i)[...] = host(g._data)
    reduced = alone + [buckets.tensor(b) for b in range(len(buckets))]
    works = [all_reduce(t, ReduceOp.AVG, group, async_op=True) for t in reduced]
    for w in works:
        if w is not None:
            w.wait()
    for i, g in enumerate(rest):
        xp = g.device.xp
        g._data[...] = buckets.view(i) if xp is np else xp.asarray(buckets.view(i))
    return grads


def _reducible_in_place(tensor, cap_bytes):
    data = tensor._data
    return type(data) is np.ndarray and data.flags.c_contiguous and data.nbytes >= cap_bytes


class Reducer:
    """Averages the gradients of ``params`` (``[(name, Parameter)]``) over ``group`` during backward.

    Args:
        params: the parameters that require grad, in registration order.
        group: the process group.
        cap_bytes: bucket size.
        find_unused: parameters the forward did not reach count as ready at once.
        as_view: leave each ``.grad`` a view of its bucket (DDP's ``gradient_as_bucket_view``).

    Attributes:
        use_progress_thread: run the bucket all-reduces on a `CollectiveThread` (by default only when the
            machine has more cores than ranks on it).
        exposed_seconds: how long the last backward waited for its all-reduces after its last node.
    """

    def __init__(self, params, group, cap_bytes, find_unused, as_view=False):
        self.names = [name for name, _ in params]
        self.params = [p for _, p in params]
        self.group = group
        self.cap_bytes = cap_bytes
        self.find_unused = find_unused
        self.as_view = as_view
        # NOTE: reverse registration order approximates the order gradients become final; the order the
        # first backward actually delivers them replaces it after that backward (as PyTorch's DDP rebuilds).
        self.buckets = self._build(range(len(self.params) - 1, -1, -1))
        self.rebuilt = False
        self.expecting = False
        # How long the last backward waited for the all-reduces after its last node: the part not hidden.
        self.exposed_seconds = 0.0
        self.thread = CollectiveThread(group)
        # NOTE: the thread spins in MPI while an all-reduce waits for a peer, so it needs a core the ranks'
        # compute does not use: with no spare core it slows a cpu-bound backward more than it hides (measured by
        # benchmarks/distributed.py); without it MPI moves the all-reduces on only between autograd nodes, in
        # the hooks and in the waits.
        self.use_progress_thread = (os.cpu_count() or 1) > _ranks_on_this_machine(group)
        self._handles = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(self.params)]

    def _build(self, order):
        return Buckets([p.shape for p in self.params], [p._data.dtype for p in self.params], list(order),
                       self.cap_bytes)

    @property
    def bucket_count(self):
        return len(self.buckets)

    def prepare(self, outputs):
        """A forward that will be backpropagated ran: arm the hooks for its backward."""
        b = self.buckets
        self.pending = [len(m) for m in b.members]
        self.works = [None] * len(b.members)
        self.in_place = [None] * len(b.members)  # per bucket, the gradient Tensor reduced where it lies
        self.next_bucket = 0
        self.completed = 0  # buckets whose all-reduce is known to be done
        self.scale = 1.0 / self.group.size()
        self.arrived = []
        self.ready = [False] * len(self.params)
        self.queued = False
        self.expecting = True
        self.used = None
        if self.find_unused:
            self.used = _reached(outputs, self.params)
            for i, used in enumerate(self.used):
                if not used:
                    self.buckets.view(i)[...] = 0
                    self._mark(i)

    def _hook(self, i):
        def hook(param):
            if not self.expecting:
                return  # no_sync(), or a backward of something DDP did not run: accumulate locally only
            if self.ready[i]:
                raise DistributedError(f"DistributedDataParallel: parameter {self.names[i]} received a gradient "
                                       f"twice in one backward (a second backward through the same forward, or a "
                                       f"parameter shared between replicas?); run one backward per forward, or "
                                       f"use no_sync() for all but the last")
            if not self.queued:
                queue_callback(self.finish)
                call_between_nodes(self.progress_all_reduces)
                self.queued = True
            grad = param.grad._data
            b, _ = self.buckets.place[i]
            if self.buckets.alone[b] and not self.as_view and _reducible_where_it_lies(grad, self.buckets.dtypes[b]):
                np.multiply(grad, self.scale, out=grad)
                self.in_place[b] = param.grad
            else:
                slot = self.buckets.view(i)
                # NOTE: a bucket view (gradient_as_bucket_view) is divided where it lies
                np.multiply(slot if _same_memory(slot, grad) else host(grad), self.scale, out=slot)
            self.arrived.append(i)
            self._mark(i)
            self.progress_all_reduces()

        return hook

    def progress_all_reduces(self):
        """Let MPI move the bucket all-reduces in flight on: test the oldest (MPI progresses every request in
        any test), and the next ones only while they turn out done, so a call costs one test as a rule."""
        while self.completed < self.next_bucket and self.works[self.completed].is_completed():
            self.completed += 1

    def _mark(self, i):
        self.ready[i] = True
        b, _ = self.buckets.place[i]
        self.pending[b] -= 1
        while self.next_bucket < len(self.pending) and not self.pending[self.next_bucket]:
            k = self.next_bucket
            reduced = self.in_place[k] if self.in_place[k] is not None else self.buckets.tensor(k)
            self.works[k] = self._start_all_reduce(reduced)
            self.next_bucket += 1

    def _start_all_reduce(self, reduced):
        """Start summing a bucket over the ranks: on the collective thread when it is on and MPI sums the
        bucket's dtype as it is, else as a non-blocking all_reduce the hooks and waits move on."""
        if self.use_progress_thread and reduced._data.dtype in MPI_NATIVE:
            group = self.group
            bump_version(reduced)
            return self.thread.all_reduce(reduced._data, group.direct_ops[ReduceOp.SUM],
                                          group.next_seq(f"all_reduce({ReduceOp.SUM}) of a bucket"))
        return all_reduce(reduced, ReduceOp.SUM, self.group, async_op=True)

    def finish(self):
        """After the backward: wait for every bucket, write the averages into ``.grad``."""
        self.expecting = False
        missing = [self.names[i] for i, r in enumerate(self.ready) if not r]
        if missing:
            raise DistributedError(f"DistributedDataParallel: parameters {missing} got no gradient in this backward, "
                                   f"so their buckets can never be reduced and the ranks would disagree; pass "
                                   f"find_unused_parameters=True if the forward does not always use them")
        tick = time.perf_counter()
        for w in self.works:
            w.wait()
        self.exposed_seconds = time.perf_counter() - tick
        usage = None
        if self.used is not None:
            usage = Tensor(np.array(self.used, np.uint8))
            all_reduce(usage, ReduceOp.MAX, self.group)
        for i, p in enumerate(self.params):
            if usage is not None and not usage._data[i]:
                continue  # no rank used it: its .grad stays as it was, as on one process
            if self.in_place[self.buckets.place[i][0]] is not None:
                continue  # reduced in its own .grad
            value = self.buckets.view(i)
            xp = p.device.xp
            if self.as_view and xp is np:
                if p.grad is None or not _same_memory(p.grad._data, value):
                    p.grad = Tensor(value)
            elif p.grad is None:
                p.grad = Tensor(value.copy() if xp is np else xp.asarray(value), p.device)
            elif xp is np:
                np.copyto(p.grad._data, value)
            else:
                p.grad._data[...] = xp.asarray(value)
        if not self.rebuilt:
            self._rebuild()

    def _rebuild(self):
        """Lay the buckets out in the order the first backward delivered the gradients (rank 0's order)."""
        self.rebuilt = True
        seen = set(self.arrived)
        order = np.array(self.arrived + [i for i in range(len(self.params) - 1, -1, -1) if i not in seen], np.int64)
        t = Tensor(order)
        broadcast(t, self.group.ranks[0], self.group)
        order = t._data.tolist()
        if [i for m in self.buckets.members for i in m] != order:
            self.buckets = self._build(order)

    def remove(self):
        for h in self._handles:
            h.remove()


def _reducible_where_it_lies(grad, dtype):
    """Whether a gradient alone in its bucket (of ``dtype``) can be all-reduced in its own memory."""
    return type(grad) is np.ndarray and grad.flags.c_contiguous and grad.dtype == dtype


def _same_memory(a, b):
    """Whether two arrays are the same elements of the same memory (one a view standing for the other)."""
    return (type(a) is type(b) and a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def _ranks_on_this_machine(group):
    local = group.comm.Split_type(group.MPI.COMM_TYPE_SHARED)
    try:
        return local.Get_size()
    finally:
        local.Free()


def _reached(outputs, params):
    """Per parameter, whether the autograd graph of ``outputs`` reaches it."""
    metas = set()
    seen = set()
    stack = []

    def visit(value):
        if isinstance(value, Tensor):
            meta = value._grad
            if meta is not None and meta.grad_fn is not None:
                stack.append(meta.grad_fn)
            elif meta is not None:
                metas.add(id(meta))
        elif isinstance(value, (tuple, list)):
            for v in value:
                visit(v)
        elif isinstance(value, dict):
            for v in value.values():
                visit(v)

    visit(outputs)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for _, edge, _ in node.inputs:
            if type(edge) is tuple:
                stack.append(edge[0])
            else:
                metas.add(id(edge))
    return [p._grad is not None and id(p._grad) in metas for p in params]
