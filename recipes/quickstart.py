"""Quickstart: fxkit's eager runtime, as in the seed talk's first example.

Computes pairwise squared distances between two point sets twice — with a
Python double loop over rows, then with one broadcast expression — times
both, checks they agree, and runs the LeNet-style ``Net`` on a batch.

    python recipes/quickstart.py
"""
import time

import numpy as np
from rich.console import Console
from rich.table import Table

import fxkit
import fxkit.models


def pairwise_distance_loop(a, b):
    """The double loop of the talk: one small op per pair of points."""
    p, q = a.shape[0], b.shape[0]
    squares = fxkit.zeros((p, q))
    for i in range(p):
        for j in range(q):
            diff = a[i, :] - b[j, :]
            diff_squared = diff ** 2
            squares[i, j] = fxkit.sum(diff_squared)
    return squares


def pairwise_distance_broadcast(a, b):
    """The batched form: broadcasting replaces both loops."""
    diff = a[:, None, :] - b[None, :, :]
    diff_squared = diff ** 2
    return fxkit.sum(diff_squared, dim=2)


def best_time(fn, *args, repeats=3):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - start)
    return out, best


def main():
    console = Console()
    fxkit.manual_seed(0)
    a = fxkit.randn(100, 2)
    b = fxkit.randn(200, 2)

    looped, t_loop = best_time(pairwise_distance_loop, a, b, repeats=1)
    batched, t_batch = best_time(pairwise_distance_broadcast, a, b)
    reference = ((a.numpy()[:, None, :].astype(np.float64) - b.numpy()[None, :, :]) ** 2).sum(axis=2)
    np.testing.assert_allclose(looped.numpy(), reference, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batched.numpy(), reference, rtol=1e-5, atol=1e-6)

    table = Table(title="Pairwise distance, 100 x 200 points")
    table.add_column("version")
    table.add_column("time", justify="right")
    table.add_column("speed-up", justify="right")
    table.add_row("double loop", f"{t_loop * 1e3:.1f} ms", "1x")
    table.add_row("broadcast", f"{t_batch * 1e6:.0f} µs", f"{t_loop / t_batch:.0f}x")
    console.print(table)

    net = fxkit.models.Net().eval()
    images = fxkit.randn(4, 1, 28, 28)
    log_probs = net(images)
    console.print(net)
    console.print(f"LeNet output: shape {tuple(log_probs.shape)}, dtype {log_probs.dtype}")
    console.print(f"predicted classes: {log_probs.argmax(dim=1).tolist()}")
    console.print(f"rows sum to one in probability space: {np.allclose(log_probs.exp().sum(dim=1).numpy(), 1, atol=1e-5)}")


if __name__ == "__main__":
    main()
