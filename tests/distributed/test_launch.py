"""``fxkit launch``: runs a script on N ranks; a rank killed during backward is named by the launcher and
by every other rank, and the job ends well within 30 s of the kill."""
import os
import subprocess
import sys

import pytest

from fxkit.distributed.launch import WATCHER, command, job_results
from fxkit.errors import DistributedError
from tests.distributed.mpirun import HERE, ROOT, STARTUP_SECONDS, needs_mpi, output


def fxkit_launch(*args, timeout=STARTUP_SECONDS + 60):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "fxkit.cli", "launch", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


@needs_mpi
@pytest.mark.slow
def test_a_rank_killed_in_backward_is_named_by_the_launcher_and_every_other_rank():
    result = fxkit_launch("-n", 3, HERE / "ddp_worker.py", "--timeout", 5, "--fail-rank", 1, "--fail-mode", "kill")
    assert result.returncode != 0
    assert "rank 1: injected fault (kill) in backward of step 3" in result.stdout
    assert "DistributedError: rank 1 (pid " in result.stderr and "was killed by signal SIGKILL" in result.stderr
    named = "did not complete within 5 s: rank 1 never joined it and does not answer"
    for rank in (0, 2):  # each survivor names it (or relays the verdict of the one that named it first)
        assert any(line.startswith("DistributedError: rank ") and named in line
                   for line in result.stderr.splitlines()), output(result)


@needs_mpi
@pytest.mark.slow
def test_launch_runs_the_script_with_its_arguments_on_n_ranks():
    result = fxkit_launch("-n", 2, HERE / "ddp_worker.py", "--steps", 2, "--mode", "no_sync")
    assert result.returncode == 0, output(result)
    assert "rank 1: no_sync float64 2 steps on 2 ranks" in result.stdout


def test_the_command_keeps_ranks_alive_to_name_a_lost_one():
    cmd = command(4, "train.py", ["--lr", "0.1"], mpiexec="mpiexec")
    assert cmd[:4] == ["mpiexec", "-disable-auto-cleanup", "-n", "4"]
    assert cmd[-4:] == [str(WATCHER), "train.py", "--lr", "0.1"]
    with pytest.raises(DistributedError, match="-n is the number of ranks, a positive int; got 0"):
        command(0, "train.py", [], mpiexec="mpiexec")


def test_job_results_are_found_where_another_rank_s_line_runs_into_them():
    """The output CI once got from recipes/pipeline_ddp.py: rank 3's newline came after rank 0's result."""
    stdout = ('rank 1: stage 1 of replica 0, equal to the other replica: True\n'
              'rank 3: stage 1 of replica 1, equal to the other replica: TrueRESULT {"accuracy": 0.857, '
              '"step_ms": 31.8}\nrank 0: stage 0 of replica 0, equal: True\n\nRESULT {"k": 2, "busy": [0.1, 0.2]}\n')
    assert job_results(stdout) == [{"accuracy": 0.857, "step_ms": 31.8}, {"k": 2, "busy": [0.1, 0.2]}]
    assert job_results('RESULT [{"bytes": 4096, "ratio": 0.74}]\n') == [[{"bytes": 4096, "ratio": 0.74}]]
    assert job_results("epoch 1: loss 2.25\nRESULT not json\n") == []
