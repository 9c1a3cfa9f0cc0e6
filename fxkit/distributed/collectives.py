"""Collectives on Tensors over MPI: all_reduce, broadcast, all_gather, reduce_scatter, gather, scatter, barrier.

Each is one MPI non-blocking collective (``Iallreduce``, ``Ibcast``, ...) on
the tensor's memory through the buffer protocol: nothing is pickled. A
contiguous cpu tensor is reduced in place with no copy; a non-contiguous or
cuda tensor goes through a contiguous host buffer and is written back when
the collective completes. Reductions of float16/bfloat16 run in float32
(MPI has no 16-bit float type), and of bool as or/and over bytes, as
PyTorch does. With ``async_op=True`` a `Work` comes back at once; otherwise
the call waits (with the group's deadline, see `fxkit.distributed.work`).

Ranks (``src``, ``dst``) are world ranks, as in ``torch.distributed``; on a
rank that is not a member of ``group`` every collective returns None at once.

Example (on every rank):
    >>> t = fxkit.ones(3) * (fxkit.distributed.get_rank() + 1)
    >>> fxkit.distributed.all_reduce(t)                 # 1 + 2 on two ranks
    >>> t
    tensor([3., 3., 3.])
"""
import numpy as np

from fxkit.distributed.process_group import STATE, check_usable, default_group, resolve
from fxkit.distributed.work import QUICK_TESTS, Work, mpi_failure
from fxkit.errors import DistributedError
from fxkit.runtime.autograd.autograd_meta import WRITES, bump_version


class ReduceOp:
    """How `all_reduce` and `reduce_scatter` combine the ranks' values (``torch.distributed.ReduceOp``)."""

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"


_OPS = (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX)
_MPI_OPS = {ReduceOp.SUM: "SUM", ReduceOp.AVG: "SUM", ReduceOp.PRODUCT: "PROD", ReduceOp.MIN: "MIN",
            ReduceOp.MAX: "MAX"}


# What MPI reduces as it is, in place (16-bit floats go through float32 and bool through bytes: `_reduction`).
MPI_NATIVE = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                                              np.uint8, np.uint16, np.uint32, np.uint64))
_ndarray = np.ndarray
# The largest array `_fast_checked` remembers: past 64 KB the checks cost under 1% of the all-reduce.
_REMEMBERED_BYTES = 2 ** 16


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Combine ``tensor`` over every rank of ``group``, in place, on every rank.

    A synchronous call on a contiguous cpu tensor that MPI reduces as it is
    takes a lean path of its own: a 4 KB all_reduce takes MPI about 3.5 us on
    two ranks, and every 0.1 us of Python around it costs 3% of its bandwidth
    (the ranks wait on each other, so each one's Python adds up). It uses the
    MPI objects the group cached (``IN_PLACE``, the ops), writes out the calls
    it would make (`resolve`, `check_usable`, `bump_version`), checks an array
    it checked in the previous call again only by identity (`_fast_checked`),
    tests the request back to back `QUICK_TESTS` times (a small reduction ends
    within them, as fast as a blocking ``MPI_Allreduce``), and only then makes
    a `Work` to wait with the group's deadline.
    """
    if group is None:
        group = STATE["default"] or default_group()
    comm = group.comm
    if comm is None:  # not a member
        return None
    data = tensor._data
    if not async_op and (data is group.fast_checked or _fast_checked(group, data)):
        mpi_op = group.direct_ops.get(op)  # NOTE: None for AVG (a division follows) and for an unknown op
        if mpi_op is not None:
            if STATE["broken"]:
                check_usable()
            group.seq += 1
            request = comm.Iallreduce(group.in_place, data, mpi_op)
            left = QUICK_TESTS
            try:
                # NOTE: `while not request.Test()` spins faster than a for loop over a range (measured).
                while not request.Test():
                    left -= 1
                    if not left:
                        Work(group, request, f"all_reduce({op}) #{group.seq}", None, (data,)).wait()
                        break
            except group.MPI.Exception as exc:
                raise mpi_failure(group, f"all_reduce({op}) #{group.seq}", exc) from None
            WRITES[0] += 1  # NOTE: `bump_version` written out
            meta = tensor._grad
            if meta is not None:
                meta.version[0] += 1
            return None
    what = group.next_seq(f"all_reduce({op})")
    host, write_back = _staged(tensor, "all_reduce")
    work, mpi_op, finish = _reduction(host, op, group, "all_reduce")
    request = comm.Iallreduce(group.in_place, work.reshape(-1), mpi_op)
    return _issue(group, request, what, async_op, (finish, write_back), (host, work), tensor)


def _fast_checked(group, data):
    """Whether MPI can reduce ``data`` as it lies: a C-contiguous numpy array of a type MPI sums natively.

    A small array that passes is remembered on the group (``fast_checked``),
    so reducing it again costs an identity test instead of these checks, which
    take a tenth of a 4 KB all_reduce. NOTE: an array's dtype and layout
    never change under the same object (fxkit never assigns ``.dtype`` or
    ``.strides``); only arrays of up to `_REMEMBERED_BYTES` are held, so the
    reference keeps no large buffer alive.
    """
    if type(data) is _ndarray and data.dtype in MPI_NATIVE and data.flags.c_contiguous:
        if data.nbytes <= _REMEMBERED_BYTES:
            group.fast_checked = data
        return True
    return False


def broadcast(tensor, src, group=None, async_op=False):
    """Copy ``tensor`` from rank ``src`` into ``tensor`` on every rank of ``group``."""
    group = resolve(group)
    if not group.is_member:
        return None
    root = group.group_rank(src, "broadcast")
    what = group.next_seq("broadcast")
    host, write_back = _staged(tensor, "broadcast")
    request = group.comm.Ibcast([_bytes(host), group.MPI.BYTE], root=root)
    return _issue(group, request, what, async_op, (write_back,), (host,), tensor)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """Fill ``tensor_list[i]`` with rank ``i``'s ``tensor``, on every rank of ``group``."""
    group = resolve(group)
    if not group.is_member:
        return None
    _check_list(tensor_list, tensor, group, "all_gather", "tensor_list")
    what = group.next_seq("all_gather")
    send = _contiguous_host(tensor)
    gathered = np.empty((group.size(),) + send.shape, send.dtype)
    request = group.comm.Iallgather([_bytes(send), group.MPI.BYTE], [_bytes(gathered), group.MPI.BYTE])
    return _issue(group, request, what, async_op, [_spread(gathered, tensor_list)], (send, gathered))


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """Rank ``i`` gets the combination over ranks of their ``input_list[i]``, in ``output``."""
    group = resolve(group)
    if not group.is_member:
        return None
    _check_list(input_list, output, group, "reduce_scatter", "input_list")
    what = group.next_seq(f"reduce_scatter({op})")
    stacked = np.stack([_contiguous_host(t) for t in input_list])
    received = np.empty(output.shape, stacked.dtype)
    send, _, _ = _reduction(stacked, op, group, "reduce_scatter")
    work, mpi_op, finish = _reduction(received, op, group, "reduce_scatter")
    request = group.comm.Ireduce_scatter_block(send.reshape(-1), work.reshape(-1), mpi_op)
    return _issue(group, request, what, async_op, [finish, _spread(received[None], [output])],
                  (send, work, received))


def gather(tensor, gather_list=None, dst=0, group=None, async_op=False):
    """Rank ``dst`` gets every rank's ``tensor`` in ``gather_list`` (None on the other ranks)."""
    group = resolve(group)
    if not group.is_member:
        return None
    root = group.group_rank(dst, "gather")
    here = group.rank() == root
    _check_root_list(gather_list, here, dst, group, "gather", "gather_list", tensor)
    what = group.next_seq("gather")
    send = _contiguous_host(tensor)
    gathered = np.empty((group.size(),) + send.shape, send.dtype) if here else None
    recv = [_bytes(gathered), group.MPI.BYTE] if here else None
    request = group.comm.Igather([_bytes(send), group.MPI.BYTE], recv, root=root)
    steps = [_spread(gathered, gather_list)] if here else []
    return _issue(group, request, what, async_op, steps, (send, gathered))


def scatter(tensor, scatter_list=None, src=0, group=None, async_op=False):
    """Rank ``i`` gets ``scatter_list[i]`` of rank ``src`` in ``tensor``."""
    group = resolve(group)
    if not group.is_member:
        return None
    root = group.group_rank(src, "scatter")
    here = group.rank() == root
    _check_root_list(scatter_list, here, src, group, "scatter", "scatter_list", tensor)
    what = group.next_seq("scatter")
    received = np.empty(tensor.shape, _host_dtype(tensor))
    stacked = np.stack([_contiguous_host(t) for t in scatter_list]) if here else None
    send = [_bytes(stacked), group.MPI.BYTE] if here else None
    request = group.comm.Iscatter(send, [_bytes(received), group.MPI.BYTE], root=root)
    return _issue(group, request, what, async_op, [_spread(received[None], [tensor])], (stacked, received))


def barrier(group=None, async_op=False):
    """Wait until every rank of ``group`` reached this call."""
    group = resolve(group)
    if not group.is_member:
        return None
    what = group.next_seq("barrier")
    return _issue(group, group.comm.Ibarrier(), what, async_op, [], ())


# -- buffers ---------------------------------------------------------------------------------
def _host_dtype(tensor):
    return tensor._data.dtype


def _contiguous_host(tensor):
    data = tensor._data
    if tensor.device.type != "cpu":
        data = tensor.device.xp.asnumpy(data)
    return np.ascontiguousarray(data)


def _staged(tensor, who):
    """``(host buffer, write-back or None)``: the tensor's own memory when it is contiguous on the cpu."""
    data = tensor._data
    if tensor.device.type == "cpu" and data.flags.c_contiguous:
        return data, None
    host = _contiguous_host(tensor)
    xp = tensor.device.xp

    def write_back():
        data[...] = host if xp is np else xp.asarray(host)

    return host, write_back


def _bytes(array):
    """A contiguous array's memory as bytes (the collectives that only move data need no MPI type)."""
    return array.reshape(-1).view(np.uint8)


def _spread(gathered, tensors):
    """Write ``gathered[i]`` into ``tensors[i]`` (on each one's device)."""

    def spread():
        for part, t in zip(gathered, tensors):
            xp = t.device.xp
            t._data[...] = part if xp is np else xp.asarray(part)
            bump_version(t)

    return spread


def _reduction(host, op, group, who):
    """``(array MPI reduces, MPI op, finish or None)`` for reducing ``host``: upcast 16-bit floats, bools as
    bytes; ``finish`` (dividing for an average, casting back) is None when MPI's result is the answer."""
    MPI = group.MPI
    if op not in _OPS:
        raise DistributedError(f"{who}: unknown op {op!r}; use fxkit.distributed.ReduceOp.SUM, AVG, PRODUCT, MIN "
                               f"or MAX")
    dtype = host.dtype
    floating = dtype.kind == "f" or dtype.name == "bfloat16"
    if op == ReduceOp.AVG and not floating:
        raise DistributedError(f"{who}: ReduceOp.AVG needs a floating point tensor, got {dtype.name}; cast it "
                               f"(.float()) or reduce with ReduceOp.SUM and divide")
    if dtype == np.bool_:
        work = host.view(np.uint8)
        mpi_op = MPI.MAX if op in (ReduceOp.SUM, ReduceOp.MAX) else MPI.MIN
    else:
        work = host.astype(np.float32) if floating and dtype.itemsize == 2 else host
        mpi_op = getattr(MPI, _MPI_OPS[op])
    if op != ReduceOp.AVG and work is host:
        return work, mpi_op, None
    size = group.size()

    def finish():
        if op == ReduceOp.AVG:
            np.divide(work, size, out=work)
        if work is not host and work.dtype != np.uint8:
            host[...] = work.astype(dtype)

    return work, mpi_op, finish


def _check_list(tensors, like, group, who, name):
    if len(tensors) != group.size():
        raise DistributedError(f"{who}: {name} has {len(tensors)} tensors but the group has {group.size()} ranks; "
                               f"pass one tensor per rank")
    for i, t in enumerate(tensors):
        if t.shape != like.shape or t.dtype is not like.dtype:
            raise DistributedError(f"{who}: {name}[{i}] is {t.dtype.name}{list(t.shape)} but the tensor is "
                                   f"{like.dtype.name}{list(like.shape)}; every tensor must have the same shape "
                                   f"and dtype")


def _check_root_list(tensors, here, root, group, who, name, like):
    if here:
        if tensors is None:
            raise DistributedError(f"{who}: rank {root} is the root and must pass {name} (one tensor per rank)")
        _check_list(tensors, like, group, who, name)
    elif tensors:
        raise DistributedError(f"{who}: {name} must be None on ranks other than the root (rank {root})")


def _issue(group, request, what, async_op, steps, keep, written=None):
    """Start tracking ``request``: a `Work` when ``async_op``, else wait for it here.

    ``steps`` (None entries skipped) run in order once the data arrived, then
    ``written``'s version is bumped (an in-place write, for autograd's checks).
    """
    steps = [s for s in steps if s is not None]
    if written is not None:
        steps.append(lambda: bump_version(written))
    work = Work(group, request, what, _in_order(steps) if len(steps) > 1 else (steps[0] if steps else None), keep)
    if async_op:
        return work
    work.wait()
    return None


def _in_order(steps):
    def finish():
        for step in steps:
            step()

    return finish
