"""Cases for fxkit/runtime/ops/sorting.py: sort, argsort, topk."""
import numpy as np

from tests.runtime.opcheck import case, randf, randi, torch_ref


def _descending_order(a, axis):
    """Stable descending order by a float64 key: NaN first, ties in their original order."""
    key = np.where(np.isnan(a), np.inf, a.astype(np.float64))
    # lexsort sorts by the last key first: descending value, then ascending position.
    positions = np.indices(a.shape)[axis % a.ndim]
    moved = [np.moveaxis(x, axis, -1) for x in (positions, -key)]
    flat = [x.reshape(-1, x.shape[-1]) for x in moved]
    order = np.stack([np.lexsort((p, k)) for p, k in zip(*flat)]).reshape(moved[0].shape)
    return np.moveaxis(order, -1, axis)


def _order(a, dim=-1, descending=False):
    if a.ndim == 0:
        return np.zeros((), np.int64)
    if descending:
        return _descending_order(a, dim).astype(np.int64)
    return np.argsort(a, axis=dim, kind="stable").astype(np.int64)  # numpy: NaN last, as PyTorch


def _sort(a, dim=-1, descending=False, stable=False):
    indices = _order(a, dim, descending)
    return (a.copy() if a.ndim == 0 else np.take_along_axis(a, indices, dim)), indices


def _argsort(a, dim=-1, descending=False, stable=False):
    return _order(a, dim, descending)


def _topk(a, k, dim=-1, largest=True, sorted=True):
    values, indices = _sort(a, dim, largest)
    if a.ndim == 0:
        return values, indices
    take = (slice(None),) * (dim % a.ndim) + (slice(0, k),)
    return values[take], indices[take]


def _ties(rng, *shape):
    """Few distinct values, many ties: stability decides the indices."""
    return rng.integers(-2, 3, size=shape).astype(np.float32)


def _with_nan(rng, *shape):
    x = randf(rng, *shape)
    x.flat[::5] = np.nan
    return x


# -- sort -------------------------------------------------------------------------------------
case("sort", lambda r: ((randf(r, 3, 7),), {}), _sort)
case("sort", lambda r: ((randf(r, 4, 5, 3), 1), {"descending": True}), _sort, id="dim1-descending")
case("sort", lambda r: ((_ties(r, 4, 9),), {"stable": True}), _sort, id="ties-stable")
case("sort", lambda r: ((_ties(r, 4, 9),), {"descending": True, "stable": True}), _sort,
     id="ties-stable-descending")
case("sort", lambda r: ((_with_nan(r, 3, 10),), {}), _sort, id="nan-last")
case("sort", lambda r: ((_with_nan(r, 3, 10),), {"descending": True}), _sort, id="nan-first-descending")
case("sort", lambda r: ((randi(r, 12, dtype=np.int32), 0, True), {}), _sort, id="int32-descending")
case("sort", lambda r: ((randi(r, 12, low=0, high=255, dtype=np.uint8),), {"descending": True}), _sort,
     id="uint8-descending")
case("sort", lambda r: ((r.random(10) < 0.5,), {}), _sort, id="bool")
case("sort", lambda r: ((randf(r, 6, 5).T,), {"dim": 0}), _sort, id="noncontiguous-dim0")
case("sort", lambda r: ((np.array(r.random(), np.float32),), {}), _sort, id="0d")
case("sort", lambda r: ((randf(r, 0, 4),), {}), _sort, id="empty")
case("sort", lambda r: ((randf(r, 5, 3, 4, dtype=np.float64), -2), {"descending": True, "stable": True}),
     torch_ref(lambda a, dim, descending, stable: a.sort(dim=dim, descending=descending, stable=stable)),
     id="torch")
case("sort", lambda r: ((_ties(r, 3, 8),), {"stable": True}), torch_ref(lambda a, stable: a.sort(stable=stable)),
     id="torch-ties")

# -- argsort ----------------------------------------------------------------------------------
case("argsort", lambda r: ((randf(r, 3, 7),), {}), _argsort)
case("argsort", lambda r: ((_ties(r, 4, 9), 0, True), {}), _argsort, id="ties-dim0-descending")
case("argsort", lambda r: ((_with_nan(r, 12),), {"descending": True}), _argsort, id="nan")
case("argsort", lambda r: ((randi(r, 5, 6),), {"dim": 1}), _argsort, id="int64")
case("argsort", lambda r: ((_ties(r, 3, 8),), {"stable": True}),
     torch_ref(lambda a, stable: a.argsort(stable=stable)), id="torch-ties")

# -- topk -------------------------------------------------------------------------------------
case("topk", lambda r: ((randf(r, 3, 10), 4), {}), _topk)
case("topk", lambda r: ((randf(r, 6, 5, 3), 2, 0), {"largest": False}), _topk, id="dim0-smallest")
case("topk", lambda r: ((randf(r, 4, 7), 7), {"dim": 1}), _topk, id="k-equals-size")
case("topk", lambda r: ((randf(r, 4, 7), 0), {}), _topk, id="k0")
case("topk", lambda r: ((_with_nan(r, 3, 10), 3), {}), _topk, id="nan-largest")
case("topk", lambda r: ((randi(r, 3, 8), 3, -1, True, False), {}), _topk, id="int64-unsorted-flag")
case("topk", lambda r: ((np.array(r.random(), np.float32), 1), {}), _topk, id="0d")
# k small against the dim: the partition path, ties at the k-th value picked lowest index first
case("topk", lambda r: ((_ties(r, 4, 40), 6, 1), {}), _topk, id="partial-ties")
case("topk", lambda r: ((_ties(r, 30, 3), 5, 0), {"largest": False}), _topk, id="partial-ties-smallest-dim0")
case("topk", lambda r: ((_with_nan(r, 3, 40), 9), {}), _topk, id="partial-nan-largest")
case("topk", lambda r: ((_with_nan(r, 3, 40), 9), {"largest": False}), _topk, id="partial-nan-smallest")
case("topk", lambda r: ((np.full((2, 20), np.nan, np.float32), 3), {}), _topk, id="partial-all-nan")
case("topk", lambda r: ((randi(r, 5, 30, low=-3, high=3), 4, -1, False), {}), _topk, id="partial-int64-smallest")
case("topk", lambda r: ((randf(r, 2, 3, 64, dtype=np.float64), 5, 2), {}),
     torch_ref(lambda a, k, dim: a.topk(k, dim)), id="partial-torch")
case("topk", lambda r: ((randf(r, 3, 5, 8, dtype=np.float64), 3, 1), {}),
     torch_ref(lambda a, k, dim: a.topk(k, dim)), id="torch")
case("topk", lambda r: ((randf(r, 4, 9), 2), {"largest": False}),
     torch_ref(lambda a, k, largest: a.topk(k, largest=largest)), id="torch-smallest")
