"""Interleaved timing for the side-by-side ratio benchmarks: every contender in one process, taking turns.

A round of one contender is a rest of `PAUSE`, untimed calls for at least
`WARM_SECONDS`, then timed calls for at least `TIMED_SECONDS` (one call at
least), averaged. Why each part:

* **The rest.** OpenBLAS, numba and PyTorch workers spin a while after a call
  (OpenBLAS's up to about 0.1 s); on a 2-core machine they would take the cores
  of the contender that follows: without a rest, PyTorch's resnet18 at batch 1
  took 116 ms interleaved against 23 ms on its own.
* **The warm-up after it.** The first call after a rest pays for waking the
  contender's sleeping workers and for its cold caches: a ``(1, 784) @ (784, 512)``
  product took 0.86 ms right after a 0.2 s sleep against 0.035 ms back to back,
  and the zoo's MLP forward 0.91 against 0.04 ms; timing that first call made
  every model of a few milliseconds look alike (one such run put LeNet's
  forward at 8.5 ms). After 20 ms of calls the MLP was back at 0.036 ms.
* **Several timed calls.** A forward of 40 microseconds is below the clock's
  and the scheduler's noise; averaging calls over `TIMED_SECONDS` keeps one
  round's figure meaningful. A forward longer than that is timed once.

The contenders take turns, so load from elsewhere on the machine hits all of
them alike; each figure is then the median over rounds.
"""
import statistics
import time

PAUSE = 0.2
"""Seconds of rest before each contender's round (see the module docstring)."""
WARM_SECONDS = 0.02
"""Seconds of untimed calls after the rest: wakes the contender's workers and warms its caches."""
TIMED_SECONDS = 0.02
"""Least seconds of timed calls in one round (at least one call), averaged into the round's figure."""


def one_round(fn, timed_seconds=TIMED_SECONDS):
    """``(wall, cpu)`` seconds per call of ``fn``: rest, warm up, then calls for ``timed_seconds``."""
    time.sleep(PAUSE)
    start = time.perf_counter()
    fn()
    while time.perf_counter() - start < WARM_SECONDS:
        fn()
    calls = 0
    wall, cpu = time.perf_counter(), time.process_time()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - wall
        if elapsed >= timed_seconds:
            return elapsed / calls, (time.process_time() - cpu) / calls


def interleaved_rounds(calls, repeats, timed_seconds=TIMED_SECONDS):
    """``{name: [(wall, cpu) per call of each round]}`` over ``repeats`` rounds in which every contender
    of ``calls`` (``{name: callable of no arguments}``) takes its turn, after one warm-up call each."""
    for fn in calls.values():
        fn()
    rounds = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            rounds[name].append(one_round(fn, timed_seconds))
    return rounds


def median_wall(rounds):
    """``{name: median wall seconds per call}`` of `interleaved_rounds`' result."""
    return {name: statistics.median(wall for wall, _ in kept) for name, kept in rounds.items()}
