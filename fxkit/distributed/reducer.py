"""Gradient buckets: many small gradients averaged over the ranks as a few large all-reduces.

`Buckets` lays tensors out in flat host buffers of one dtype each, about
``cap_bytes`` a buffer (PyTorch DDP's "tensor coalescing"): one all-reduce of
25 MB costs far less than a thousand of 25 kB. `Reducer` drives them during
backward: a post-accumulate hook on each parameter copies its final gradient
into its bucket, and the moment a bucket's last gradient is in, an
asynchronous all-reduce of it starts, while the backward goes on computing
the gradients of earlier layers. Buckets start in index order on every rank
(MPI matches collectives by order), so a bucket that fills early waits for
the ones before it. A callback queued on the autograd engine waits for every
all-reduce and writes the averages back into ``.grad`` before ``backward()``
returns.

`average_gradients` is the same, all at once, for gradients that come from
elsewhere: ``fxkit.transforms.grad`` graphs, compiled steps, pipeline stages.
"""
import os

import numpy as np

from fxkit.distributed.collectives import ReduceOp, all_reduce, broadcast
from fxkit.distributed.work import Progress
from fxkit.errors import DistributedError
from fxkit.runtime.autograd.engine import queue_callback
from fxkit.runtime.tensor import Tensor


def host(array):
    return array if isinstance(array, np.ndarray) else array.get()


class Buckets:
    """Flat buffers holding ``shapes`` (in the given order), at most ``cap_bytes`` each unless one tensor is larger.

    Attributes:
        members: per bucket, the tensor indices it holds.
        place: per tensor, ``(bucket, offset)``.
    """

    def __init__(self, shapes, dtypes, order, cap_bytes):
        self.members, self.flats, self.place = [], [], {}
        open_by_dtype = {}
        for i in order:
            dtype, n = np.dtype(dtypes[i]), int(np.prod(shapes[i], dtype=np.int64))
            b = open_by_dtype.get(dtype)
            if b is None:
                b = open_by_dtype[dtype] = len(self.members)
                self.members.append([])
                self.flats.append([0, dtype])
            self.place[i] = (b, self.flats[b][0])
            self.members[b].append(i)
            self.flats[b][0] += n
            if self.flats[b][0] * dtype.itemsize >= cap_bytes:
                del open_by_dtype[dtype]
        self.flats = [np.zeros(n, dtype) for n, dtype in self.flats]
        self.shapes = shapes

    def view(self, i):
        b, offset = self.place[i]
        n = int(np.prod(self.shapes[i], dtype=np.int64))
        return self.flats[b][offset:offset + n].reshape(self.shapes[i])

    def tensor(self, b):
        return Tensor(self.flats[b])


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
    reduced = alone + [buckets.tensor(b) for b in range(len(buckets.flats))]
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
        self.progress = Progress(group)
        # NOTE: a progress thread needs a core the ranks' compute does not use: with no spare core it slows the
        # backward more than it hides (measured by benchmarks/distributed.py); without it MPI moves the
        # all-reduces on only inside the hooks and the waits.
        self.use_progress_thread = (os.cpu_count() or 1) > _ranks_on_this_machine(group)
        self._handles = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(self.params)]

    def _build(self, order):
        return Buckets([p.shape for p in self.params], [p._data.dtype for p in self.params], list(order),
                       self.cap_bytes)

    @property
    def bucket_count(self):
        return len(self.buckets.flats)

    def prepare(self, outputs):
        """A forward that will be backpropagated ran: arm the hooks for its backward."""
        b = self.buckets
        self.pending = [len(m) for m in b.members]
        self.works = [None] * len(b.members)
        self.next_bucket = 0
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
                self.queued = True
            slot, grad = self.buckets.view(i), param.grad._data
            if not _same_memory(slot, grad):  # NOTE: a bucket view (gradient_as_bucket_view) is in place already
                slot[...] = host(grad)
            self.arrived.append(i)
            self._mark(i)
            for w in self.works[:self.next_bucket]:
                w.is_completed()  # NOTE: lets MPI progress the all-reduces in flight between hooks

        return hook

    def _mark(self, i):
        self.ready[i] = True
        b, _ = self.buckets.place[i]
        self.pending[b] -= 1
        while self.next_bucket < len(self.pending) and not self.pending[self.next_bucket]:
            k = self.next_bucket
            self.works[k] = all_reduce(self.buckets.tensor(k), ReduceOp.AVG, self.group, async_op=True)
            self.next_bucket += 1
            if self.use_progress_thread:
                self.progress.start()

    def finish(self):
        """After the backward: wait for every bucket, write the averages into ``.grad``."""
        self.expecting = False
        missing = [self.names[i] for i, r in enumerate(self.ready) if not r]
        if missing:
            raise DistributedError(f"DistributedDataParallel: parameters {missing} got no gradient in this backward, "
                                   f"so their buckets can never be reduced and the ranks would disagree; pass "
                                   f"find_unused_parameters=True if the forward does not always use them")
        try:
            for w in self.works:
                w.wait()
        finally:
            self.progress.stop()
        usage = None
        if self.used is not None:
            usage = Tensor(np.array(self.used, np.uint8))
            all_reduce(usage, ReduceOp.MAX, self.group)
        for i, p in enumerate(self.params):
            if usage is not None and not usage._data[i]:
                continue  # no rank used it: its .grad stays as it was, as on one process
            value = self.buckets.view(i)
            xp = p.device.xp
            if self.as_view and xp is np:
                if p.grad is None or not _same_memory(p.grad._data, value):
                    p.grad = Tensor(value)
            elif p.grad is None:
                p.grad = Tensor(value.copy() if xp is np else xp.asarray(value), p.device)
            else:
                p.grad._data[...] = value if xp is np else xp.asarray(value)
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
