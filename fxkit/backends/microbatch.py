"""Micro-batches: split a batch along dimension 0, and join the results again.

Pipelines keep every stage busy by feeding it slices of the batch. A slice is
a view (no copy); tensors nested in tuples, lists and dicts are split alike,
and other values (flags, sizes) go unchanged to every micro-batch. Joining
concatenates each tensor of the results along dimension 0, so for ops that
treat samples independently (eval-mode models) the joined result is the
unsplit one.
"""
from fxkit.errors import ShapeError
from fxkit.runtime.ops.rearrange import cat
from fxkit.runtime.tensor import Tensor


def map_tensors(value, fn):
    """``value`` with ``fn`` applied to every Tensor inside tuples, lists and dicts."""
    if isinstance(value, Tensor):
        return fn(value)
    if isinstance(value, tuple):
        items = [map_tensors(v, fn) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [map_tensors(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: map_tensors(v, fn) for k, v in value.items()}
    return value


def flat_tensors(value):
    """Every Tensor inside ``value``, in order (depth first)."""
    found = []
    map_tensors(value, found.append)
    return found


def split_sizes(n, chunks):
    """``chunks`` sizes adding up to ``n`` that differ by at most one (larger first)."""
    return [n // chunks + (1 if i < n % chunks else 0) for i in range(chunks)]


def split_batch(values, chunks):
    """Split every tensor in ``values`` along dimension 0 into ``chunks`` micro-batches.

    Args:
        values: the batch (a list of inputs, any nesting of tensors and other values).
        chunks: the number of micro-batches.

    Returns:
        A list of ``chunks`` values shaped like ``values``.

    Raises:
        ShapeError: tensors disagree on the batch size, a tensor is 0-d, or the
            batch has fewer samples than ``chunks``.
    """
    tensors = flat_tensors(values)
    if not tensors:
        return [values] * chunks
    for t in tensors:
        if t.ndim == 0:
            raise ShapeError("micro-batches: an input is a 0-d tensor, which has no batch dimension to split; "
                             "pass it as a Python number or use chunks=1")
    sizes = {t.shape[0] for t in tensors}
    if len(sizes) > 1:
        raise ShapeError(f"micro-batches: the inputs' batch sizes (dimension 0) differ: {sorted(sizes)}; every "
                         f"tensor input is split along dimension 0, so they must agree (or use chunks=1)")
    n = sizes.pop()
    if n < chunks:
        raise ShapeError(f"micro-batches: a batch of {n} samples cannot be split into {chunks} micro-batches; "
                         f"use chunks <= {n}")
    batches, start = [], 0
    for size in split_sizes(n, chunks):
        stop = start + size
        batches.append(map_tensors(values, lambda t, a=start, b=stop: t[a:b]))
        start = stop
    return batches


def join_batches(results):
    """Concatenate micro-batch results (same structure each) along dimension 0.

    Raises:
        ShapeError: a result tensor is 0-d (a reduction over the batch cannot be
            rebuilt from micro-batches), or a non-tensor result differs between them.
    """
    first = results[0]
    if isinstance(first, Tensor):
        if first.ndim == 0:
            raise ShapeError("micro-batches: the model returns a 0-d tensor (a reduction over the batch?), which "
                             "cannot be joined from micro-batch results; return per-sample values or use chunks=1")
        return first if len(results) == 1 else cat(list(results), 0)
    if isinstance(first, tuple):
        items = [join_batches([r[i] for r in results]) for i in range(len(first))]
        return type(first)(*items) if hasattr(first, "_fields") else tuple(items)
    if isinstance(first, list):
        return [join_batches([r[i] for r in results]) for i in range(len(first))]
    if isinstance(first, dict):
        return {k: join_batches([r[k] for r in results]) for k in first}
    if any(r != first for r in results[1:]):
        raise ShapeError(f"micro-batches: the model returns a non-tensor value that differs between micro-batches "
                         f"({[r for r in results]}); it cannot be joined, use chunks=1")
    return first
