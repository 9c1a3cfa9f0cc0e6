"""Shared fixtures: device parametrisation (numpy always, cupy under the cuda mark) and
random generators seeded by each test's id."""
import os
import random
import sys
import zlib

import numpy as np
import pytest

import fxkit

HAS_CUDA = fxkit.cuda.is_available()

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda", marks=[pytest.mark.cuda,
                                          pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU with cupy")]),
]


@pytest.fixture(params=DEVICES)
def device(request):
    """Each test taking ``device`` runs on cpu, and on cuda when a GPU is present."""
    return request.param


def _test_seed(nodeid):
    """A seed fixed by the test's id, so a failure in CI replays on any machine.

    ``FXKIT_TEST_SEED=<n>`` shifts every test's seed, to explore other draws locally.
    """
    return (zlib.crc32(nodeid.encode()) + int(os.environ.get("FXKIT_TEST_SEED", "0"))) % 2**32


@pytest.fixture(autouse=True)
def _seeded_generators(request):
    """Seed every random source a test can reach (fxkit's factories and initialisers, numpy's
    global generator, Python's ``random``, PyTorch's when the test imported it) from its id."""
    seed = _test_seed(request.node.nodeid)
    fxkit.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)


@pytest.fixture
def rng(request):
    """A random generator per test, seeded by the test's id; inputs are never zeros or constants."""
    return np.random.default_rng(_test_seed(request.node.nodeid))
