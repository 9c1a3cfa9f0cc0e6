"""Datasets, default_collate and DataLoader: batching, shuffling, drop_last, collation,
map-style and iterable-style datasets (the seed talk's ``MapStyleDataset`` and
``IterableStyleDataset``), worker threads, and the errors."""
import collections
import math

import numpy as np
import pytest

import fxkit
from fxkit.errors import ShapeError
from fxkit.utils.data import (DataLoader, Dataset, IterableDataset, TensorDataset, default_collate,
                              default_convert)


class MapStyleDataset(Dataset):
    """The seed talk's map-style dataset: keys are mapped from the loader's indices."""

    def __init__(self, rows):
        self.keys = [f"sample-{i}" for i in range(len(rows))]
        self.rows = dict(zip(self.keys, rows))

    def __getitem__(self, index):
        key = self.keys[index]
        return self.rows[key], index

    def __len__(self):
        return len(self.keys)


class IterableStyleDataset(IterableDataset):
    """The seed talk's iterable-style dataset: a stream of dict samples."""

    def __init__(self, n, width=3):
        self.n, self.width = n, width

    def __iter__(self):
        for i in range(self.n):
            yield {"x": np.full(self.width, i, dtype=np.float32), "y": i}


def _dataset(rng, n=10):
    x = rng.standard_normal((n, 3)).astype(np.float32)
    return x, TensorDataset(fxkit.from_numpy(x), fxkit.arange(n))


# -- TensorDataset -----------------------------------------------------------------------------
def test_tensor_dataset_indexes_every_tensor(rng):
    x, ds = _dataset(rng)
    assert len(ds) == 10
    xi, yi = ds[4]
    np.testing.assert_array_equal(xi.numpy(), x[4])
    assert yi.item() == 4


def test_tensor_dataset_errors():
    with pytest.raises(ShapeError, match=r"size mismatch between tensors: first dimensions \[3, 4\]"):
        TensorDataset(fxkit.ones(3, 2), fxkit.ones(4))
    with pytest.raises(TypeError, match="argument 1 is a ndarray, not an fxkit Tensor; wrap numpy arrays with "
                                        "fxkit.from_numpy"):
        TensorDataset(fxkit.ones(3), np.ones(3))
    with pytest.raises(ShapeError, match="argument 0 is a 0-d tensor"):
        TensorDataset(fxkit.tensor(1.0))


# -- batching ----------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size, drop_last, sizes", [(4, False, [4, 4, 2]), (4, True, [4, 4]), (5, True, [5, 5]),
                                                          (1, False, [1] * 10), (32, False, [10]), (32, True, [])])
def test_batches_in_order(rng, batch_size, drop_last, sizes):
    x, ds = _dataset(rng)
    loader = DataLoader(ds, batch_size=batch_size, drop_last=drop_last)
    batches = list(loader)
    assert len(loader) == len(sizes)
    assert [len(b[1]) for b in batches] == sizes
    start = 0
    for xb, yb in batches:
        n = len(yb)
        np.testing.assert_array_equal(xb.numpy(), x[start:start + n])
        np.testing.assert_array_equal(yb.numpy(), np.arange(start, start + n))
        assert xb.dtype is fxkit.float32 and yb.dtype is fxkit.int64
        start += n


def test_shuffle_is_a_permutation_reproducible_with_manual_seed(rng):
    x, ds = _dataset(rng, n=50)
    loader = DataLoader(ds, batch_size=8, shuffle=True)
    fxkit.manual_seed(123)
    first = np.concatenate([y.numpy() for _, y in loader])
    second = np.concatenate([y.numpy() for _, y in loader])
    assert sorted(first) == list(range(50)) and sorted(second) == list(range(50))
    assert not np.array_equal(first, second)  # a new order every epoch
    assert not np.array_equal(first, np.arange(50))
    fxkit.manual_seed(123)
    np.testing.assert_array_equal(np.concatenate([y.numpy() for _, y in loader]), first)
    for xb, yb in loader:  # rows stay with their labels
        np.testing.assert_array_equal(xb.numpy(), x[yb.numpy()])


def test_shuffle_with_drop_last(rng):
    _, ds = _dataset(rng, n=50)
    seen = [y.numpy() for _, y in DataLoader(ds, batch_size=8, shuffle=True, drop_last=True)]
    assert [len(s) for s in seen] == [8] * 6
    assert len(set(np.concatenate(seen).tolist())) == 48


def test_map_style_dataset_of_the_seed_talk(rng):
    rows = [rng.standard_normal(4).astype(np.float32) for _ in range(7)]
    loader = DataLoader(MapStyleDataset(rows), batch_size=3)
    batches = list(loader)
    assert len(loader) == 3 and isinstance(batches[0], list)
    np.testing.assert_array_equal(batches[1][0].numpy(), np.stack(rows[3:6]))
    np.testing.assert_array_equal(batches[2][1].numpy(), [6])


def test_a_plain_list_is_a_map_style_dataset():
    batches = list(DataLoader([1.5, 2.5, 3.5], batch_size=2))
    assert batches[0].dtype is fxkit.float64 and batches[1].tolist() == [3.5]


def test_iterable_dataset_of_the_seed_talk():
    batches = list(DataLoader(IterableStyleDataset(7), batch_size=3))
    assert [b["y"].tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]
    np.testing.assert_array_equal(batches[1]["x"].numpy(), np.repeat(np.arange(3, 6, dtype=np.float32), 3)
                                  .reshape(3, 3))
    dropped = list(DataLoader(IterableStyleDataset(7), batch_size=3, drop_last=True))
    assert [b["y"].tolist() for b in dropped] == [[0, 1, 2], [3, 4, 5]]


def test_len_of_an_iterable_dataset_comes_from_its_len():
    class Sized(IterableStyleDataset):
        def __len__(self):
            return self.n

    assert len(DataLoader(Sized(7), batch_size=3)) == 3
    with pytest.raises(TypeError, match="IterableStyleDataset is a stream without __len__"):
        len(DataLoader(IterableStyleDataset(7), batch_size=3))


def test_batch_size_none_yields_converted_samples():
    samples = list(DataLoader(IterableStyleDataset(2), batch_size=None))
    assert len(samples) == 2 and samples[1]["y"] == 1
    assert isinstance(samples[1]["x"], fxkit.Tensor) and samples[1]["x"].shape == (3,)
    ds = TensorDataset(fxkit.arange(4))
    loader = DataLoader(ds, batch_size=None, shuffle=True)
    assert len(loader) == 4
    assert sorted(s[0].item() for s in loader) == [0, 1, 2, 3]


def test_custom_collate_fn(rng):
    _, ds = _dataset(rng)
    loader = DataLoader(ds, batch_size=4, collate_fn=lambda samples: [int(y) for _, y in samples])
    assert list(loader) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


@pytest.mark.parametrize("workers", [1, 3])
def test_worker_threads_give_the_same_batches(rng, workers):
    x, ds = _dataset(rng, n=23)
    fxkit.manual_seed(5)
    serial = [y.tolist() for _, y in DataLoader(ds, batch_size=4, shuffle=True)]
    fxkit.manual_seed(5)
    threaded = [y.tolist() for _, y in DataLoader(ds, batch_size=4, shuffle=True, num_workers=workers)]
    assert threaded == serial
    stream = [b["y"].tolist() for b in DataLoader(IterableStyleDataset(10), batch_size=4, num_workers=workers)]
    assert stream == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    for i, _ in enumerate(DataLoader(ds, batch_size=2, num_workers=workers)):
        if i == 1:
            break  # leaving early does not hang


def test_errors_in_workers_reach_the_caller():
    class Broken(Dataset):
        def __getitem__(self, i):
            if i == 5:
                raise KeyError(f"no sample {i}")
            return i

        def __len__(self):
            return 8

    with pytest.raises(KeyError, match="no sample 5"):
        list(DataLoader(Broken(), batch_size=2, num_workers=2))


def test_batches_stay_on_the_device(device):
    x = fxkit.randn(6, 2).to(device)
    xb, yb = next(iter(DataLoader(TensorDataset(x, fxkit.arange(6).to(device)), batch_size=4)))
    assert xb.device == fxkit.device(device) and yb.device == fxkit.device(device)
    np.testing.assert_array_equal(xb.cpu().numpy(), x.cpu().numpy()[:4])


# -- default_collate ---------------------------------------------------------------------------
Point = collections.namedtuple("Point", "x y")


def test_default_collate_structures(rng):
    a, b = rng.standard_normal((2, 3)).astype(np.float32)
    out = default_collate([(fxkit.from_numpy(a), 1, 0.5, True, "a"), (fxkit.from_numpy(b), 2, 1.5, False, "b")])
    assert isinstance(out, list) and len(out) == 5
    np.testing.assert_array_equal(out[0].numpy(), np.stack([a, b]))
    assert out[1].dtype is fxkit.int64 and out[1].tolist() == [1, 2]
    assert out[2].dtype is fxkit.float64 and out[2].tolist() == [0.5, 1.5]
    assert out[3].dtype is fxkit.bool and out[3].tolist() == [True, False]
    assert out[4] == ["a", "b"]
    nested = default_collate([{"p": Point(a, np.float32(1)), "l": [1, 2]}, {"p": Point(b, np.float32(2)), "l": [3, 4]}])
    assert isinstance(nested["p"], Point) and nested["p"].y.dtype is fxkit.float32
    np.testing.assert_array_equal(nested["p"].x.numpy(), np.stack([a, b]))
    assert [t.tolist() for t in nested["l"]] == [[1, 3], [2, 4]]


def test_default_collate_matches_torch(rng):
    pytest.importorskip("torch")
    from torch.utils.data import default_collate as torch_collate

    samples = [{"img": rng.standard_normal((2, 2)).astype(np.float32), "label": i, "w": float(i) / 3,
                "pair": (np.int32(i), np.float64(i))} for i in range(3)]
    ours, theirs = default_collate(samples), torch_collate(samples)
    assert set(ours) == set(theirs)
    for key in ("img", "label", "w"):
        assert str(ours[key].dtype).split(".")[-1] == str(theirs[key].dtype).split(".")[-1]
        np.testing.assert_array_equal(ours[key].numpy(), theirs[key].numpy())
    assert type(ours["pair"]) is type(theirs["pair"])
    for o, t in zip(ours["pair"], theirs["pair"]):
        np.testing.assert_array_equal(o.numpy(), t.numpy())
        assert str(o.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]


def test_default_convert_keeps_structure():
    out = default_convert({"x": np.ones(2, np.float32), "t": (np.int64(3), "s")})
    assert isinstance(out["x"], fxkit.Tensor) and out["t"][0].item() == 3 and out["t"][1] == "s"


def test_default_collate_errors():
    with pytest.raises(ShapeError, match=r"tensors in a batch must have the same shape to be stacked, got shapes "
                                         r"\[\(2,\), \(3,\)\]; resize or pad the samples, or pass a collate_fn"):
        default_collate([fxkit.ones(2), fxkit.ones(3)])
    with pytest.raises(ShapeError, match=r"numpy arrays .* shapes \[\(1, 2\), \(2, 1\)\]"):
        default_collate([np.ones((1, 2)), np.ones((2, 1))])
    with pytest.raises(ShapeError, match=r"each element in the batch should be of equal size, got sequences of "
                                         r"lengths \[1, 2\]"):
        default_collate([[1], [1, 2]])
    with pytest.raises(TypeError, match="batch must contain tensors, numpy arrays, numbers, dicts or lists; found "
                                        "object; pass DataLoader"):
        default_collate([object(), object()])


# -- DataLoader errors ---------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size", [0, -2, 2.5, True])
def test_bad_batch_size_is_refused(rng, batch_size):
    _, ds = _dataset(rng)
    with pytest.raises(ValueError, match=rf"batch_size should be a positive integer value, but got "
                                         rf"batch_size={batch_size!r}"):
        DataLoader(ds, batch_size=batch_size)


def test_dataloader_argument_errors(rng):
    _, ds = _dataset(rng)
    with pytest.raises(ValueError, match="IterableStyleDataset is an IterableDataset, which cannot be shuffled"):
        DataLoader(IterableStyleDataset(3), shuffle=True)
    with pytest.raises(ValueError, match="batch_size=None turns batching off, so drop_last=True"):
        DataLoader(ds, batch_size=None, drop_last=True)
    with pytest.raises(ValueError, match="num_workers should be a non-negative integer, got -1"):
        DataLoader(ds, num_workers=-1)

    class NoLen(Dataset):
        def __getitem__(self, i):
            return i

    with pytest.raises(TypeError, match=r"NoLen is not a map-style dataset \(needs __getitem__ and __len__\); "
                                        r"define them, or subclass IterableDataset"):
        DataLoader(NoLen())
    with pytest.raises(TypeError, match="IterableDataset is an IterableDataset but defines no __iter__"):
        DataLoader(IterableDataset())


def test_len_matches_batches(rng):
    for n in (1, 9, 16, 17):
        for bs in (1, 4, 16):
            for drop in (False, True):
                _, ds = _dataset(rng, n=n)
                loader = DataLoader(ds, batch_size=bs, drop_last=drop)
                assert len(loader) == len(list(loader)) == (n // bs if drop else math.ceil(n / bs))
