"""What the backend tests compile: the seed talk's chain, and random float tensors."""
import numpy as np

import fxkit


def chain(x):
    """The seed talk's loop: ``x = x * x`` ten times."""
    for _ in range(10):
        x = x * x
    return x


def randn(rng, *shape, dtype=np.float32):
    """A tensor of standard normal values of ``shape`` and ``dtype``."""
    return fxkit.from_numpy(rng.standard_normal(shape).astype(dtype))
