"""Train the digits Net as 2 pipeline stages x 2 data-parallel replicas on 4 MPI ranks.

    python recipes/pipeline_ddp.py                     # launches itself on 4 ranks
    fxkit launch -n 4 recipes/pipeline_ddp.py --worker # the same, by hand

``split_pipeline`` cuts the model into 2 stages balanced by FLOPs; ranks 0 and
1 run replica 0's stages, ranks 2 and 3 replica 1's. Each replica trains on
its half of every global batch of 64 images in 2 micro-batches, passing
activations and their gradients between its stages over MPI; the two ranks of
each stage then average that stage's gradients over their sub-group, so both
replicas stay equal (`fxkit.backends.pipeline_ddp.PipelineDataParallel`).
Rank 1 (replica 0's last stage) prints the loss per epoch and the held-out
accuracy; every rank says whether its stage equals the other replica's.
"""
import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import fxkit  # noqa: E402
import fxkit.distributed as dist  # noqa: E402
import fxkit.models  # noqa: E402
from fxkit.backends.pipeline_ddp import PipelineDataParallel  # noqa: E402
from fxkit.nn import functional as F  # noqa: E402
from fxkit.transforms.split_pipeline import split_pipeline  # noqa: E402

GLOBAL_BATCH = 64


def worker(args):
    dist.init_process_group("mpi", timeout=120)
    fxkit.manual_seed(args.seed)
    data = load_digits()
    images = fxkit.from_numpy((data.images / 16.0).astype(np.float32)[:, None, :, :])
    labels = fxkit.from_numpy(data.target.astype(np.int64))
    cut = len(data.target) - len(data.target) // 4
    model = fxkit.models.DigitsNet(dropout=0.0)  # no dropout: the replicas' random streams would differ
    parent = split_pipeline(model, [images[:GLOBAL_BATCH]], n_stages=args.stages, verbose=False)
    trainer = PipelineDataParallel(parent, chunks=args.chunks)
    optimizer = fxkit.optim.SGD(trainer.parameters(), lr=args.lr, momentum=0.9)
    share = GLOBAL_BATCH // trainer.n_replicas
    rng = np.random.default_rng(args.seed)
    seconds = []
    for epoch in range(args.epochs):
        order = rng.permutation(cut)  # the same on every rank: replica r takes its share of each batch
        losses = []
        for start in range(0, cut - GLOBAL_BATCH + 1, GLOBAL_BATCH):
            mine = fxkit.from_numpy(order[start + trainer.replica * share:start + (trainer.replica + 1) * share])
            optimizer.zero_grad()
            loss = trainer.train_step([images[mine]], labels[mine], F.nll_loss)
            optimizer.step()
            seconds.append(trainer.wall_seconds)
            if loss is not None:
                losses.append(loss)
        if losses and dist.get_rank() == args.stages - 1:
            print(f"epoch {epoch + 1}: replica 0's mean loss {np.mean(losses):.4f}", flush=True)
    out = trainer(images[cut:])
    flat = np.concatenate([p.numpy().ravel() for p in trainer.parameters()])
    both = [fxkit.zeros_like(fxkit.from_numpy(flat)) for _ in range(trainer.n_replicas)]
    dist.all_gather(both, fxkit.from_numpy(flat), group=trainer.stage_group)
    equal = all(np.array_equal(b.numpy(), flat) for b in both)
    print(f"rank {dist.get_rank()}: stage {trainer.stage} of replica {trainer.replica}, equal to the other replica: "
          f"{equal}", flush=True)
    if out is not None and trainer.replica == 0:
        accuracy = float((out.argmax(dim=1) == labels[cut:]).float().mean())
        print("RESULT " + json.dumps({"accuracy": accuracy, "step_ms": 1e3 * float(np.median(seconds))}), flush=True)
    if not equal:
        raise SystemExit("the replicas of a stage differ")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help="run as one rank (under fxkit launch)")
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.worker:
        with dist.abort_on_error():
            worker(args)
        return
    if not dist.is_available():
        print("mpi4py is not installed: `pip install fxkit[mpi]` to run stages and replicas on several ranks")
        return
    from fxkit.distributed.launch import command, job_results

    n = args.stages * args.replicas
    forwarded = [f"--{k}={v}" for k, v in vars(args).items() if k not in ("worker", "replicas")]
    job = subprocess.run(command(n, __file__, ["--worker", *forwarded]), capture_output=True, text=True, timeout=600)
    print(job.stdout, end="")
    results = job_results(job.stdout)
    if job.returncode != 0 or not results:
        raise SystemExit(f"the {n}-rank job failed:\n{job.stderr[-3000:]}")
    result = results[-1]
    print(f"{args.stages} stages x {args.replicas} replicas on {n} ranks: test accuracy {result['accuracy']:.2%}, "
          f"{result['step_ms']:.1f} ms a step")


if __name__ == "__main__":
    sys.exit(main())
