"""Shared fixtures: device parametrisation (numpy always, cupy under the cuda mark)."""
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


@pytest.fixture
def rng():
    """A fresh random generator per test; inputs are never zeros or constants."""
    return np.random.default_rng()
