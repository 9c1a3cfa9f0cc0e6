"""A threaded `Pipeline` never waits forever: a hung stage times out, Ctrl-C ends the call."""
import _thread
import threading
import time

import pytest

import fxkit
from fxkit import nn
from fxkit.backends.pipeline import Pipeline
from fxkit.errors import PipelineError


class Hangs(nn.Module):
    """Blocks in forward until ``release`` is set (a stage stuck in a kernel or a lock)."""

    def __init__(self, release):
        super().__init__()
        self.release = release

    def forward(self, x):
        self.release.wait()
        return x


@pytest.fixture
def release():
    event = threading.Event()
    yield event
    event.set()  # lets the left-behind stage thread finish


def test_a_hung_stage_times_out_naming_it(release):
    pipe = Pipeline([nn.ReLU(), Hangs(release), nn.ReLU()], chunks=2, timeout=0.5)
    start = time.monotonic()
    with pytest.raises(PipelineError, match=r"Pipeline stage 1 on cpu, forward of micro-batch 0: did not finish "
                                            r"within timeout=0.5 s; the stage hangs or needs a larger "
                                            r"Pipeline\(timeout=...\)"):
        pipe(fxkit.randn(4, 3))
    assert time.monotonic() - start < 5


def test_a_hung_train_step_times_out(release):
    class Double(nn.Module):
        def forward(self, x):
            return x * 2.0

    pipe = Pipeline([nn.Linear(3, 3), Double()], chunks=2, timeout=0.5)
    stuck = pipe.train_step

    def loss(out, target):
        release.wait()  # the loss runs in the last stage's forward step
        return ((out - target) ** 2).mean()

    with pytest.raises(PipelineError, match=r"Pipeline stage 1 on cpu, forward of micro-batch 0: did not finish"):
        stuck([fxkit.randn(4, 3)], fxkit.randn(4, 3), loss)


def test_ctrl_c_ends_the_call_promptly(release):
    pipe = Pipeline([nn.ReLU(), Hangs(release)], chunks=2, timeout=None)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            pipe(fxkit.randn(4, 3))
    finally:
        timer.cancel()
    assert time.monotonic() - start < 5


def test_a_finished_call_keeps_working_after_a_timeout(release):
    pipe = Pipeline([nn.ReLU(), nn.ReLU()], chunks=2, timeout=5)
    x = fxkit.randn(4, 3)
    assert (pipe(x).numpy() == x.relu().numpy()).all()


@pytest.mark.parametrize("timeout", [0, -1, float("inf"), "1"])
def test_the_timeout_must_be_positive_seconds(timeout):
    with pytest.raises(PipelineError, match=r"timeout is seconds a stage step may take, a positive number or None"):
        Pipeline([nn.ReLU()], timeout=timeout)
