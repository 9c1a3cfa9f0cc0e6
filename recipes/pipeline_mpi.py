"""Pipeline a zoo model over MPI processes: one stage per rank, activations sent with mpi4py.

    mpiexec -n 3 python recipes/pipeline_mpi.py --model resnet18 --batch 8 --chunks 4

Every rank builds the same model (same seed), splits it into one stage per
rank balanced by FLOPs and runs its own stage; rank 0 prints the stage table
and the last rank prints the output's agreement with the unsplit model in one
process. ``--out file.npz`` saves the output there (the last rank writes it).

Fault injection shows that failures end the job instead of hanging it:
``--fail-rank 1 --fail-at 2 --fail-mode kill`` kills rank 1 at its third
micro-batch (``hang`` makes it sleep instead, ``raise`` makes its stage raise).

Run with plain ``python`` (one process) it is a one-stage pipeline; without
mpi4py it runs the same stages in this process with the threaded `Pipeline`.
"""
import argparse
import os
import signal
import time

import numpy as np

import fxkit
import fxkit.models
from fxkit.backends.pipeline import Pipeline
from fxkit.errors import PipelineError
from fxkit.transforms.split_pipeline import split_pipeline


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="mlp", choices=fxkit.models.names())
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--chunks", type=int, default=4, help="micro-batches per batch")
    parser.add_argument("--stages", type=int, default=None, help="stages (default: one per rank)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a peer")
    parser.add_argument("--out", default=None, help="save the output to this .npz file")
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-at", type=int, default=0, help="micro-batch at which the fault happens")
    parser.add_argument("--fail-mode", choices=("kill", "hang", "raise"), default="kill")
    return parser.parse_args()


def build(args):
    """The zoo model (seeded, eval mode) and its example inputs at ``--batch``."""
    fxkit.manual_seed(0)
    model, shapes = fxkit.models.get(args.model)
    rng = np.random.default_rng(0)
    inputs = [fxkit.from_numpy(rng.standard_normal((args.batch, *s[1:])).astype(np.float32)) for s in shapes]
    return model, inputs


def inject_fault(pipe, rank, args):
    """Make this rank fail at micro-batch ``--fail-at`` (a demonstration of failure handling)."""
    run_stage = pipe.chain.run_stage
    seen = [0]

    def faulty(index, values):
        if seen[0] == args.fail_at:
            print(f"rank {rank}: injected fault ({args.fail_mode}) at micro-batch {seen[0]}", flush=True)
            if args.fail_mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif args.fail_mode == "hang":
                time.sleep(3600)
            else:
                raise RuntimeError("injected fault")
        seen[0] += 1
        return run_stage(index, values)

    pipe.chain.run_stage = faulty


def report(model, inputs, out, chunks, seconds):
    """Compare with the unsplit model: exactly per micro-batch, within 1e-6 of the whole batch."""
    from fxkit.backends.microbatch import join_batches, split_batch

    whole = model(*inputs)
    per_chunk = join_batches([model(*b) for b in split_batch(list(inputs), chunks)])
    outs, wholes, chunked = (v if isinstance(v, tuple) else (v,) for v in (out, whole, per_chunk))
    exact = all(np.array_equal(o.numpy(), c.numpy()) for o, c in zip(outs, chunked))
    rel = max(float(np.abs(o.numpy() - w.numpy()).max() / np.abs(w.numpy()).max()) for o, w in zip(outs, wholes))
    print(f"output {[tuple(o.shape) for o in outs]} in {seconds * 1e3:.1f} ms")
    print(f"equals the unsplit model on the same {chunks} micro-batches exactly: {exact}")
    print(f"largest difference from the unsplit model on the whole batch, relative to its largest output: "
          f"{rel:.2e} (BLAS blocks a {len(wholes[0])}-row matmul differently from smaller ones)")
    return exact and rel <= 1e-6


def main():
    args = parse_args()
    model, inputs = build(args)
    try:
        from mpi4py import MPI
    except ImportError:
        MPI = None
    if MPI is None:
        print("mpi4py is not installed (pip install fxkit[mpi]); running the stages in this process instead")
        parent = split_pipeline(model, inputs, n_stages=args.stages or 2)
        start = time.perf_counter()
        out = Pipeline(parent, chunks=args.chunks)(*inputs)
        if not report(model, inputs, out, args.chunks, time.perf_counter() - start):
            raise PipelineError("the pipeline's output differs from the unsplit model's")
        return
    from fxkit.backends.mpi_pipeline import MPIPipeline, abort_on_error

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    with abort_on_error(comm):
        parent = split_pipeline(model, inputs, n_stages=args.stages or size, verbose=rank == 0)
        pipe = MPIPipeline(parent, chunks=args.chunks, timeout=args.timeout, comm=comm)
        if args.fail_rank == rank:
            inject_fault(pipe, rank, args)
        out = pipe(*inputs)
        if rank == size - 1:
            print(f"{size} ranks, {args.chunks} micro-batches; rank {rank} computed for "
                  f"{pipe.busy_seconds * 1e3:.1f} ms of {pipe.wall_seconds * 1e3:.1f} ms")
            if args.out:
                outs = out if isinstance(out, tuple) else (out,)
                np.savez(args.out, *[o.numpy() for o in outs])
            if not report(model, inputs, out, args.chunks, pipe.wall_seconds):
                raise PipelineError("the pipeline's output differs from the unsplit model's")


if __name__ == "__main__":
    main()
