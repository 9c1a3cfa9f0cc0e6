"""Cases for fxkit/runtime/ops/indexing.py: getitem, setitem, gather, scatter,
index_select, masked_fill, tril, triu.

numpy float64 references for every op; PyTorch (`torch_ref`) where PyTorch
and numpy differ or where PyTorch's rule is the point: integers mixed with
advanced indices, 0-d index tensors, an Ellipsis standing for no dimension,
gather/scatter with an index smaller than the input, diagonals of tril/triu.
Boolean-mask indexing has a value-dependent shape, so its shape rule is not
checked (the rule's refusal is tested in test_shape_errors.py).
"""
import numpy as np

from tests.runtime.opcheck import case, randf, randi, torch_ref


def _get(a, index):
    return a[index]


def _set(a, index, value):
    a[index] = value
    return a


def _torch(name):
    """``torch.<name>(*args, **kwargs)`` as a reference."""

    def call(*args, **kwargs):
        import torch

        return getattr(torch, name)(*args, **kwargs)

    return torch_ref(call)


def _distinct(rng, rows, n, k):
    """``rows`` x ``k`` int64 indices in [0, n), distinct within each row (scatter writes once)."""
    return np.stack([rng.permutation(n)[:k] for _ in range(rows)]).astype(np.int64)


def _mask(rng, *shape):
    m = rng.random(shape) > 0.5
    m.flat[0] = True
    return m


def _put(a, dim, index, src):
    out = a.copy()
    np.put_along_axis(out, index, src, axis=dim)
    return out


# -- getitem: basic indexing -------------------------------------------------------------------
case("getitem", lambda r: ((randf(r, 3, 4), 1), {}), _get, id="int")
case("getitem", lambda r: ((randf(r, 3, 4), -1), {}), _get, id="neg_int")
case("getitem", lambda r: ((randf(r, 3, 4), (1, 2)), {}), _get, id="scalar_element")
case("getitem", lambda r: ((randf(r, 5, 6), (slice(1, None, 2), slice(None, -1))), {}), _get, id="slices_step")
case("getitem", lambda r: ((randf(r, 2, 3, 4), (Ellipsis, None, slice(1, 3))), {}), _get, id="ellipsis_none")
case("getitem", lambda r: ((randf(r, 2, 3, 4), (None, 0, Ellipsis, 1)), {}), _get, id="none_int_ellipsis")
case("getitem", lambda r: ((randf(r, 3, 4), (slice(5, 9),)), {}), _get, id="slice_past_end")
case("getitem", lambda r: ((randf(r, 0, 4), (slice(None), 2)), {}), _get, id="empty")
case("getitem", lambda r: ((randf(r, 6, 5).T, (slice(1, 4), 2)), {}), _get, id="noncontiguous")
case("getitem", lambda r: ((randi(r, 4, 3), (Ellipsis, -1)), {}), _get, id="int64")
case("getitem", lambda r: ((randf(r, 1).reshape(()), ()), {}), _get, id="scalar_empty_tuple")
case("getitem", lambda r: (((randf(r, 2), randf(r, 3)), 1), {}), _get, id="pick_from_tuple")

# -- getitem: advanced indexing ---------------------------------------------------------------
case("getitem", lambda r: ((randf(r, 5, 3), randi(r, 4, low=-5, high=5)), {}), _get, id="int_tensor")
case("getitem", lambda r: ((randf(r, 5, 3), randi(r, 2, 2, low=0, high=5)), {}), _get, id="int_tensor_2d")
case("getitem", lambda r: ((randf(r, 4, 5), (slice(None), randi(r, 3, low=0, high=5))), {}), _get,
     id="slice_then_tensor")
case("getitem", lambda r: ((randf(r, 4, 5, 6), (randi(r, 3, low=0, high=4), slice(None), randi(r, 3, low=0, high=6))),
                           {}), _get, id="separated_to_front")
case("getitem", lambda r: ((randf(r, 4, 5), [0, 2, -1]), {}), _get, id="list")
case("getitem", lambda r: ((randf(r, 4, 5), _mask(r, 4, 5)), {}), _get, id="bool_mask", check_rule=False)
case("getitem", lambda r: ((randf(r, 4, 5), (slice(None), _mask(r, 5))), {}), _get, id="bool_mask_dim1",
     check_rule=False)
case("getitem", lambda r: ((randf(r, 5, 6, 7), (0, slice(None), randi(r, 4, low=0, high=7))), {}),
     torch_ref(_get), id="torch_int_then_tensor")
case("getitem", lambda r: ((randf(r, 5, 6, 7), (randi(r, 2, 3, low=0, high=5), slice(1, 4), -1)), {}),
     torch_ref(_get), id="torch_tensor_slice_int")
case("getitem", lambda r: ((randf(r, 5, 6, 7), (np.array(2), slice(None), randi(r, 4, low=0, high=7))), {}),
     torch_ref(_get), id="torch_0d_tensor_is_int")
case("getitem", lambda r: ((randf(r, 3, 4, 5, 6), (slice(None), randi(r, 2, low=0, high=4), Ellipsis,
                                                    randi(r, 2, low=0, high=5), slice(None))), {}),
     torch_ref(_get), id="torch_empty_ellipsis_adjacent")
case("getitem", lambda r: ((randf(r, 3, 4, 5, 6), (slice(None), randi(r, 2, low=0, high=4), None,
                                                    randi(r, 2, low=0, high=5))), {}),
     torch_ref(_get), id="torch_none_separates")
case("getitem", lambda r: ((randf(r, 5, 6), (1, _mask(r, 6))), {}), torch_ref(_get), id="torch_int_and_mask",
     check_rule=False)
case("getitem", lambda r: ((randf(r, 8, 5).T[:, ::2], (randi(r, 3, low=0, high=5), slice(None, 2))), {}),
     torch_ref(_get), id="torch_noncontiguous")
case("getitem", lambda r: ((randf(r, 4, 5), (np.zeros(0, np.int64),)), {}), _get, id="empty_index")

# -- setitem (in place, returns None) ---------------------------------------------------------
_SET = {"mutates": True, "check_rule": False}
case("setitem", lambda r: ((randf(r, 3, 4), 1, 2.5), {}), _set, id="row_scalar", **_SET)
case("setitem", lambda r: ((randf(r, 3, 4), (slice(None), slice(1, 3)), randf(r, 3, 1)), {}), _set,
     id="broadcast_tensor", **_SET)
# NOTE: distinct indices: which of two writes to one row wins is unspecified (in PyTorch too),
# and the gradient check would see it.
case("setitem", lambda r: ((randf(r, 5, 3), r.permutation(5)[:2].astype(np.int64), randf(r, 3)), {}), _set,
     id="int_tensor", **_SET)
case("setitem", lambda r: ((randf(r, 4, 5), _mask(r, 4, 5), -1.0), {}), _set, id="bool_mask", **_SET)
case("setitem", lambda r: ((randf(r, 6, 5).T, (0, slice(None, None, 2)), randf(r, 3)), {}), _set,
     id="noncontiguous", **_SET)
case("setitem", lambda r: ((randi(r, 3, 4), (Ellipsis, 0), 7.9), {}), torch_ref(_set), id="torch_int_cast", **_SET)
case("setitem", lambda r: ((randf(r, 5, 6, 7), (0, slice(None), randi(r, 1, low=0, high=7)), randf(r, 6, 1)), {}),
     torch_ref(_set), id="torch_int_then_tensor", **_SET)

# -- gather / scatter / index_select ----------------------------------------------------------
case("gather", lambda r: ((randf(r, 3, 5), 1, randi(r, 3, 4, low=0, high=5)), {}),
     lambda a, d, i: np.take_along_axis(a, i, axis=d), id="dim1")
case("gather", lambda r: ((randf(r, 4, 3), -2, randi(r, 6, 3, low=0, high=4)), {}),
     lambda a, d, i: np.take_along_axis(a, i, axis=0), id="neg_dim_larger")
case("gather", lambda r: ((randf(r, 4, 5, 3), 1, randi(r, 2, 3, 2, low=0, high=5)), {}), _torch("gather"),
     id="torch_smaller_index")
case("gather", lambda r: ((randf(r, 5, 4).T, 0, randi(r, 2, 5, low=0, high=4)), {}),
     lambda a, d, i: np.take_along_axis(a, i, axis=0), id="noncontiguous")
case("gather", lambda r: ((randf(r, 3, 4), 1, np.zeros((3, 0), np.int64)), {}), lambda a, d, i: np.zeros((3, 0)),
     id="empty_index")
case("gather", lambda r: ((randf(r, 5), 0, np.array(3)), {}), lambda a, d, i: a[3], id="0d_index")
case("scatter", lambda r: ((randf(r, 3, 5), 1, _distinct(r, 3, 5, 2), randf(r, 3, 2)), {}), _put, id="src")
case("scatter", lambda r: ((randf(r, 3, 5), 1, _distinct(r, 3, 5, 3)), {"value": 2.5}),
     lambda a, d, i, value: _put(a, d, i, value), id="value")
case("scatter", lambda r: ((randf(r, 5, 3), 0, _distinct(r, 3, 5, 2).T.copy(), randf(r, 4, 3)), {}),
     _torch("scatter"), id="torch_src_larger")
case("scatter", lambda r: ((randf(r, 3, 5, 4), -2, _distinct(r, 2, 5, 3)[:, :, None].repeat(2, 2), randf(r, 3, 3, 4)),
                           {}), _torch("scatter"), id="torch_smaller_index")
case("scatter", lambda r: ((randi(r, 3, 4), 1, _distinct(r, 3, 4, 2), -7), {}),
     lambda a, d, i, v: _put(a, d, i, v), id="int_positional_value")
case("scatter", lambda r: ((randf(r, 5, 3).T, 1, _distinct(r, 3, 5, 2), randf(r, 3, 2)), {}), _put,
     id="noncontiguous")
case("index_select", lambda r: ((randf(r, 4, 5), 1, randi(r, 6, low=0, high=5)), {}),
     lambda a, d, i: np.take(a, i, axis=d), id="dim1_repeats")
case("index_select", lambda r: ((randf(r, 4, 5, 2), -3, randi(r, 2, low=0, high=4)), {}),
     lambda a, d, i: np.take(a, i, axis=0), id="neg_dim")
case("index_select", lambda r: ((randf(r, 4, 5), 1, np.array(2)), {}), _torch("index_select"), id="torch_0d_index")
case("index_select", lambda r: ((randf(r, 4, 5), 0, np.zeros(0, np.int32)), {}), lambda a, d, i: a[:0],
     id="empty_index_int32")
case("index_select", lambda r: ((randf(r, 6, 4).T, 0, randi(r, 3, low=0, high=4)), {}),
     lambda a, d, i: np.take(a, i, axis=0), id="noncontiguous")

# -- masked_fill / tril / triu ---------------------------------------------------------------------
case("masked_fill", lambda r: ((randf(r, 3, 4), _mask(r, 3, 4), -1.5), {}), lambda a, m, v: np.where(m, v, a),
     id="same_shape")
case("masked_fill", lambda r: ((randf(r, 2, 3, 4), _mask(r, 1, 4), float("-inf")), {}),
     lambda a, m, v: np.where(m, v, a), id="broadcast_mask_inf")
case("masked_fill", lambda r: ((randf(r, 3, 4), _mask(r, 3, 4), randf(r, 1, dtype=np.float64).reshape(())), {}),
     lambda a, m, v: np.where(m, v, a), id="0d_tensor_value_keeps_dtype")
case("masked_fill", lambda r: ((randi(r, 3, 4), _mask(r, 3, 4), 2.7), {}), torch_ref(
    lambda a, m, v: a.masked_fill(m, v)), id="torch_int_float_value")
case("masked_fill", lambda r: ((randf(r, 4), _mask(r, 2, 1), 0.5), {}), torch_ref(
    lambda a, m, v: a.masked_fill(m, v)), id="torch_mask_broadcasts_output")
case("masked_fill", lambda r: ((randf(r, 4, 3).T, _mask(r, 3, 4), 3.0), {}), lambda a, m, v: np.where(m, v, a),
     id="noncontiguous")
case("masked_fill", lambda r: ((randf(r, 0, 4), _mask(r, 4), 1.0), {}), lambda a, m, v: a, id="empty")
case("tril", lambda r: ((randf(r, 4, 5),), {}), np.tril, id="basic")
case("tril", lambda r: ((randf(r, 2, 4, 5), -1), {}), np.tril, id="batched_neg_diag")
case("tril", lambda r: ((randf(r, 3, 6),), {"diagonal": 2}), _torch("tril"), id="torch_pos_diag")
case("tril", lambda r: ((randf(r, 6, 4).T, 1), {}), np.tril, id="noncontiguous")
case("tril", lambda r: ((randi(r, 0, 3),), {}), np.tril, id="empty_int")
case("triu", lambda r: ((randf(r, 4, 5),), {}), np.triu, id="basic")
case("triu", lambda r: ((randf(r, 2, 4, 5), 2), {}), np.triu, id="batched_pos_diag")
case("triu", lambda r: ((randf(r, 5, 3),), {"diagonal": -2}), _torch("triu"), id="torch_neg_diag")
case("triu", lambda r: ((randf(r, 6, 4).T, -1), {}), np.triu, id="noncontiguous")
