"""Split ResNet-50 into 4 stages balanced by FLOPs and run them as a pipeline.

    python recipes/split_resnet.py [--batch 4] [--chunks 2] [--balance flops|params|time]

Prints the stage table (nodes, FLOPs, parameter bytes, activation bytes each
stage sends on), places the stages on the GPUs there are (``cuda:0`` ...
``cuda:3``, repeating when fewer; the cpu when none), runs the batch through
the pipeline in micro-batches, checks it against the unsplit model, and
times each stage on one micro-batch to show how even the split is.
"""
import argparse
import time

import numpy as np

import fxkit
import fxkit.models
from fxkit.backends.microbatch import join_batches, split_batch
from fxkit.backends.pipeline import Pipeline
from fxkit.transforms.split_pipeline import split_pipeline
from fxkit.transforms.stage_chain import StageChain


def devices_for(k):
    gpus = fxkit.cuda.device_count()
    return [f"cuda:{i % gpus}" for i in range(k)] if gpus else ["cpu"] * k


def stage_seconds(parent, x, repeat=2):
    """Each stage's fastest time on ``x``, running the stages one after another on the cpu."""
    chain = StageChain(parent)
    best = [float("inf")] * len(chain)
    for _ in range(repeat):
        values = chain.first_inputs([x])
        for s in range(len(chain)):
            start = time.perf_counter()
            values = chain.run_stage(s, values)
            best[s] = min(best[s], time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=2)
    parser.add_argument("--balance", default="flops", choices=("flops", "params", "time"))
    args = parser.parse_args()

    fxkit.manual_seed(0)
    model, _ = fxkit.models.get("resnet50")
    x = fxkit.from_numpy(np.random.default_rng(0).standard_normal((args.batch, 3, 224, 224)).astype(np.float32))
    parent = split_pipeline(model, [x], n_stages=4, balance=args.balance)
    flops = [s.flops for s in parent.stage_stats]
    print(f"largest stage FLOPs / (total / 4) = {max(flops) / (sum(flops) / 4):.3f} (target <= 1.15)")

    with fxkit.no_grad():
        micro = split_batch([x], args.chunks)[0][0]
        seconds = stage_seconds(parent, micro)
        print("stage times on one micro-batch (cpu): " + ", ".join(f"{t * 1e3:.0f} ms" for t in seconds)
              + f"; max / mean = {max(seconds) / (sum(seconds) / len(seconds)):.3f}")
        expected = model(x)
        per_chunk = join_batches([model(*b) for b in split_batch([x], args.chunks)])
        devices = devices_for(4)
        pipe = Pipeline(parent, devices=devices, chunks=args.chunks)
        start = time.perf_counter()
        out = pipe(x).cpu()
        elapsed = time.perf_counter() - start
    print(f"pipeline on {devices} with {args.chunks} micro-batches: {tuple(out.shape)} in {elapsed * 1e3:.0f} ms")
    scale = float(np.abs(expected.numpy()).max())
    rel = float(np.abs(out.numpy() - expected.numpy()).max()) / scale
    print(f"equals the unsplit model on the same micro-batches exactly: "
          f"{np.array_equal(out.numpy(), per_chunk.numpy())}; difference from the whole batch: {rel:.1e} of the "
          f"largest output (BLAS sums a {args.batch}-row matmul in another order than a smaller one)")


if __name__ == "__main__":
    main()
