"""Pipeline figures of issue 8, in one run.

    python benchmarks/pipeline.py            # full run
    python benchmarks/pipeline.py --quick    # fewer repeats, no ResNet-50

Figures:
- MPI pipeline throughput vs micro-batches m in {1, 2, 4, 8} with k = 2..4 ranks on the cpu, and the
  measured bubble fraction (the share of rank-time not spent in a stage: 1 - sum(busy) / (k * wall))
  against GPipe's (k - 1) / (m + k - 1). Two workloads:
  * "sleep": k equal stages that each take 1 ms per sample (batch 32) without using the cpu (a stand-in
    for accelerators): it measures the schedule and the messaging, unaffected by how many cores there are;
  * "mlp": k equal Linear+ReLU stages (1024 wide, batch 256, one BLAS thread per rank) computing on the
    cpu; with more ranks than cores, ranks wait for a core as well as for each other.
- ResNet-50 at 224x224 in 4 stages: per-stage time (each stage on its own, one batch of 2) max / mean,
  for stages balanced by FLOPs and by measured time (wall and cpu time).

Each configuration runs under ``mpiexec -n k`` (started here); a rank reports its busy and wall
times per run and the best run (least wall time) counts.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import fxkit  # noqa: E402
from fxkit import nn  # noqa: E402
from fxkit.distributed.launch import job_results  # noqa: E402

SLEEP_PER_SAMPLE = 1e-3
BATCH = {"sleep": 32, "mlp": 256}
WIDTH = 1024


class SleepStage(nn.Module):
    """Takes ``SLEEP_PER_SAMPLE`` seconds per sample and leaves the cpu free meanwhile."""

    def forward(self, x):
        time.sleep(SLEEP_PER_SAMPLE * x.shape[0])
        return x


class DenseStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return self.fc(x).relu()


def stages_for(workload, k):
    fxkit.manual_seed(0)
    return [SleepStage() if workload == "sleep" else DenseStage() for _ in range(k)]


def worker(args):
    """Under mpiexec: run every m, report (wall, busy per rank) of the best run on rank 0."""
    from mpi4py import MPI

    from fxkit.backends.mpi_pipeline import MPIPipeline, abort_on_error

    comm = MPI.COMM_WORLD
    rank, k = comm.Get_rank(), comm.Get_size()
    x = fxkit.from_numpy(np.random.default_rng(0).standard_normal((BATCH[args.workload], WIDTH)).astype(np.float32))
    with abort_on_error(comm):
        for m in args.chunks:
            pipe = MPIPipeline(stages_for(args.workload, k), chunks=m, timeout=120)
            runs = []
            for _ in range(args.repeat + 1):  # the first run warms up
                comm.Barrier()
                pipe(x)
                runs.append((pipe.wall_seconds, pipe.busy_seconds))
            mine = np.array(runs[1:], dtype=np.float64)
            gathered = np.empty((k, *mine.shape)) if rank == 0 else None
            comm.Gather(mine, gathered, root=0)
            if rank == 0:
                walls = gathered[:, :, 0].max(axis=0)  # a run lasts until its last rank is done
                best = int(np.argmin(walls))
                busy = gathered[:, best, 1].tolist()
                print("RESULT " + json.dumps({"k": k, "m": m, "wall": float(walls[best]), "busy": busy}), flush=True)


def mpi_figures(args):
    from rich.console import Console
    from rich.table import Table

    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if mpiexec is None:
        print("mpiexec not found: install the MPI extra (pip install fxkit[mpi]) for the MPI figures")
        return
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    console = Console()
    for workload in ("sleep", "mlp"):
        table = Table("k", "m", "batch / s", "wall ms", "busy ms per rank", "bubble", "GPipe (k-1)/(m+k-1)",
                      title=f"MPI pipeline, workload {workload!r}, batch {BATCH[workload]}, {os.cpu_count()} cores")
        for k in (2, 3, 4):
            command = [mpiexec, "-n", str(k), sys.executable, os.path.abspath(__file__), "--worker",
                       "--workload", workload, "--repeat", str(args.repeat), "--chunks", "1", "2", "4", "8"]
            result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
            if result.returncode != 0:
                console.print(f"[red]k={k} failed:[/red]\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
                continue
            for r in job_results(result.stdout):
                bubble = 1 - sum(r["busy"]) / (r["k"] * r["wall"])
                formula = (r["k"] - 1) / (r["m"] + r["k"] - 1)
                table.add_row(str(r["k"]), str(r["m"]), f"{BATCH[workload] / r['wall']:.0f}", f"{r['wall'] * 1e3:.1f}",
                              " ".join(f"{b * 1e3:.0f}" for b in r["busy"]), f"{bubble:.3f}", f"{formula:.3f}")
        console.print(table)


def resnet_balance(args):
    """Per-stage times of ResNet-50 (224x224) in 4 stages, each stage timed on its own.

    Wall time (the fastest of the repeats) is what a pipeline waits for; the process's cpu time
    is reported beside it because it barely moves when other programs load the machine.
    """
    import fxkit.models
    from fxkit.transforms.split_pipeline import split_pipeline
    from fxkit.transforms.stage_chain import StageChain

    fxkit.manual_seed(0)
    model, _ = fxkit.models.get("resnet50")
    x = fxkit.randn(2, 3, 224, 224)
    for balance in ("flops", "time"):
        parent = split_pipeline(model, [x], n_stages=4, balance=balance, verbose=False, repeat=3)
        chain = StageChain(parent)
        wall, cpu = [float("inf")] * 4, [float("inf")] * 4
        with fxkit.no_grad():
            for _ in range(args.repeat):
                values = chain.first_inputs([x])
                for s in range(4):
                    start, start_cpu = time.perf_counter(), time.process_time()
                    values = chain.run_stage(s, values)
                    wall[s] = min(wall[s], time.perf_counter() - start)
                    cpu[s] = min(cpu[s], time.process_time() - start_cpu)
        flops = [s.flops for s in parent.stage_stats]
        print(f"ResNet-50 224x224 (batch 2), 4 stages balanced by {balance}: FLOPs max/mean "
              f"{max(flops) / np.mean(flops):.3f}; wall " + ", ".join(f"{t * 1e3:.0f}" for t in wall)
              + f" ms, max/mean {max(wall) / np.mean(wall):.3f}; cpu " + ", ".join(f"{t * 1e3:.0f}" for t in cpu)
              + f" ms, max/mean {max(cpu) / np.mean(cpu):.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workload", default="sleep", help=argparse.SUPPRESS)
    parser.add_argument("--chunks", type=int, nargs="*", default=[1, 2, 4, 8], help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args()
    if args.repeat is None:
        args.repeat = 2 if args.quick else 5
    if args.worker:
        worker(args)
        return
    mpi_figures(args)
    if not args.quick:
        resnet_balance(args)


if __name__ == "__main__":
    main()
