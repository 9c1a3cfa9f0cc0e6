"""DistributedSampler: disjoint shares covering the dataset, padded or cut as PyTorch's, reshuffled per
epoch; and DataLoader(sampler=...)."""
import numpy as np
import pytest

import fxkit
from fxkit.distributed import DistributedSampler
from fxkit.utils.data import DataLoader, TensorDataset


@pytest.mark.parametrize("n,replicas", [(10, 3), (12, 4), (2, 3), (7, 1)])
def test_shares_are_equal_sized_and_cover_the_dataset_with_padding(n, replicas):
    data = list(range(n))
    shares = [list(DistributedSampler(data, replicas, r, shuffle=True, seed=5)) for r in range(replicas)]
    size = -(-n // replicas)
    assert all(len(s) == size for s in shares)
    everything = [i for s in shares for i in s]
    assert sorted(set(everything)) == data
    assert len(everything) - n == size * replicas - n  # the padding repeats the start of the permutation


@pytest.mark.parametrize("n,replicas", [(10, 3), (12, 4), (2, 3)])
def test_drop_last_cuts_to_a_multiple_of_the_replicas(n, replicas):
    shares = [list(DistributedSampler(list(range(n)), replicas, r, drop_last=True)) for r in range(replicas)]
    flat = [i for s in shares for i in s]
    assert len(flat) == len(set(flat)) == (n // replicas) * replicas
    assert all(len(s) == n // replicas for s in shares)


def test_set_epoch_reshuffles_the_same_way_on_every_rank():
    data = list(range(20))
    a, b = DistributedSampler(data, 2, 0), DistributedSampler(data, 2, 1)
    first = list(a) + list(b)
    a.set_epoch(1)
    b.set_epoch(1)
    second = list(a) + list(b)
    assert sorted(first) == sorted(second) == data and first != second
    assert list(DistributedSampler(data, 2, 0, shuffle=False)) == list(range(0, 20, 2))


def test_a_data_loader_reads_the_samplers_share():
    x = fxkit.from_numpy(np.arange(10.0).reshape(10, 1))
    loader = DataLoader(TensorDataset(x), batch_size=2, sampler=DistributedSampler(range(10), 2, 1, shuffle=False))
    assert len(loader) == 3
    assert [b[0].numpy().ravel().tolist() for b in loader] == [[1.0, 3.0], [5.0, 7.0], [9.0]]
    with pytest.raises(ValueError, match="sampler and shuffle are mutually exclusive"):
        DataLoader(TensorDataset(x), sampler=range(10), shuffle=True)
