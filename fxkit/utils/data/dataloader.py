"""`DataLoader`: batches from a map-style or iterable-style dataset, with
``torch.utils.data.DataLoader``'s arguments for batching, shuffling and collation.

Shuffling draws from fxkit's random generator, so ``fxkit.manual_seed`` makes
the order reproducible. ``num_workers > 0`` prepares batches ahead in threads
(not processes as in PyTorch): loading overlaps with the training step, and
several batches load at once where the dataset releases the GIL (file reads,
numpy decoding).
"""
import collections
import functools
import itertools
import numbers
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fxkit.runtime.ops.factories import generator
from fxkit.utils.data.collate import default_collate, default_convert
from fxkit.utils.data.dataset import IterableDataset

_END = object()  # what a batch job returns once a stream is exhausted
_PREFETCH_PER_WORKER = 2


class DataLoader:
    """Iterate over a dataset in batches.

    Args:
        dataset: a map-style dataset (``__getitem__`` and ``__len__``: a `Dataset`,
            a `TensorDataset`, even a list) or an `IterableDataset`.
        batch_size: samples per batch (a positive int), or None to yield samples
            one by one without a batch dimension.
        shuffle: draw a new random order every epoch (map-style datasets only).
        sampler: an iterable of dataset indices giving the order (and the subset)
            of an epoch, such as `fxkit.distributed.DistributedSampler`; excludes
            ``shuffle``.
        drop_last: drop the last batch when it has fewer than ``batch_size`` samples.
        collate_fn: merges a list of samples into a batch; `default_collate`
            (stacking) by default, `default_convert` when ``batch_size`` is None.
        num_workers: threads preparing batches ahead (0: load in the calling thread).

    Example:
        >>> loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
        >>> for batch, labels in loader:
        ...     loss = F.nll_loss(model(batch), labels)
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, collate_fn=None, num_workers=0,
                 sampler=None):
        if batch_size is not None and (not isinstance(batch_size, numbers.Integral) or isinstance(batch_size, bool)
                                       or batch_size <= 0):
            raise ValueError(f"DataLoader: batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size!r} (None turns batching off)")
        if batch_size is None and drop_last:
            raise ValueError("DataLoader: batch_size=None turns batching off, so drop_last=True has nothing to drop")
        if not isinstance(num_workers, numbers.Integral) or num_workers < 0:
            raise ValueError(f"DataLoader: num_workers should be a non-negative integer, got {num_workers!r}")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler and shuffle are mutually exclusive; the sampler decides the order "
                             "(DistributedSampler(dataset, shuffle=True) shuffles)")
        self._stream = isinstance(dataset, IterableDataset)
        if self._stream and sampler is not None:
            raise ValueError(f"DataLoader: {type(dataset).__name__} is an IterableDataset, which takes no sampler")
        self.sampler = sampler
        name = type(dataset).__name__
        if self._stream:
            if shuffle:
                raise ValueError(f"DataLoader: {name} is an IterableDataset, which cannot be shuffled; "
                                 f"shuffle inside its __iter__, or make it a map-style Dataset")
            if not hasattr(dataset, "__iter__"):
                raise TypeError(f"DataLoader: {name} is an IterableDataset but defines no __iter__")
        elif not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise TypeError(f"DataLoader: {name} is not a map-style dataset (needs __getitem__ and __len__); "
                            f"define them, or subclass IterableDataset and define __iter__ for a stream")
        self.dataset = dataset
        self.batch_size = None if batch_size is None else int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.num_workers = int(num_workers)
        if collate_fn is None:
            collate_fn = default_collate if batch_size is not None else default_convert
        self.collate_fn = collate_fn

    def __len__(self):
        """Batches per epoch (for a stream, from its ``__len__``, like PyTorch)."""
        if not hasattr(self.dataset, "__len__"):
            raise TypeError(f"DataLoader: {type(self.dataset).__name__} is a stream without __len__, so the "
                            f"number of batches is unknown until it ends")
        n = len(self.dataset) if self.sampler is None else len(self.sampler)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        if self._stream:
            # One reader: a stream yields its samples in order, from one iterator.
            jobs = itertools.repeat(functools.partial(self._read, iter(self.dataset)))
        else:
            jobs = (functools.partial(self._fetch, keys) for keys in self._keys())
        if self.num_workers == 0:
            return _run(jobs)
        return _run_ahead(jobs, 1 if self._stream else self.num_workers)

    def _keys(self):
        """Indices of each batch (a single index when batching is off), in epoch order."""
        if self.sampler is not None:
            order = list(self.sampler)
        else:
            n = len(self.dataset)
            order = generator(np).permutation(n).tolist() if self.shuffle else range(n)
        n = len(order)
        if self.batch_size is None:
            yield from order
            return
        size = self.batch_size
        stop = n - n % size if self.drop_last else n
        for start in range(0, stop, size):
            yield order[start:start + size]

    def _fetch(self, keys):
        if self.batch_size is None:
            return self.collate_fn(self.dataset[keys])
        return self.collate_fn([self.dataset[i] for i in keys])

    def _read(self, samples):
        if self.batch_size is None:
            sample = next(samples, _END)
            return sample if sample is _END else self.collate_fn(sample)
        chunk = list(itertools.islice(samples, self.batch_size))
        if not chunk or (self.drop_last and len(chunk) < self.batch_size):
            return _END
        return self.collate_fn(chunk)


def _run(jobs):
    for job in jobs:
        batch = job()
        if batch is _END:
            return
        yield batch


def _run_ahead(jobs, workers):
    """Run ``jobs`` on ``workers`` threads, a few ahead, yielding results in order."""
    depth = workers * _PREFETCH_PER_WORKER
    with ThreadPoolExecutor(workers, thread_name_prefix="fxkit-data") as pool:
        pending = collections.deque()
        try:
            for job in jobs:
                pending.append(pool.submit(job))
                if len(pending) < depth:
                    continue
                batch = pending.popleft().result()
                if batch is _END:
                    return
                yield batch
            while pending:
                batch = pending.popleft().result()
                if batch is _END:
                    return
                yield batch
        finally:
            for future in pending:
                future.cancel()
