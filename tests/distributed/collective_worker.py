"""Run under ``mpiexec -n K``: every collective, sync and async, against numpy on random shapes and dtypes.

Every rank can build every rank's input (the seed is the rank and the case),
so each checks its own result against numpy without any communication. Prints
``rank R: N cases agree with numpy`` at the end; a mismatch raises.
"""
import sys

import numpy as np

import fxkit
import fxkit.distributed as dist

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_, np.float16]
SHAPES = [(), (0,), (1,), (5,), (3, 4), (2, 0, 3), (2, 3, 4)]
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT]


def value(case, rank, shape, dtype):
    rng = np.random.default_rng([case, rank])
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 4, shape).astype(dtype)
    return rng.uniform(-2, 2, shape).astype(dtype)


def tensor(array, strided):
    """A Tensor of ``array``; with ``strided`` a non-contiguous view holding the same values."""
    if not strided or array.ndim == 0:
        return fxkit.from_numpy(array.copy())
    wide = np.zeros(array.shape[:-1] + (array.shape[-1] * 2,), array.dtype)
    wide[..., ::2] = array
    return fxkit.from_numpy(wide)[..., ::2]


def reduce_all(arrays, op):
    stack = np.stack(arrays)
    dtype = stack.dtype
    if dtype == np.bool_:
        return stack.any(0) if op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX) else stack.all(0)
    wide = stack.astype(np.float32) if dtype == np.float16 else stack
    out = {dist.ReduceOp.SUM: lambda s: s.sum(0), dist.ReduceOp.AVG: lambda s: s.sum(0) / len(arrays),
           dist.ReduceOp.MAX: lambda s: s.max(0), dist.ReduceOp.MIN: lambda s: s.min(0),
           dist.ReduceOp.PRODUCT: lambda s: s.prod(0)}[op](wide)
    return np.asarray(out).astype(dtype)


def check(got, want, what):
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.dtype}{got.shape} vs {want.dtype}{want.shape}"
    if want.dtype.kind == "f":
        tol = 2e-3 if want.dtype == np.float16 else 1e-6
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def finish(work, async_op):
    if async_op:
        assert work is not None
        work.wait()
        assert work.is_completed()
    else:
        assert work is None


def check_fast_path(rank, n):
    """The synchronous all_reduce remembers the last small array it found MPI can reduce as it lies: the same
    tensor reduced again, then arrays it must not take for it (another layout on odd ranks, 16-bit floats)."""
    starts = [np.arange(6, dtype=np.float32) + r for r in range(n)]
    t = fxkit.from_numpy(starts[rank].copy())
    for k in range(3):
        dist.all_reduce(t)
        check(t.numpy(), (sum(starts) * n ** k).astype(np.float32), f"all_reduce of the same tensor, call {k + 1}")
    grids = [np.arange(12, dtype=np.float64).reshape(3, 4) * (r + 1) for r in range(n)]
    mine = np.asfortranarray(grids[rank]) if rank % 2 else grids[rank].copy()
    t = fxkit.from_numpy(mine)
    dist.all_reduce(t)
    check(t.numpy(), sum(grids), "all_reduce of a Fortran-ordered tensor on odd ranks, C-ordered on even ones")
    halves = [np.full(4, r + 1, np.float16) for r in range(n)]
    t = fxkit.from_numpy(halves[rank].copy())
    dist.all_reduce(t)
    check(t.numpy(), reduce_all(halves, dist.ReduceOp.SUM), "all_reduce of float16 after a remembered array")


def main():
    dist.init_process_group("mpi", timeout=60)
    rank, n = dist.get_rank(), dist.get_world_size()
    picker = np.random.default_rng(123)  # the same choices on every rank
    cases = 0
    for case in range(40):
        dtype = DTYPES[case % len(DTYPES)]
        shape = SHAPES[picker.integers(len(SHAPES))]
        strided = bool(picker.integers(2)) and len(shape) > 0
        async_op = bool(case % 2)
        root = int(picker.integers(n))
        arrays = [value(case, r, shape, dtype) for r in range(n)]
        mine = arrays[rank]
        label = f"case {case} {np.dtype(dtype).name}{list(shape)} strided={strided} async={async_op}"
        for op in OPS:
            if op == dist.ReduceOp.AVG and np.dtype(dtype).kind != "f":
                continue
            t = tensor(mine, strided)
            finish(dist.all_reduce(t, op=op, async_op=async_op), async_op)
            check(t.numpy(), reduce_all(arrays, op), f"all_reduce {op} {label}")
        t = tensor(mine, strided)
        finish(dist.broadcast(t, src=root, async_op=async_op), async_op)
        check(t.numpy(), arrays[root], f"broadcast {label}")
        outs = [fxkit.from_numpy(np.zeros(shape, dtype)) for _ in range(n)]
        finish(dist.all_gather(outs, tensor(mine, strided), async_op=async_op), async_op)
        for r in range(n):
            check(outs[r].numpy(), arrays[r], f"all_gather[{r}] {label}")
        parts = [[value(case + 1000 * (r + 1), q, shape, dtype) for q in range(n)] for r in range(n)]
        op = OPS[case % len(OPS)]
        if not (op == dist.ReduceOp.AVG and np.dtype(dtype).kind != "f"):
            out = tensor(np.zeros(shape, dtype), strided)
            finish(dist.reduce_scatter(out, [tensor(a, strided) for a in parts[rank]], op=op, async_op=async_op),
                   async_op)
            check(out.numpy(), reduce_all([parts[r][rank] for r in range(n)], op), f"reduce_scatter {op} {label}")
        gathered = [fxkit.from_numpy(np.zeros(shape, dtype)) for _ in range(n)] if rank == root else None
        finish(dist.gather(tensor(mine, strided), gathered, dst=root, async_op=async_op), async_op)
        if rank == root:
            for r in range(n):
                check(gathered[r].numpy(), arrays[r], f"gather[{r}] {label}")
        out = tensor(np.zeros(shape, dtype), strided)
        pieces = [tensor(a, strided) for a in parts[root]] if rank == root else None
        finish(dist.scatter(out, pieces, src=root, async_op=async_op), async_op)
        check(out.numpy(), parts[root][rank], f"scatter {label}")
        cases += 1
    check_fast_path(rank, n)
    # A sub-group of the even ranks reduces among them only.
    evens = dist.new_group([r for r in range(n) if r % 2 == 0])
    t = fxkit.ones(2) * (rank + 1)
    result = dist.all_reduce(t, group=evens)
    if rank % 2:
        assert result is None and dist.get_rank(evens) == -1
        np.testing.assert_array_equal(t.numpy(), [rank + 1] * 2)
    else:
        np.testing.assert_array_equal(t.numpy(), [sum(r + 1 for r in range(n) if r % 2 == 0)] * 2)
        assert dist.get_world_size(evens) == (n + 1) // 2
    finish(dist.barrier(async_op=True), True)
    dist.destroy_process_group()
    print(f"rank {rank}: {cases} cases agree with numpy", flush=True)


if __name__ == "__main__":
    sys.exit(main())
