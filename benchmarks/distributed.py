"""Data-parallel figures of issue 17, in one run (each part under its own ``fxkit launch``).

    python benchmarks/distributed.py            # full run
    python benchmarks/distributed.py --quick    # fewer repeats and sizes

Figures:
- all_reduce bandwidth on 2 ranks, fxkit's ``all_reduce`` of a float32 tensor (a non-blocking
  ``Iallreduce`` polled with a deadline) against a bare mpi4py ``Allreduce`` of the same buffer, both in
  place and SUM, both warmed: bus bandwidth (2 (n-1)/n x bytes / time, NCCL's convention) and the ratio,
  per size; the median over interleaved rounds of back-to-back calls (`median_per_call`).
- overlap on 2 ranks (median over interleaved rounds): an MLP of 8 Linear(1024, 1024) layers (32 MB of
  float32 gradients) in buckets of 4 MB (>= 4 buckets). Measured per step: T_bwd, backward alone; T_ar,
  averaging every gradient after backward (``average_gradients``: each 4 MB weight reduced where it lies,
  the biases in one bucket); T_ddp, DistributedDataParallel's backward, whose all-reduces start during
  backward. Hidden share = (T_bwd + T_ar - T_ddp) / T_ar. With the collective thread (each bucket one
  blocking MPI_Allreduce on a thread of its own, GIL released) and without it (MPI moves on only between
  autograd nodes, in DDP's hooks and in its waits; DDP's choice when there are no more cores than ranks
  on the machine). Beside it, the share done by the end of backward: 1 - (DDP's wait after the last
  node, ``reducer.exposed_seconds``) / T_ar, blind to a backward the all-reduces slowed down.
  The all-reduce's own cpu work (MPI copying and summing through shared memory on the ranks' cores,
  measured with its tests spaced by sleeps, and the division pass) cannot hide while backward keeps every
  core busy, nor can waiting for a rank whose backward ends later (backward + barrier, less backward):
  the benchmark prints that bound beside the hidden share. Each variant is compared with its
  own kind of backward (gradients dropped, or zeroed in place as bucket views need).
  Again with each layer's backward also waiting 20 ms off the cpu (``time.sleep``, a stand-in for an
  accelerator computing while the host is free, as the pipeline benchmark's "sleep" stages): on a
  machine whose cores are all busy computing, there is no idle cpu for the reduction to hide in.
- step time of the digits Net (forward, backward, SGD) at a global batch of 64 on 1, 2 and 4 ranks.
  Every rank uses one BLAS thread; with more ranks than cores they share cores (oversubscription).
"""
import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import fxkit  # noqa: E402
import fxkit.distributed as dist  # noqa: E402
import fxkit.nn.functional as F  # noqa: E402
from fxkit import nn  # noqa: E402

WIDTH, LAYERS, BATCH = 1024, 8, 64


def median_per_call(fns, rounds, calls):
    """``{name: median seconds per call}`` over ``rounds`` rounds; in each, every function runs ``calls``
    times back to back, started together on every rank (a barrier), in an order that turns round each round
    (neither is always the first after the barrier). The median, not the best: the best of many single
    calls rewards whichever function had the luckiest sample on a shared machine."""
    per_call = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        for name in (names if r % 2 else names[::-1]):
            fn = fns[name]
            dist.barrier()
            tick = time.perf_counter()
            for _ in range(calls):
                fn()
            per_call[name].append((time.perf_counter() - tick) / calls)
    return {name: float(np.median(t)) for name, t in per_call.items()}


def bandwidth(args):
    """fxkit's ``all_reduce`` against mpi4py's ``Allreduce`` on the same buffer, both in place, both SUM."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD.Dup()
    n = dist.get_world_size()
    sizes = [2 ** 10, 2 ** 16, 2 ** 20, 2 ** 22] if args.quick else [2 ** 10, 2 ** 14, 2 ** 18, 2 ** 20, 2 ** 22,
                                                                       2 ** 24]
    rows = []
    for size in sizes:
        t = fxkit.zeros(size)  # NOTE: zeros stay zeros: no value grows into infinities over the repeats
        raw = t.numpy()
        fns = {"ours": lambda: dist.all_reduce(t), "bare": lambda: comm.Allreduce(MPI.IN_PLACE, raw, MPI.SUM)}
        calls = max(1, 2 ** 16 // size)  # about 0.3 ms a sample for small sizes
        for fn in fns.values():
            for _ in range(calls + 2):  # warm-up
                fn()
        times = median_per_call(fns, 11 if args.quick else 41, calls)
        ours, bare = times["ours"], times["bare"]
        bus = 2 * (n - 1) / n * size * 4
        rows.append({"bytes": size * 4, "fxkit_GBps": bus / ours / 1e9, "mpi4py_GBps": bus / bare / 1e9,
                     "ratio": bare / ours, "fxkit_us": 1e6 * ours, "mpi4py_us": 1e6 * bare})
    return rows


class MLP(nn.Module):
    """``LAYERS`` Linear+ReLU layers; with ``device_seconds`` each layer's backward also waits that long
    without using the cpu (a stand-in for an accelerator computing while the host is free)."""

    def __init__(self, device_seconds=0.0):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
        self.device_seconds = device_seconds

    def forward(self, x):
        for layer in self.layers:
            x = layer(x).relu()
            if self.device_seconds and x.requires_grad:
                x.register_hook(lambda g: time.sleep(self.device_seconds))
        return x


def overlap(args):
    def replica():
        fxkit.manual_seed(0)
        return MLP(args.device_ms / 1e3)

    # NOTE: every variant has a model of its own: gradients left as views of one wrapper's buckets would be
    # copied into another's at each step.
    model, kept = replica(), replica()
    wrappers = {}
    for name, views, thread in (("ddp", False, True), ("hooks", False, False), ("views", True, False),
                                ("views_thread", True, True)):
        wrappers[name] = dist.DistributedDataParallel(replica(), bucket_cap_mb=4, gradient_as_bucket_view=views)
        wrappers[name].reducer.use_progress_thread = thread
    x = fxkit.randn(BATCH, WIDTH)
    repeats = 5 if args.quick else 21

    def backward_alone(net=model, set_to_none=True):
        net.zero_grad(set_to_none=set_to_none)
        y = net(x)
        (y * y).mean().backward()

    def after():
        backward_alone()
        dist.average_gradients([p.grad for p in model.parameters()], cap_bytes=4 * 2 ** 20)

    exposed = {name: [] for name in wrappers}

    def ddp_step(name):
        wrapper = wrappers[name]
        # NOTE: with bucket views the gradients are zeroed in place, so they stay views: no copies
        set_to_none = not wrapper.reducer.as_view

        def step():
            wrapper.module.zero_grad(set_to_none=set_to_none)
            y = wrapper(x)
            (y * y).mean().backward()
            exposed[name].append(wrapper.reducer.exposed_seconds)

        return step

    def forward_only():
        with fxkit.no_grad():
            model(x)

    def backward_then_barrier():
        backward_alone()
        dist.barrier()

    variants = {"fwd": forward_only, "bwd": backward_alone, "bwd_kept": lambda: backward_alone(kept, False),
                "bwd_barrier": backward_then_barrier, "after": after, **{name: ddp_step(name) for name in wrappers}}
    for fn in variants.values():
        fn()  # warm-up
    times = median_per_call(variants, repeats, 1)
    ms = {name: 1e3 * (t - times["fwd"]) for name, t in times.items()}
    exposed_ms = {name: 1e3 * float(np.median(e[-repeats:])) for name, e in exposed.items()}
    t_ar = ms["after"] - ms["bwd"]
    grads = [p.grad for p in model.parameters()]
    mpi_cpu = 1e3 * mpi_cpu_seconds(grads, repeats)
    scale_cpu = 1e3 * scale_cpu_seconds(grads, repeats)
    # NOTE: waiting for a peer whose backward ends later is in T_ar, yet no overlap can hide it: the last
    # bucket cannot be reduced before every rank has computed it.
    skew = max(ms["bwd_barrier"] - ms["bwd"], 0.0)
    unavoidable = mpi_cpu + scale_cpu + skew

    def hidden(name, baseline):
        """The share of the all-reduce time the variant hid: against its own kind of backward (gradients
        dropped, or zeroed in place as bucket views need) followed by the all-reduce."""
        return (ms[baseline] + t_ar - ms[name]) / t_ar if t_ar > 0 else float("nan")

    def hidden_at_end(name):
        """The share of the all-reduce time that backward did not wait for after its last node (blind to a
        backward the all-reduces slowed down, which `hidden` counts)."""
        return 1 - exposed_ms[name] / t_ar if t_ar > 0 else float("nan")

    return {"buckets": wrappers["ddp"].reducer.bucket_count, "backward_ms": ms["bwd"],
            "backward_kept_ms": ms["bwd_kept"], "allreduce_ms": t_ar, "after_ms": ms["after"],
            "mpi_cpu_ms": mpi_cpu, "scale_cpu_ms": scale_cpu, "skew_ms": skew,
            "hideable_on_busy_cores": (t_ar - unavoidable) / t_ar if t_ar > 0 else float("nan"),
            "ddp_ms": ms["ddp"], "hidden": hidden("ddp", "bwd"), "hooks_ms": ms["hooks"],
            "hidden_hooks": hidden("hooks", "bwd"), "views_ms": ms["views"],
            "hidden_views": hidden("views", "bwd_kept"),
            "views_thread_ms": ms["views_thread"], "hidden_views_thread": hidden("views_thread", "bwd_kept"),
            **{f"exposed_{name}_ms": e for name, e in exposed_ms.items()},
            **{f"hidden_at_end_{name}": hidden_at_end(name) for name in wrappers}}


def scale_cpu_seconds(grads, repeats):
    """CPU time of one pass dividing ``grads`` by the world size, which the average needs whether the
    all-reduce runs after backward (ReduceOp.AVG) or in it (DDP's scaled copy into the buckets)."""
    arrays = [g.numpy().copy() for g in grads]
    spent = []
    for _ in range(repeats):
        tick = time.thread_time()
        for a in arrays:
            np.multiply(a, 0.5, out=a)
        spent.append(time.thread_time() - tick)
    return float(np.median(spent))


def mpi_cpu_seconds(grads, repeats):
    """CPU time this rank spends inside MPI all-reducing ``grads`` as ``average_gradients`` lays them out.

    The all-reduces are tested between sleeps, so neither rank ever waits on
    the other inside MPI: what is left is the copying and summing MPI does on
    this rank's own core (shared-memory MPI moves data with the ranks' cpus).
    That work cannot hide behind a backward that keeps every core busy; only
    the rest of the all-reduce time (waiting on the peer, handshakes) can.
    Median of ``repeats``, in thread cpu time (time other processes take on
    a loaded machine is not counted).
    """
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    cap = 4 * 2 ** 20
    big = [g.numpy().copy() for g in grads if g.numpy().nbytes >= cap]
    small = np.concatenate([g.numpy().ravel() for g in grads if g.numpy().nbytes < cap])
    arrays = big + [small]
    spent = []
    for _ in range(repeats):
        dist.barrier()
        tick = time.thread_time()
        requests = [comm.Iallreduce(MPI.IN_PLACE, a, MPI.SUM) for a in arrays]
        inside = time.thread_time() - tick
        for request in requests:
            while True:
                tick = time.thread_time()
                done = request.Test()
                inside += time.thread_time() - tick
                if done:
                    break
                time.sleep(2e-4)
        spent.append(inside)
    return float(np.median(spent))


def steps(args):
    import fxkit.models

    n = dist.get_world_size()
    fxkit.manual_seed(0)
    model = dist.DistributedDataParallel(fxkit.models.DigitsNet())
    opt = fxkit.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = fxkit.randn(BATCH // n, 1, 8, 8), fxkit.from_numpy(np.random.default_rng(0).integers(0, 10, BATCH // n))

    def step():
        opt.zero_grad()
        F.nll_loss(model(x), y).backward()
        opt.step()

    step()
    count = 10 if args.quick else 40
    return {"ranks": n, "step_ms": 1e3 * median_per_call({"step": step}, count, 1)["step"]}


def worker(args):
    dist.init_process_group("mpi", timeout=300)
    result = {"bandwidth": bandwidth, "overlap": overlap, "steps": steps}[args.worker](args)
    if dist.get_rank() == 0:
        print("RESULT " + json.dumps(result), flush=True)


def run(n, part, quick, *more):
    from fxkit.distributed.launch import command, job_results

    extra = ["--worker", part, *more] + (["--quick"] if quick else [])
    job = subprocess.run(command(n, __file__, extra), capture_output=True, text=True, timeout=900)
    results = job_results(job.stdout)
    if job.returncode != 0 or not results:
        raise SystemExit(f"{part} on {n} ranks failed:\n{job.stdout[-2000:]}\n{job.stderr[-3000:]}")
    return results[-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", choices=("bandwidth", "overlap", "steps"))
    parser.add_argument("--device-ms", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        with dist.abort_on_error():
            worker(args)
        return
    cores = os.cpu_count()
    print(f"{cores} cores, one BLAS thread per rank\n")
    print("all_reduce bandwidth, 2 ranks (bus GB/s; ratio = fxkit / bare mpi4py Allreduce)")
    print(f"{'bytes':>12} {'fxkit':>9} {'mpi4py':>9} {'ratio':>7}")
    for row in run(2, "bandwidth", args.quick):
        print(f"{row['bytes']:>12,} {row['fxkit_GBps']:>9.2f} {row['mpi4py_GBps']:>9.2f} {row['ratio']:>7.1%}")
    for device_ms in (0, 20):
        o = run(2, "overlap", args.quick, "--device-ms", str(device_ms))
        what = " + a 20 ms off-cpu wait per layer in backward (an accelerator stand-in)" if device_ms else ""
        print(f"\noverlap, 2 ranks, MLP {LAYERS} x Linear({WIDTH}, {WIDTH}){what}, batch {BATCH}, "
              f"{o['buckets']} buckets of 4 MB")
        print(f"  backward alone {o['backward_ms']:.1f} ms; all-reduce after backward {o['allreduce_ms']:.1f} ms "
              f"(backward + all-reduce {o['after_ms']:.1f} ms)")
        if not device_ms:
            print(f"  of which MPI's own copying and summing on this rank's core {o['mpi_cpu_ms']:.1f} ms, the "
                  f"division by the world size {o['scale_cpu_ms']:.1f} ms and waiting for the slower rank's backward "
                  f"{o['skew_ms']:.1f} ms: at most {o['hideable_on_busy_cores']:.0%} of the all-reduce can hide while "
                  f"backward keeps every core busy")
        for name, label in (("hooks", "DDP backward, MPI moved on between autograd nodes, in hooks and waits"),
                            ("ddp", "the same with the collective thread (blocking all-reduces, GIL released)"),
                            ("views", "gradient_as_bucket_view=True, gradients zeroed in place"),
                            ("views_thread", "gradient_as_bucket_view=True with the collective thread")):
            key = {"ddp": "hidden"}.get(name, f"hidden_{name}")
            print(f"  {label}: {o[name + '_ms']:.1f} ms, {o[key]:.0%} of the all-reduce hidden; waited "
                  f"{o['exposed_' + name + '_ms']:.1f} ms after the last node ({o['hidden_at_end_' + name]:.0%} "
                  f"of it done when backward's last node ended)")
        print(f"  (bucket-view variants against a backward zeroing gradients in place, {o['backward_kept_ms']:.1f} ms)")
    print(f"\ndigits Net step time, global batch {BATCH}")
    base = None
    for n in (1, 2, 4):
        s = run(n, "steps", args.quick)
        base = base or s["step_ms"]
        note = f"  ({n} ranks on {cores} cores: oversubscribed)" if n > cores else ""
        print(f"  {n} rank{'s' if n > 1 else ' '}: {s['step_ms']:6.2f} ms/step, speed-up "
              f"{base / s['step_ms']:.2f}x{note}")


if __name__ == "__main__":
    main()
