"""Which eager arrays may run `fxkit.runtime.ops.pool_loops`' numba loops instead of numpy's form.

Kept apart from the loops so that asking does not import numba (~0.5 s): a small pool, or any cupy
array, never loads it.
"""
import numpy as np

LOOP_MIN = 4096
"""Elements from which an op runs its loop: below it numpy's form takes a few microseconds anyway."""


def loops_fit(xp, *arrays):
    """Whether ``arrays`` may run the loops: numpy float32/float64 ones, the first of at least `LOOP_MIN`
    elements."""
    return (xp is np and arrays[0].size >= LOOP_MIN
            and all(a.dtype in (np.float32, np.float64) for a in arrays))
