"""Process groups: which MPI ranks take part in a collective, and what happens when one is lost.

``init_process_group(backend="mpi")`` reads the rank and world size from the
MPI launch (``mpiexec -n 4 python train.py`` or ``fxkit launch -n 4
train.py``) and makes the default group; ``new_group(ranks)`` makes a
sub-group, as in ``torch.distributed``. Each group owns a duplicate of the
MPI communicator (its collectives never match another group's or the user's
own MPI traffic) and a second one for roll calls.

A roll call is how a hung or dead peer gets its name: a rank whose wait on a
collective passes the deadline asks every member which collective it is in
(`roll_call`); ranks waiting answer at once, between their own polls; the
ranks that never answer are named in a `DistributedError` that the asking
rank raises and sends to the others, so every rank ends with the same error.
After that the MPI state is unusable (a collective is half done), so the
group is marked broken and the process calls ``MPI_Abort`` at exit instead
of ``MPI_Finalize``, which would wait on the lost rank forever.
"""
import atexit
import datetime
import json

import numpy as np

from fxkit.distributed.transport import import_mpi, poll
from fxkit.errors import DistributedError

QUERY, ANSWER, VERDICT = 21, 22, 23
# The default group, and whether a lost peer left MPI unusable (read by the collectives' fast path).
STATE = {"default": None, "broken": False, "exit_hook": False}


class ProcessGroup:
    """A set of ranks that run collectives together (``torch.distributed.ProcessGroup``).

    Attributes:
        ranks: the members' ranks in the world, in group order.
        timeout: seconds a collective may wait for a peer before the peer is declared lost.
    """

    def __init__(self, comm, ranks, timeout):
        self.MPI = import_mpi(DistributedError)
        self.comm = comm
        self.ranks = list(ranks)
        self.timeout = timeout
        self.side = comm.Dup() if comm is not None else None
        self.seq = 0
        self.waiting_on = None
        # The ops MPI applies as they are, by `ReduceOp` name (AVG is a SUM then a division), and MPI's
        # IN_PLACE: looked up once here, not in every small all_reduce.
        MPI = self.MPI
        self.in_place = MPI.IN_PLACE
        self.fast_checked = None  # the last small array all_reduce found MPI can reduce as it lies
        self.direct_ops = {"sum": MPI.SUM, "product": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}
        self._replies = []

    @property
    def is_member(self):
        return self.comm is not None

    def rank(self):
        """This process's rank within the group (-1 when not a member)."""
        return self.comm.Get_rank() if self.comm is not None else -1

    def size(self):
        return len(self.ranks)

    def world_rank(self):
        return self.ranks[self.rank()]

    def group_rank(self, world_rank, who):
        """The group rank of ``world_rank``, or a `DistributedError` naming ``who`` asked."""
        if world_rank not in self.ranks:
            raise DistributedError(f"{who}: rank {world_rank} is not in the group (its ranks are {self.ranks}); "
                                   f"pass the rank of a member (a rank in the world, as torch.distributed does)")
        return self.ranks.index(world_rank)

    def next_seq(self, what):
        """Number the next collective (the same on every member, which calls them in the same order)."""
        check_usable()
        self.seq += 1
        return f"{what} #{self.seq}"

    # -- the roll call ---------------------------------------------------------------------
    def answer_roll_calls(self):
        """Between polls of a wait: answer ranks asking what this one waits on; raise a verdict sent here."""
        MPI = self.MPI
        status = MPI.Status()
        while self.side.Iprobe(source=MPI.ANY_SOURCE, tag=QUERY, status=status):
            source = status.Get_source()
            self.side.Recv([np.empty(1, np.uint8), MPI.BYTE], source=source, tag=QUERY)
            reply = np.frombuffer(json.dumps({"waits": self.waiting_on}).encode(), np.uint8)
            self._replies.append((self.side.Isend([reply, MPI.BYTE], dest=source, tag=ANSWER), reply))
        if self.side.Iprobe(source=MPI.ANY_SOURCE, tag=VERDICT, status=status):
            text = _recv_text(self.side, MPI, status.Get_source(), VERDICT, status.Get_count(MPI.BYTE))
            STATE["broken"] = True
            raise DistributedError(text)

    def roll_call(self, what):
        """The deadline of ``what`` passed: find who is missing, tell the others, raise the verdict."""
        MPI = self.MPI
        me = self.rank()
        others = [r for r in range(self.size()) if r != me]
        ping = np.zeros(1, np.uint8)
        sent = [self.side.Isend([ping, MPI.BYTE], dest=r, tag=QUERY) for r in others]
        answers = {}
        status = MPI.Status()

        def collect():
            while self.side.Iprobe(source=MPI.ANY_SOURCE, tag=ANSWER, status=status):
                source = status.Get_source()
                answers[source] = json.loads(_recv_text(self.side, MPI, source, ANSWER, status.Get_count(MPI.BYTE)))
            return len(answers) == len(others)

        poll(collect, roll_call_seconds(self.timeout), self.answer_roll_calls)
        STATE["broken"] = True
        missing = [self.ranks[r] for r in others if r not in answers]
        elsewhere = {self.ranks[r]: a["waits"] for r, a in answers.items() if a["waits"] != what}
        where = f"rank {self.ranks[me]}: {what} did not complete within {self.timeout:g} s"
        if missing:
            names = ", ".join(f"rank {r}" for r in missing)
            text = (f"{where}: {names} never joined it and does not answer: it died, hangs, or runs a different "
                    f"program (every rank must make the same collective calls in the same order); pass a larger "
                    f"timeout= to init_process_group if it is only slow")
        else:
            names = ", ".join(f"rank {r} waits in {w}" for r, w in elsewhere.items()) or "every rank waits in it"
            text = (f"{where}: the ranks are in different collectives ({names}); every rank must make the same "
                    f"collective calls in the same order")
        verdict = np.frombuffer(text.encode(), np.uint8)
        told = [self.side.Isend([verdict, MPI.BYTE], dest=r, tag=VERDICT) for r in answers]
        # NOTE: only the verdicts are waited for: a query to a dead rank never completes.
        poll(lambda: MPI.Request.Testall(told), min(self.timeout, 2.0))
        self._replies.extend(sent)
        raise DistributedError(text)


def roll_call_seconds(timeout):
    """How long a roll call waits for answers: ranks still computing need a moment to reach a wait."""
    return min(max(1.0, timeout / 4), 5.0)


def _recv_text(comm, MPI, source, tag, count):
    raw = np.empty(count, np.uint8)
    comm.Recv([raw, MPI.BYTE], source=source, tag=tag)
    return raw.tobytes().decode(errors="replace")


def check_usable():
    if STATE["broken"]:
        raise DistributedError("the process group is unusable after an earlier collective failed (a peer was "
                               "lost); end the job (see the first error above)")


def _abort_if_broken():
    # NOTE: registered after mpi4py's own exit hook, so it runs first: MPI_Finalize would wait on a lost rank.
    if STATE["broken"]:
        import_mpi(DistributedError).COMM_WORLD.Abort(1)


def _seconds(timeout):
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise DistributedError(f"init_process_group: timeout is seconds (a positive number or a timedelta), "
                               f"got {timeout!r}")
    return float(timeout)


def init_process_group(backend="mpi", init_method=None, timeout=300.0, world_size=-1, rank=-1):
    """Join the job's default process group: every rank of the MPI launch.

    Args:
        backend: ``"mpi"`` (the only one: MPI carries every collective).
        init_method: accepted for torch compatibility; MPI's launcher already
            connected the ranks, so only None or ``"env://"`` is allowed.
        timeout: seconds (or a ``timedelta``) any collective waits for a peer
            before every rank ends with a `DistributedError` naming it.
        world_size, rank: if given, checked against what ``mpiexec`` started.

    Example (``mpiexec -n 2 python train.py``):
        >>> fxkit.distributed.init_process_group("mpi", timeout=60)
        >>> fxkit.distributed.get_rank(), fxkit.distributed.get_world_size()
        (0, 2)
    """
    if backend != "mpi":
        raise DistributedError(f"init_process_group: backend {backend!r} is not available; fxkit runs collectives "
                               f"over MPI: use backend=\"mpi\" and start the job with `fxkit launch -n N script.py` "
                               f"(or mpiexec)")
    if init_method not in (None, "env://"):
        raise DistributedError(f"init_process_group: init_method={init_method!r}: MPI's launcher connects the "
                               f"ranks; leave init_method out")
    if STATE["default"] is not None:
        raise DistributedError("init_process_group: the default process group is already initialized; call "
                               "destroy_process_group() first to make a new one")
    seconds = _seconds(timeout)
    MPI = import_mpi(DistributedError)
    world = MPI.COMM_WORLD
    size, me = world.Get_size(), world.Get_rank()
    if world_size not in (-1, None) and world_size != size:
        raise DistributedError(f"init_process_group: world_size={world_size} but mpiexec started {size} ranks; "
                               f"start the job with `fxkit launch -n {world_size} ...`")
    if rank not in (-1, None) and rank != me:
        raise DistributedError(f"init_process_group: rank={rank} but MPI gave this process rank {me}; leave "
                               f"rank out (the launcher assigns it)")
    STATE["default"] = ProcessGroup(world.Dup(), range(size), seconds)
    STATE["broken"] = False
    if not STATE["exit_hook"]:
        atexit.register(_abort_if_broken)
        STATE["exit_hook"] = True


def is_initialized():
    return STATE["default"] is not None


def is_available():
    """Whether mpi4py can be imported (collectives can run)."""
    try:
        import_mpi(DistributedError)
    except DistributedError:
        return False
    return True


def default_group():
    group = STATE["default"]
    if group is None:
        raise DistributedError("the default process group is not initialized; call "
                               "fxkit.distributed.init_process_group(\"mpi\") first (and start the script with "
                               "`fxkit launch -n N script.py`)")
    return group


def resolve(group):
    if group is not None:
        return group
    return STATE["default"] or default_group()


def new_group(ranks=None, timeout=None):
    """A process group of ``ranks`` (world ranks); every rank of the world must call it, in the same order.

    A rank not in ``ranks`` gets a group it is no member of: collectives on it
    return None at once there, as in ``torch.distributed``.
    """
    world = default_group()
    size = world.size()
    ranks = sorted(range(size) if ranks is None else ranks)
    if len(set(ranks)) != len(ranks) or any(not 0 <= r < size for r in ranks):
        raise DistributedError(f"new_group: ranks must be distinct ranks in 0..{size - 1}, got {ranks}")
    seconds = world.timeout if timeout is None else _seconds(timeout)
    # NOTE: Split is collective over the whole world, like torch's new_group; non-members get COMM_NULL.
    MPI = world.MPI
    member = world.rank() in ranks
    comm = world.comm.Split(0 if member else MPI.UNDEFINED, ranks.index(world.rank()) if member else 0)
    return ProcessGroup(comm if member else None, ranks, seconds)


def get_rank(group=None):
    """This process's rank in ``group`` (the world by default); -1 when it is not a member."""
    return resolve(group).rank()


def get_world_size(group=None):
    return resolve(group).size()


def destroy_process_group(group=None):
    """Free ``group``'s communicators (the default group, and with it the process group state, by default)."""
    target = resolve(group)
    for comm in (target.comm, target.side):
        if comm is not None:
            comm.Free()
    target.comm = target.side = None
    if group is None:
        STATE["default"] = None

