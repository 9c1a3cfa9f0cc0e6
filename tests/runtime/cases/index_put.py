"""Cases for fxkit/runtime/ops/index_put.py (index_put) and scatter's ``reduce``.

numpy float64 references (``np.add.at`` for accumulation), PyTorch (`torch_ref`)
for repeated indices, boolean masks, None entries and broadcast values.
"""
import warnings

import numpy as np

from tests.runtime.opcheck import case, randf, randi, torch_ref


def _put(a, indices, values, accumulate=False):
    out = a.copy()
    index = tuple(slice(None) if i is None else i for i in indices)
    if accumulate:
        np.add.at(out, index, values)
    else:
        out[index] = values
    return out


def _torch_index_put(a, indices, values, accumulate=False):
    import torch

    return torch.index_put(a, tuple(indices), values, accumulate)


def _torch_scatter(a, dim, index, src, reduce):
    with warnings.catch_warnings():  # PyTorch deprecates reduce= in favour of scatter_reduce; it still runs
        warnings.simplefilter("ignore", UserWarning)
        return a.scatter(dim, index, src, reduce=reduce)


def _scatter_reduce(a, dim, index, src, reduce):
    out = a.copy()
    block = src[tuple(slice(0, s) for s in index.shape)]
    where = tuple(index if i == dim else np.arange(index.shape[i]).reshape((-1,) + (1,) * (index.ndim - 1 - i))
                  for i in range(index.ndim))
    (np.add if reduce == "add" else np.multiply).at(out, where, block)
    return out


case("index_put", lambda r: ((randf(r, 5, 3), (np.array([4, 0, 2]),), randf(r, 3, 3)), {}), _put, id="rows")
case("index_put", lambda r: ((randf(r, 5, 3), (np.array([4, 0, 4, 1]),), randf(r, 4, 3)), {"accumulate": True}),
     _put, id="accumulate_repeats")
case("index_put", lambda r: ((randf(r, 4, 5), (np.array([0, 3]), np.array([4, 1])), randf(r, 2)), {}), _put,
     id="pairs")
case("index_put", lambda r: ((randf(r, 4, 5), (np.array([1, 1, 2]), np.array([0, 0, 3])), randf(r, 1)),
                             {"accumulate": True}), torch_ref(_torch_index_put), id="torch_broadcast_accumulate")
case("index_put", lambda r: ((randf(r, 3, 4), (randf(r, 3, 4) > 0,), randf(r, 1).reshape(())), {}),
     torch_ref(_torch_index_put), id="torch_bool_mask")
case("index_put", lambda r: ((randf(r, 3, 4), (randf(r, 3, 4) > 0,), randf(r, 1).reshape(())),
                             {"accumulate": True}), torch_ref(_torch_index_put), id="torch_bool_mask_accumulate")
case("index_put", lambda r: ((randi(r, 4, 3), (np.array([-1, 0]),), randi(r, 3)), {}),
     torch_ref(_torch_index_put), id="torch_int64_negative")

case("scatter", lambda r: ((randf(r, 3, 5), 1, randi(r, 3, 4, low=0, high=5), randf(r, 3, 4)),
                           {"reduce": "add"}), _scatter_reduce, id="reduce_add")
case("scatter", lambda r: ((randf(r, 4, 3), 0, randi(r, 5, 3, low=0, high=4), randf(r, 5, 3) + 3),
                           {"reduce": "multiply"}), _scatter_reduce, id="reduce_multiply")
case("scatter", lambda r: ((randf(r, 3, 5), -1, randi(r, 3, 2, low=0, high=5), randf(r, 3, 4)),
                           {"reduce": "add"}), torch_ref(_torch_scatter), id="torch_reduce_add")
case("scatter", lambda r: ((randf(r, 3, 5), 1, randi(r, 3, 3, low=0, high=5), randf(r, 3, 3)),
                           {"reduce": "multiply"}), torch_ref(_torch_scatter), id="torch_reduce_multiply")
