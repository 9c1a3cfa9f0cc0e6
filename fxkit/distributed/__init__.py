"""``fxkit.distributed``: process groups and collectives over MPI, and data-parallel training.

Start a job with ``fxkit launch -n 4 train.py`` (or ``mpiexec -n 4 python
train.py``); in the script, ``init_process_group("mpi")`` joins it. The
collectives (``all_reduce``, ``broadcast``, ``all_gather``, ``reduce_scatter``,
``gather``, ``scatter``, ``barrier``) follow ``torch.distributed``, each with
``async_op=True`` returning a `Work`. `DistributedDataParallel` (also
``fxkit.nn.parallel.DistributedDataParallel``) averages gradients over the
ranks during backward; `DistributedSampler` gives each rank its share of a
dataset. A peer that dies or hangs ends every rank with a `DistributedError`
naming it, after ``timeout`` seconds.

Example (``fxkit launch -n 2 train.py``):
    >>> import fxkit.distributed as dist
    >>> dist.init_process_group("mpi")
    >>> model = dist.DistributedDataParallel(Net())
    >>> loss_fn(model(x), y).backward()         # gradients averaged over both ranks
"""
from fxkit.distributed.collectives import (ReduceOp, all_gather, all_reduce, barrier, broadcast, gather,
                                           reduce_scatter, scatter)
from fxkit.distributed.checkpoint import load_checkpoint, save_checkpoint
from fxkit.distributed.ddp import DistributedDataParallel
from fxkit.distributed.process_group import (ProcessGroup, destroy_process_group, get_rank, get_world_size,
                                             init_process_group, is_available, is_initialized, new_group)
from fxkit.distributed.reducer import average_gradients
from fxkit.distributed.sampler import DistributedSampler
from fxkit.distributed.transport import abort_on_error
from fxkit.distributed.work import Work
from fxkit.errors import DistributedError

__all__ = ["DistributedDataParallel", "DistributedSampler", "average_gradients", "DistributedError", "ProcessGroup", "ReduceOp", "Work", "abort_on_error", "all_gather", "all_reduce",
           "barrier", "broadcast", "destroy_process_group", "gather", "get_rank", "get_world_size",
           "init_process_group", "is_available", "is_initialized", "load_checkpoint", "new_group", "reduce_scatter",
           "save_checkpoint", "scatter"]
