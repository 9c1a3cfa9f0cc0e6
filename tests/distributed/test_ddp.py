"""DistributedDataParallel over 2 and 4 ranks for 20 steps equals one process on the concatenated global
batch (float64 within 1e-10, float32 within 1e-6 relative), with plain backward, no_sync() accumulation,
an unused parameter, and gradients from a compiled fxkit.transforms.grad graph, over at least 4 buckets
(some shared by small gradients, some holding one gradient reduced where it lies); a rank that hangs in
backward ends every other rank with an error naming it."""
import re

import pytest

from tests.distributed.mpirun import HERE, STARTUP_SECONDS, mpirun, needs_mpi, output

WORKER = HERE / "ddp_worker.py"


@needs_mpi
@pytest.mark.slow
@pytest.mark.parametrize("n,mode,dtype", [
    (2, "plain", "float64"), (2, "no_sync", "float32"), (2, "unused", "float64"), (2, "graph", "float64"),
    (4, "plain", "float32"), (4, "no_sync", "float64"),
])
def test_ddp_equals_one_process_on_the_global_batch(n, mode, dtype):
    result, _ = mpirun(n, WORKER, "--mode", mode, "--dtype", dtype)
    assert result.returncode == 0, output(result)
    check_every_rank(result, n, f"{mode} {dtype} 20 steps on {n} ranks")


@needs_mpi
@pytest.mark.slow
@pytest.mark.parametrize("mode,dtype", [("plain", "float64"), ("no_sync", "float32")])
def test_ddp_with_gradients_as_bucket_views_equals_one_process(mode, dtype):
    """``gradient_as_bucket_view=True`` with gradients zeroed in place: they stay views of the buckets,
    accumulate there (``no_sync``), and are reduced where they lie."""
    result, _ = mpirun(2, WORKER, "--mode", mode, "--dtype", dtype, "--bucket-view")
    assert result.returncode == 0, output(result)
    check_every_rank(result, 2, f"{mode} {dtype} 20 steps on 2 ranks")


@needs_mpi
@pytest.mark.slow
@pytest.mark.parametrize("n,mode,dtype,view", [(2, "plain", "float64", False), (3, "no_sync", "float32", False),
                                               (2, "plain", "float32", True)])
def test_ddp_with_the_collective_thread_equals_one_process(n, mode, dtype, view):
    """Bucket all-reduces run as blocking MPI calls on the reducer's collective thread (its default only with
    a spare core per rank): the same gradients."""
    result, _ = mpirun(n, WORKER, "--mode", mode, "--dtype", dtype, "--thread", *(["--bucket-view"] if view else []))
    assert result.returncode == 0, output(result)
    check_every_rank(result, n, f"{mode} {dtype} 20 steps on {n} ranks")


def check_every_rank(result, n, what):
    for rank in range(n):
        found = re.search(rf"rank {rank}: {what}, (\d+) buckets, equals one process", result.stdout)
        assert found, output(result)
        assert int(found.group(1)) >= 4, found.group(0)


@needs_mpi
@pytest.mark.slow
@pytest.mark.parametrize("thread", [False, True])
def test_a_rank_hanging_in_backward_is_named_by_every_other_rank(thread):
    """With the collective thread too: its peers' threads stay inside MPI_Allreduce, their waits still end."""
    result, seconds = mpirun(3, WORKER, "--timeout", "5", "--fail-rank", "1", "--fail-mode", "hang",
                             *(["--thread"] if thread else []))
    assert result.returncode != 0
    assert "rank 1: injected fault (hang) in backward of step 3" in result.stdout
    named = "did not complete within 5 s: rank 1 never joined it and does not answer: it died, hangs"
    assert result.stderr.count(named) == 2, output(result)  # ranks 0 and 2
    assert seconds < STARTUP_SECONDS
