"""The collectives under ``mpiexec -n 2``, ``-n 3`` and ``-n 4`` match numpy: every op, sync and async,
random shapes (sizes 0 and 1 among them) and dtypes, contiguous and strided tensors, a sub-group."""
import pytest

import fxkit.distributed as dist
from fxkit.errors import DistributedError
from tests.distributed.mpirun import HERE, mpirun, needs_mpi, output


@needs_mpi
@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3, pytest.param(4, marks=pytest.mark.slow)])
def test_every_collective_matches_numpy_on_every_rank(n):
    result, _ = mpirun(n, HERE / "collective_worker.py")
    assert result.returncode == 0, output(result)
    for rank in range(n):
        assert f"rank {rank}: 40 cases agree with numpy" in result.stdout


def test_only_the_mpi_backend_exists():
    with pytest.raises(DistributedError, match=r"backend 'nccl' is not available; fxkit runs collectives over MPI"):
        dist.init_process_group("nccl")


def test_collectives_before_init_say_how_to_start():
    assert not dist.is_initialized()
    with pytest.raises(DistributedError, match=r"not initialized; call fxkit.distributed.init_process_group"):
        dist.get_rank()
