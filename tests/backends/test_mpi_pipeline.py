"""The MPI pipeline: ``recipes/pipeline_mpi.py`` under ``mpiexec -n 2`` and ``-n 3`` equals one process,
and a rank that dies, hangs, fails or is missing ends the whole job with an error, never a hang.

Skipped when mpi4py or mpiexec is missing (``pip install fxkit[mpi]`` brings both).
"""
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import fxkit
from fxkit.backends.microbatch import join_batches, split_batch
from fxkit.distributed.transport import decode, encode
from fxkit.errors import PipelineError

ROOT = pathlib.Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "pipeline_mpi.py"
MPIEXEC = shutil.which("mpiexec", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("mpiexec")
HAS_MPI = importlib.util.find_spec("mpi4py") is not None and MPIEXEC is not None
needs_mpi = pytest.mark.skipif(not HAS_MPI, reason="needs mpi4py and mpiexec (pip install fxkit[mpi])")
# Start-up of k Python processes importing fxkit and splitting the model, on a loaded 2-core machine.
STARTUP_SECONDS = 30


def mpirun(n, *args, timeout=STARTUP_SECONDS + 30, tmp_path=None):
    """Run the recipe on ``n`` ranks; returns (completed process, seconds)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.monotonic()
    result = subprocess.run([MPIEXEC, "-n", str(n), sys.executable, str(RECIPE), *args], capture_output=True,
                            text=True, timeout=timeout, env=env, cwd=tmp_path or ROOT)
    return result, time.monotonic() - start


def load_recipe():
    spec = importlib.util.spec_from_file_location("pipeline_mpi", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_mpi
@pytest.mark.slow
@pytest.mark.parametrize("n,model,batch,chunks", [(2, "lenet", 6, 3), (3, "lstm_cell", 8, 4)])
def test_recipe_on_ranks_equals_the_single_process_model(n, model, batch, chunks, tmp_path):
    out_file = tmp_path / "out.npz"
    result, _ = mpirun(n, "--model", model, "--batch", str(batch), "--chunks", str(chunks), "--out", str(out_file),
                       tmp_path=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"{n} ranks, {chunks} micro-batches" in result.stdout
    # The last rank compares with the unsplit model in its own process (same BLAS threads): bit for bit.
    assert f"equals the unsplit model on the same {chunks} micro-batches exactly: True" in result.stdout
    saved = np.load(out_file)
    got = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    args = type("Args", (), {"model": model, "batch": batch})
    reference_model, inputs = load_recipe().build(args)
    with fxkit.no_grad():
        whole = reference_model(*inputs)
        per_chunk = join_batches([reference_model(*b) for b in split_batch(list(inputs), chunks)])
    flat = (lambda v: v if isinstance(v, tuple) else (v,))
    # Here, in another process whose BLAS may use other threads, last bits may differ: 1e-6 of the output.
    for g, c, w in zip(got, flat(per_chunk), flat(whole)):
        for reference in (c, w):
            scale = float(np.abs(reference.numpy()).max())
            np.testing.assert_allclose(g, reference.numpy(), rtol=1e-6, atol=1e-6 * scale)


@needs_mpi
@pytest.mark.slow
def test_killing_a_rank_mid_run_ends_every_rank():
    result, seconds = mpirun(3, "--fail-rank", "1", "--fail-at", "1", "--fail-mode", "kill", "--timeout", "5")
    assert result.returncode != 0
    assert "rank 1: injected fault (kill) at micro-batch 1" in result.stdout
    assert seconds < STARTUP_SECONDS + 5


@needs_mpi
@pytest.mark.slow
def test_a_hanging_rank_is_detected_by_the_receive_deadline():
    result, seconds = mpirun(3, "--fail-rank", "1", "--fail-at", "1", "--fail-mode", "hang", "--timeout", "3")
    assert result.returncode != 0
    assert ("PipelineError: rank 2 (stage 2): waited 3 s for micro-batch from rank 1 (stage 1), which never came: "
            "that rank died, hangs, or runs a different pipeline") in result.stderr
    assert seconds < STARTUP_SECONDS + 3 + 5


@needs_mpi
@pytest.mark.slow
def test_a_failing_stage_stops_its_neighbours_with_its_error():
    result, _ = mpirun(3, "--fail-rank", "1", "--fail-at", "0", "--fail-mode", "raise", "--timeout", "20")
    assert result.returncode != 0
    assert "PipelineError: rank 1 (stage 1) failed: RuntimeError: injected fault" in result.stderr
    assert "PipelineError: rank 2 (stage 2) stops: rank 1 (stage 1) failed: RuntimeError: injected fault" in \
        result.stderr


@needs_mpi
@pytest.mark.slow
def test_a_wrong_number_of_ranks_is_refused_by_every_rank():
    result, _ = mpirun(2, "--stages", "3", "--timeout", "5")
    assert result.returncode != 0
    assert "the pipeline has 3 stages but 2 MPI ranks run it; start it with `mpiexec -n 3 ...`" in result.stderr


@needs_mpi
@pytest.mark.slow
def test_ranks_running_different_pipelines_disagree_at_the_handshake():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = [MPIEXEC, "-n", "1", sys.executable, str(RECIPE), "--chunks", "2", "--timeout", "5", ":",
               "-n", "1", sys.executable, str(RECIPE), "--chunks", "4", "--timeout", "5"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=STARTUP_SECONDS + 30, env=env, cwd=ROOT)
    assert result.returncode != 0
    assert "rank 1 (stage 1): rank 0 (stage 0) runs a different pipeline" in result.stderr


def test_messages_round_trip_tensors_and_plain_values_without_pickling():
    t = fxkit.randn(2, 3)
    ints = fxkit.tensor([[1, 2], [3, 4]])
    values = [t, (ints[:, 1], 7, None), {"scale": 0.5, "name": "x", "flag": True}]
    header, arrays = encode(values, 4)
    assert len(arrays) == 2 and all(a.flags.c_contiguous for a in arrays)  # ints[:, 1] is a strided view
    parsed = json.loads(header)  # the header is JSON: receiving it runs no code
    assert parsed["j"] == 4 and parsed["arrays"][1] == [[2], "<i8"]
    got = decode(parsed, [a.copy() for a in arrays])
    np.testing.assert_array_equal(got[0].numpy(), t.numpy())
    np.testing.assert_array_equal(got[1][0].numpy(), np.array([2, 4]))
    assert got[1][1:] == (7, None) and got[2] == {"scale": 0.5, "name": "x", "flag": True}


def test_values_that_would_need_pickling_are_refused():
    with pytest.raises(PipelineError, match=r"a Device value cannot be sent between ranks"):
        encode([fxkit.Device("cpu")], 0)
    with pytest.raises(PipelineError, match=r"only dicts with str keys can be sent, got keys \[1\]"):
        encode({1: 2}, 0)
