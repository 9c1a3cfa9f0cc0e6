"""Train the digits Net with DistributedDataParallel on 1, 2 and 4 ranks; accuracy and step time per rank count.

    python recipes/train_ddp.py                          # launches itself on 1, 2 and 4 ranks, prints a table
    fxkit launch -n 2 recipes/train_ddp.py --worker      # one job (add --checkpoint ckpt.npz [--resume])

Every job trains on the same global batch of 64 images a step (scikit-learn's
``load_digits``, first three quarters): each rank reads its share through a
`DistributedSampler` (64 / ranks images) and `DistributedDataParallel`
averages the gradients, so the runs follow one trajectory whatever the rank
count. Rank 0 prints the held-out accuracy and the time per step; all ranks
check that their parameters are equal. With ``--checkpoint`` rank 0 saves the
model and optimizer each epoch, and ``--resume`` restores them on every rank;
the default run shows that too (2 ranks, one more epoch from the checkpoint).
On a machine with fewer cores than ranks, the ranks share cores
(oversubscription) and the step time grows instead of shrinking.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# NOTE: before numpy loads: one BLAS thread per rank (the ranks are the parallelism).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import fxkit  # noqa: E402
import fxkit.distributed as dist  # noqa: E402
import fxkit.models  # noqa: E402
from fxkit.nn import functional as F  # noqa: E402
from fxkit.nn.parallel import DistributedDataParallel  # noqa: E402
from fxkit.utils.data import DataLoader, TensorDataset  # noqa: E402

GLOBAL_BATCH = 64


def digits():
    data = load_digits()
    images = (data.images / 16.0).astype(np.float32)[:, None, :, :]
    labels = data.target.astype(np.int64)
    cut = len(labels) - len(labels) // 4
    return (TensorDataset(fxkit.from_numpy(images[:cut]), fxkit.from_numpy(labels[:cut])),
            TensorDataset(fxkit.from_numpy(images[cut:]), fxkit.from_numpy(labels[cut:])))


def worker(args):
    dist.init_process_group("mpi", timeout=120)
    rank, n = dist.get_rank(), dist.get_world_size()
    if GLOBAL_BATCH % n:
        raise SystemExit(f"the global batch of {GLOBAL_BATCH} does not split over {n} ranks")
    fxkit.manual_seed(args.seed + rank)  # dropout differs per rank; the weights come from rank 0
    train_set, test_set = digits()
    sampler = dist.DistributedSampler(train_set, shuffle=True, seed=args.seed, drop_last=True)
    loader = DataLoader(train_set, batch_size=GLOBAL_BATCH // n, sampler=sampler, drop_last=True)
    model = DistributedDataParallel(fxkit.models.DigitsNet())
    optimizer = fxkit.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    start_epoch = 0
    if args.resume:
        start_epoch = dist.load_checkpoint(args.checkpoint, model.module, optimizer)["epoch"] + 1
    step_seconds = []
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for images, labels in loader:
            tick = time.perf_counter()
            optimizer.zero_grad()
            F.nll_loss(model(images), labels).backward()
            optimizer.step()
            step_seconds.append(time.perf_counter() - tick)
        if args.checkpoint:
            dist.save_checkpoint(args.checkpoint, model.module, optimizer, epoch=epoch)
    flat = np.concatenate([p.numpy().ravel() for p in model.parameters()])
    everyone = [fxkit.zeros_like(fxkit.from_numpy(flat)) for _ in range(n)]
    dist.all_gather(everyone, fxkit.from_numpy(flat))
    agree = all(np.array_equal(e.numpy(), flat) for e in everyone)
    if rank == 0:
        model.eval()
        with fxkit.no_grad():
            x, y = test_set.tensors
            correct = float((model(x).argmax(dim=1) == y).float().mean())
        steps = np.array(step_seconds[len(step_seconds) // 4:] or [float("nan")])  # after the warm-up
        print("RESULT " + json.dumps({"ranks": n, "accuracy": correct, "step_ms": 1e3 * float(np.median(steps)),
                                      "steps": len(step_seconds), "start_epoch": start_epoch, "agree": agree,
                                      "buckets": model.reducer.bucket_count}), flush=True)
    if not agree:
        raise SystemExit(f"rank {rank}: the replicas' parameters differ")


def run_job(n, extra):
    from fxkit.distributed.launch import command, job_results

    out = subprocess.run(command(n, __file__, ["--worker", *extra]), capture_output=True, text=True, timeout=600)
    results = job_results(out.stdout)
    if out.returncode != 0 or not results:
        raise SystemExit(f"the {n}-rank job failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return results[-1]


def driver(args):
    console = Console()
    if not dist.is_available():
        console.print("mpi4py is not installed: `pip install fxkit[mpi]` to train on several ranks")
        return
    cores = os.cpu_count()
    table = Table(title=f"DigitsNet, {args.epochs} epochs, global batch {GLOBAL_BATCH}, {cores} cores")
    for column in ("ranks", "batch/rank", "accuracy", "step ms", "speed-up", "equal"):
        table.add_column(column, justify="right")
    with tempfile.TemporaryDirectory(prefix="fxkit-ddp-") as folder:
        checkpoint = os.path.join(folder, "digits.npz")
        _train_and_resume(console, table, args, cores, checkpoint)


def _train_and_resume(console, table, args, cores, checkpoint):
    """Train on each rank count (the 2-rank job saves ``checkpoint``), print the table, then resume from it."""
    base = None
    for n in args.ranks:
        extra = ["--epochs", str(args.epochs), "--lr", str(args.lr), "--seed", str(args.seed)]
        result = run_job(n, extra + (["--checkpoint", checkpoint] if n == 2 else []))
        base = base or result["step_ms"]
        note = "*" if n > cores else ""
        table.add_row(str(n), str(GLOBAL_BATCH // n), f"{result['accuracy']:.2%}", f"{result['step_ms']:.1f}",
                      f"{base / result['step_ms']:.2f}x{note}", str(result["agree"]))
    console.print(table)
    if max(args.ranks) > cores:
        console.print(f"* more ranks than the {cores} cores: the ranks take turns on the cores (oversubscription), "
                      f"so each step waits for descheduled ranks in every all-reduce")
    if 2 in args.ranks:
        more = ["--epochs", str(args.epochs + 1), "--lr", str(args.lr), "--seed", str(args.seed)]
        resumed = run_job(2, more + ["--checkpoint", checkpoint, "--resume"])
        console.print(f"resumed from rank 0's checkpoint at epoch {resumed['start_epoch']} on both ranks, trained "
                      f"{resumed['steps']} more steps: test accuracy {resumed['accuracy']:.2%}, replicas equal: "
                      f"{resumed['agree']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help="run as one rank of a job (under fxkit launch)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", default=None, help="save the model and optimizer here every epoch (rank 0)")
    parser.add_argument("--resume", action="store_true", help="start from --checkpoint on every rank")
    args = parser.parse_args()
    if args.worker:
        with dist.abort_on_error():
            worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    sys.exit(main())
