"""Pipeline x data parallel: 2 stages x 2 replicas (and 3 stages x 1) for 20 steps equal one process
training the unsplit model on the concatenated global batch (float64, within 1e-10)."""
import pytest

from tests.distributed.mpirun import HERE, mpirun, needs_mpi, output


@needs_mpi
@pytest.mark.slow
@pytest.mark.parametrize("n,stages", [(4, 2), (3, 3)])
def test_stages_times_replicas_equal_one_process(n, stages):
    result, _ = mpirun(n, HERE / "pipeline_ddp_worker.py", "--stages", stages)
    assert result.returncode == 0, output(result)
    replicas = n // stages
    for rank in range(n):
        assert (f"rank {rank}: stage {rank % stages} of replica {rank // stages} ({stages} x {replicas}) equals "
                f"one process after 20 steps") in result.stdout
