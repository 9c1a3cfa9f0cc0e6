"""Run under ``mpiexec -n P*D``: P pipeline stages x D replicas for 20 steps equals one process training
the unsplit model on the concatenated global batch. Prints one line per rank."""
import argparse

import numpy as np

import fxkit
import fxkit.distributed as dist
import fxkit.nn.functional as F
from fxkit import nn
from fxkit.backends.pipeline_ddp import PipelineDataParallel
from fxkit.transforms.split_pipeline import split_pipeline

GLOBAL_BATCH = 12


def build():
    fxkit.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 4), nn.LogSoftmax(dim=1)).double()


def batch(step):
    rng = np.random.default_rng(step)
    return fxkit.from_numpy(rng.standard_normal((GLOBAL_BATCH, 6))), fxkit.from_numpy(rng.integers(0, 4, GLOBAL_BATCH))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    dist.init_process_group("mpi", timeout=60)
    model = build()
    parent = split_pipeline(model, [batch(0)[0]], n_stages=args.stages, verbose=False)
    trainer = PipelineDataParallel(parent, chunks=args.chunks)
    d, replicas = trainer.replica, trainer.n_replicas
    lo, hi = d * GLOBAL_BATCH // replicas, (d + 1) * GLOBAL_BATCH // replicas
    opt = fxkit.optim.SGD(trainer.parameters(), lr=0.1, momentum=0.9)
    reference = build()
    ref_opt = fxkit.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for step in range(args.steps):
        x, y = batch(step)
        opt.zero_grad()
        trainer.train_step([x[lo:hi]], y[lo:hi], F.nll_loss)
        opt.step()
        ref_opt.zero_grad()
        F.nll_loss(reference(x), y).backward()
        ref_opt.step()
    mine = {id(p) for p in trainer.parameters()}
    worst, count = 0.0, 0
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        if id(p) in mine:
            count += 1
            worst = max(worst, float(np.abs(p.numpy() - q.numpy()).max() / np.abs(q.numpy()).max()))
    assert count == len(mine) and worst <= 1e-10, f"relative difference {worst:.3g}"
    print(f"rank {dist.get_rank()}: stage {trainer.stage} of replica {d} ({args.stages} x {replicas}) equals one "
          f"process after {args.steps} steps (relative difference {worst:.2g})", flush=True)


if __name__ == "__main__":
    with dist.abort_on_error():
        main()
