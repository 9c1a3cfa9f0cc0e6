"""`DistributedSampler`: each rank's share of a dataset's indices, reshuffled per epoch, as PyTorch's."""
import math

import numpy as np

from fxkit.distributed.process_group import default_group
from fxkit.errors import DistributedError


class DistributedSampler:
    """The indices of ``dataset`` that rank ``rank`` of ``num_replicas`` reads in an epoch.

    Every rank draws the same permutation (seeded by ``seed + epoch``) and takes
    every ``num_replicas``-th index from its rank on, so the ranks' shares are
    disjoint and together cover the dataset. When the length does not divide,
    the permutation is padded by repeating its start (every rank gets the same
    number of samples, so no rank waits on a missing batch), or with
    ``drop_last`` cut to a multiple of ``num_replicas``.

    Args:
        dataset: a map-style dataset (only its length is read).
        num_replicas, rank: default to the default process group's.
        shuffle: a new order every epoch; call `set_epoch` before each one.
        seed: the same on every rank.
        drop_last: drop the tail instead of padding.

    Example:
        >>> sampler = DistributedSampler(data, shuffle=True)
        >>> loader = fxkit.utils.data.DataLoader(data, batch_size=32, sampler=sampler)
        >>> for epoch in range(10):
        ...     sampler.set_epoch(epoch)
        ...     for x, y in loader: ...
    """

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        if num_replicas is None or rank is None:
            group = default_group()
            num_replicas = group.size() if num_replicas is None else num_replicas
            rank = group.rank() if rank is None else rank
        if not 0 <= rank < num_replicas:
            raise DistributedError(f"DistributedSampler: rank {rank} is not in [0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas, self.rank = num_replicas, rank
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.epoch = 0
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        order = np.random.default_rng(self.seed + self.epoch).permutation(n).tolist() if self.shuffle \
            else list(range(n))
        if self.drop_last:
            order = order[:self.total_size]
        elif order:
            missing = self.total_size - len(order)
            order += (order * math.ceil(missing / len(order)))[:missing]
        return iter(order[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """Use the order of ``epoch`` (the same on every rank) for the next iteration."""
        self.epoch = epoch
