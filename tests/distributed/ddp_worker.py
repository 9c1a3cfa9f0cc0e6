"""Run under ``mpiexec -n K``: DistributedDataParallel for 20 steps equals one process on the global batch.

Every rank also trains the plain model on the whole global batch (the one-process
reference, in the same process, so the same BLAS) and compares. Modes:
``plain`` (``loss.backward()``), ``no_sync`` (two micro-batches a step, the first
under ``no_sync()``), ``unused`` (a parameter the forward never uses, with
``find_unused_parameters=True``), ``graph`` (gradients from a compiled
``fxkit.transforms.grad`` graph, averaged with ``average_gradients``).
``--fail-rank R --fail-mode hang|kill`` makes rank R hang or die inside the
backward of step 3.
"""
import argparse
import os
import signal
import time

import numpy as np

import fxkit
import fxkit.distributed as dist
import fxkit.nn.functional as F
from fxkit import nn
from fxkit.nn.parallel import DistributedDataParallel

GLOBAL_BATCH = 12


class Net(nn.Module):
    def __init__(self, with_unused=False):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(4 * 4 * 4, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 5)
        if with_unused:
            self.unused = nn.Linear(3, 3)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        x = x.view(x.shape[0], -1)
        x = F.tanh(self.fc1(x))
        x = F.relu(self.fc2(x)) + x
        return F.log_softmax(self.fc3(x), dim=1)


class WithLoss(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, y):
        return F.nll_loss(self.net(x), y)


def batch(step, dtype):
    rng = np.random.default_rng(step)
    x = rng.standard_normal((GLOBAL_BATCH, 1, 8, 8)).astype(dtype)
    y = rng.integers(0, 5, GLOBAL_BATCH)
    return fxkit.from_numpy(x), fxkit.from_numpy(y)


def build(dtype, with_unused=False):
    fxkit.manual_seed(0)
    net = Net(with_unused)
    return net.double() if dtype == np.float64 else net


def optimizer(params, dtype):
    if dtype == np.float64:
        return fxkit.optim.Adam(params, lr=0.01)
    return fxkit.optim.SGD(params, lr=0.1, momentum=0.9)


def inject(model, args, step, rank):
    if args.fail_rank != rank or step != 3:
        return

    def hook(grad):
        print(f"rank {rank}: injected fault ({args.fail_mode}) in backward of step {step}", flush=True)
        if args.fail_mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(3600)

    model.module.fc2.weight.register_hook(hook)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="plain", choices=("plain", "no_sync", "unused", "graph"))
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-mode", default="hang", choices=("hang", "kill"))
    parser.add_argument("--bucket-view", action="store_true",
                        help="gradient_as_bucket_view, gradients zeroed in place (they stay bucket views)")
    parser.add_argument("--thread", action="store_true",
                        help="bucket all-reduces on the collective thread (on by default only with a spare core)")
    args = parser.parse_args()
    dtype = np.dtype(args.dtype).type
    dist.init_process_group("mpi", timeout=args.timeout)
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, hi = rank * GLOBAL_BATCH // n, (rank + 1) * GLOBAL_BATCH // n

    # Rank 0's initial weights reach every rank: the other ranks start from other seeds.
    fxkit.manual_seed(100 + rank)
    unused = args.mode == "unused"
    local = Net(unused).double() if dtype == np.float64 else Net(unused)
    if rank == 0:
        local.load_state_dict(build(dtype, unused).state_dict())
    model = DistributedDataParallel(local, bucket_cap_mb=75 * np.dtype(dtype).itemsize / 2 ** 20,
                                    find_unused_parameters=args.mode == "unused",
                                    gradient_as_bucket_view=args.bucket_view)
    model.reducer.use_progress_thread = args.thread
    reference = build(dtype, unused)
    opt, ref_opt = optimizer(model.parameters(), dtype), optimizer(reference.parameters(), dtype)
    step_fn = None
    if args.mode == "graph":
        x, y = batch(0, dtype)
        step_fn = fxkit.compile(fxkit.transforms.grad(WithLoss(local), example_inputs=[x[lo:hi], y[lo:hi]]))
    for step in range(args.steps):
        x, y = batch(step, dtype)
        xs, ys = x[lo:hi], y[lo:hi]
        opt.zero_grad(set_to_none=not args.bucket_view)
        inject(model, args, step, rank)
        if args.mode == "no_sync":
            mid = (hi - lo) // 2
            with model.no_sync():
                (F.nll_loss(model(xs[:mid]), ys[:mid]) * (mid / (hi - lo))).backward()
            (F.nll_loss(model(xs[mid:]), ys[mid:]) * ((hi - lo - mid) / (hi - lo))).backward()
        elif args.mode == "graph":
            _, grads = step_fn(xs, ys)
            model.average_gradients(grads)
            for name, p in local.named_parameters():
                p.grad = grads.get("net." + name)
        else:
            F.nll_loss(model(xs), ys).backward()
        opt.step()
        ref_opt.zero_grad()
        F.nll_loss(reference(x), y).backward()
        ref_opt.step()
    worst = 0.0
    for (name, p), q in zip(local.named_parameters(), reference.parameters()):
        a, b = p.numpy(), q.numpy()
        worst = max(worst, float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)))
        everyone = [fxkit.zeros_like(p) for _ in range(n)]
        dist.all_gather(everyone, p)
        assert all(np.array_equal(e.numpy(), a) for e in everyone), f"{name} differs between ranks"
    limit = 1e-10 if dtype == np.float64 else 1e-6
    assert worst <= limit, f"{args.mode}: relative difference {worst:.3g} > {limit:g}"
    if args.mode == "unused":
        assert local.unused.weight.grad is None
    if args.bucket_view:
        reducer = model.reducer
        assert all(np.shares_memory(p.grad._data, reducer.buckets.view(i)) for i, p in enumerate(reducer.params))
    print(f"rank {rank}: {args.mode} {args.dtype} {args.steps} steps on {n} ranks, {model.reducer.bucket_count} "
          f"buckets, equals one process (relative difference {worst:.2g})", flush=True)
    if args.mode == "plain":
        check_unused_is_named(dtype)
    dist.barrier()


def check_unused_is_named(dtype):
    model = DistributedDataParallel(build(dtype, with_unused=True))
    x, y = batch(0, dtype)
    try:
        F.nll_loss(model(x), y).backward()
    except dist.DistributedError as exc:
        assert "parameters ['unused.weight', 'unused.bias'] got no gradient" in str(exc), str(exc)
        assert "pass find_unused_parameters=True" in str(exc)
    else:
        raise AssertionError("a parameter without a gradient went unnoticed")


if __name__ == "__main__":
    with dist.abort_on_error():
        main()
