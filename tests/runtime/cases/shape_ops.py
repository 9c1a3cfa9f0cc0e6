"""Cases for fxkit/runtime/ops/shape_ops.py: views, size queries, narrow/split/chunk.

numpy float64 references for every op; PyTorch (`torch_ref`) where its rule
is the point: unflatten with -1, uneven chunk, split sections, squeeze tuples.
Non-contiguous inputs come as numpy views (``a.T``, ``a[:, ::2]``).
"""
import numpy as np

from tests.runtime.opcheck import case, randf, randi, torch_ref


def _method(name, *fixed):
    """``tensor.<name>(*args, *fixed, **kwargs)`` in PyTorch as a reference."""

    def call(a, *args, **kwargs):
        return getattr(a, name)(*args, *fixed, **kwargs)

    return torch_ref(call)


def _views(a, d, sizes):
    """numpy pieces of ``a`` along ``d`` of the given sizes."""
    return tuple(np.split(a, np.cumsum(sizes)[:-1], axis=d))


# -- view / reshape ------------------------------------------------------------------
case("view", lambda r: ((randf(r, 3, 4), 2, -1), {}), lambda a, *s: a.reshape(2, 6), id="infer")
case("view", lambda r: ((randf(r, 3, 4), (4, 3)), {}), lambda a, s: a.reshape(s), id="tuple")
case("view", lambda r: ((randf(r, 2, 3, 4), [-1]), {}), lambda a, s: a.reshape(-1), id="flat_list")
case("view", lambda r: ((randf(r, 6, 4)[::2], 3, 2, 2), {}), lambda a, *s: a.reshape(s),
     id="noncontiguous_compatible")
case("view", lambda r: ((randf(r, 5, 4).T, 4, 5, 1), {}), lambda a, *s: a.reshape(s), id="transposed_add_one")
case("view", lambda r: ((np.zeros((0, 4), np.float32), 2, 0, 2), {}), lambda a, *s: a.reshape(2, 0, 2),
     id="empty")
case("view", lambda r: ((randi(r, 2, 6), 3, 4), {}), lambda a, *s: a.reshape(s), id="int64")
case("view", lambda r: ((randf(r, 1).reshape(()), 1, 1), {}), lambda a, *s: a.reshape(1, 1), id="scalar")
case("reshape", lambda r: ((randf(r, 3, 4), 6, -1), {}), lambda a, *s: a.reshape(6, 2), id="infer")
case("reshape", lambda r: ((randf(r, 5, 4).T, 20), {}), lambda a, s: a.reshape(20), id="noncontiguous_copy")
case("reshape", lambda r: ((randf(r, 4, 6)[:, ::2], (2, -1)), {}), lambda a, s: a.reshape(2, 6), id="strided")
case("reshape", lambda r: ((np.zeros((3, 0), np.float32), (0, 5)), {}), lambda a, s: a.reshape(s), id="empty")
case("reshape", lambda r: ((randf(r, 3, 4),), {"shape": (2, -1)}), lambda a, shape: a.reshape(shape),
     id="shape_keyword")

# -- permute / transpose / t -------------------------------------------------------------
case("permute", lambda r: ((randf(r, 2, 3, 4), 2, 0, 1), {}), lambda a, *d: a.transpose(d), id="varargs")
case("permute", lambda r: ((randf(r, 2, 3, 4), (-1, -3, 1)), {}), lambda a, d: a.transpose(2, 0, 1),
     id="tuple_neg")
case("permute", lambda r: ((randf(r, 5, 4).T, 1, 0), {}), lambda a, *d: a.T, id="noncontiguous")
case("permute", lambda r: ((randf(r, 2, 0, 3), 1, 2, 0), {}), lambda a, *d: a.transpose(d), id="empty")
case("permute", lambda r: ((randf(r, 2, 3, 4),), {"dims": [1, 2, 0]}), lambda a, dims: a.transpose(dims),
     id="dims_keyword")
case("transpose", lambda r: ((randf(r, 2, 3, 4), 0, -1), {}), lambda a, d0, d1: np.swapaxes(a, 0, 2), id="neg")
case("transpose", lambda r: ((randf(r, 3, 4), 1, 1), {}), lambda a, d0, d1: a, id="same")
case("transpose", lambda r: ((randf(r, 6, 4)[::2], 0, 1), {}), lambda a, d0, d1: a.T, id="noncontiguous")
case("transpose", lambda r: ((randf(r, 1).reshape(()), 0, -1), {}), lambda a, d0, d1: a, id="scalar")
case("t", lambda r: ((randf(r, 3, 4),), {}), lambda a: a.T, id="matrix")
case("t", lambda r: ((randf(r, 5),), {}), lambda a: a, id="vector")
case("t", lambda r: ((randi(r, 4, 0),), {}), lambda a: a.T, id="empty_int")
case("numpy_T", lambda r: ((randf(r, 2, 3, 4),), {}), lambda a: a.T, id="3d")
case("numpy_T", lambda r: ((randf(r, 5),), {}), lambda a: a, id="vector")
case("numpy_T", lambda r: ((randf(r, 4, 3).T,), {}), lambda a: a.T, id="noncontiguous")
case("numpy_T", lambda r: ((randi(r, 0, 2),), {}), lambda a: a.T, id="empty_int")

# -- flatten / unflatten ------------------------------------------------------------------
case("flatten", lambda r: ((randf(r, 2, 3, 4),), {}), lambda a: a.reshape(-1), id="all")
case("flatten", lambda r: ((randf(r, 2, 3, 4, 5),), {"start_dim": 1, "end_dim": -2}),
     lambda a, start_dim, end_dim: a.reshape(2, 12, 5), id="middle")
case("flatten", lambda r: ((randf(r, 2, 3, 4), 1), {}), lambda a, s: a.reshape(2, 12), id="start")
case("flatten", lambda r: ((randf(r, 1).reshape(()),), {}), lambda a: a.reshape(1), id="scalar")
case("flatten", lambda r: ((randf(r, 6, 5).T,), {}), lambda a: a.reshape(-1), id="noncontiguous")
case("flatten", lambda r: ((randf(r, 2, 0, 3), 1), {}), lambda a, s: a.reshape(2, 0), id="empty")
case("unflatten", lambda r: ((randf(r, 2, 12), 1, (3, 4)), {}), lambda a, d, s: a.reshape(2, 3, 4), id="basic")
case("unflatten", lambda r: ((randf(r, 12, 2), -2, [2, -1, 3]), {}), lambda a, d, s: a.reshape(2, 2, 3, 2),
     id="infer_neg_dim")
case("unflatten", lambda r: ((randf(r, 2, 12), 1, (3, -1)), {}), _method("unflatten"), id="torch")
case("unflatten", lambda r: ((randf(r, 12, 5).T, 1, (2, 6)), {}), lambda a, d, s: a.reshape(5, 2, 6),
     id="noncontiguous")

# -- unsqueeze / squeeze / expand / contiguous ----------------------------------------------
case("unsqueeze", lambda r: ((randf(r, 3, 4), 1), {}), lambda a, d: a[:, None], id="middle")
case("unsqueeze", lambda r: ((randf(r, 3, 4), -1), {}), lambda a, d: a[..., None], id="neg_end")
case("unsqueeze", lambda r: ((randf(r, 1).reshape(()), 0), {}), lambda a, d: a.reshape(1), id="scalar")
case("unsqueeze", lambda r: ((randf(r, 4, 6)[:, ::2], 0), {}), lambda a, d: a[None], id="noncontiguous")
case("squeeze", lambda r: ((randf(r, 1, 3, 1, 4),), {}), lambda a: a.squeeze(), id="all")
case("squeeze", lambda r: ((randf(r, 1, 3, 1, 4), -2), {}), lambda a, d: a.squeeze(2), id="neg_dim")
case("squeeze", lambda r: ((randf(r, 1, 3, 1, 4), 1), {}), lambda a, d: a, id="not_one_kept")
case("squeeze", lambda r: ((randf(r, 1, 3, 1),), {"dim": (0, 1, 2)}), lambda a, dim: a.reshape(3), id="tuple")
case("squeeze", lambda r: ((randf(r, 1, 0, 1),), {"dim": (0, 1)}), _method("squeeze"), id="torch_empty")
case("expand", lambda r: ((randf(r, 3, 1), 3, 4), {}), lambda a, *s: np.broadcast_to(a, (3, 4)), id="basic")
case("expand", lambda r: ((randf(r, 3, 1), (2, -1, 5)), {}), lambda a, s: np.broadcast_to(a, (2, 3, 5)),
     id="leading_keep")
case("expand", lambda r: ((randi(r, 1, 4), 0, 4), {}), lambda a, *s: np.zeros((0, 4), np.int64), id="to_empty")
case("expand", lambda r: ((randf(r, 1, 6)[:, ::2], 2, 3), {}), lambda a, *s: np.broadcast_to(a, (2, 3)),
     id="noncontiguous")
case("contiguous", lambda r: ((randf(r, 5, 4).T,), {}), lambda a: a, id="transposed")
case("contiguous", lambda r: ((randf(r, 3, 4),), {}), lambda a: a, id="already")
case("contiguous", lambda r: ((randi(r, 0, 3),), {}), lambda a: a, id="empty_int")

# -- size / dim / numel --------------------------------------------------------------------
case("size", lambda r: ((randf(r, 3, 4),), {}), lambda a: (3, 4), id="all")
case("size", lambda r: ((randf(r, 3, 4), -1), {}), lambda a, d: 4, id="neg_dim")
case("size", lambda r: ((randf(r, 1).reshape(()),), {}), lambda a: (), id="scalar")
case("size", lambda r: ((randf(r, 2, 0, 5), 1), {}), lambda a, d: 0, id="empty")
case("dim", lambda r: ((randf(r, 2, 3, 4),), {}), lambda a: 3, id="basic")
case("dim", lambda r: ((randf(r, 1).reshape(()),), {}), lambda a: 0, id="scalar")
case("numel", lambda r: ((randf(r, 2, 3, 4),), {}), lambda a: 24, id="basic")
case("numel", lambda r: ((randf(r, 3, 0),), {}), lambda a: 0, id="empty")
case("numel", lambda r: ((randf(r, 1).reshape(()),), {}), lambda a: 1, id="scalar")

# -- narrow / split / chunk --------------------------------------------------------------------
case("narrow", lambda r: ((randf(r, 3, 6), 1, 2, 3), {}), lambda a, d, s, n: a[:, 2:5], id="basic")
case("narrow", lambda r: ((randf(r, 3, 6), -1, -2, 2), {}), lambda a, d, s, n: a[:, 4:6], id="neg_start")
case("narrow", lambda r: ((randf(r, 3, 6), 0, 3, 0), {}), lambda a, d, s, n: a[3:3], id="empty_at_end")
case("narrow", lambda r: ((randf(r, 8, 3).T, 1, 1, 4), {}), lambda a, d, s, n: a[:, 1:5], id="noncontiguous")
case("split", lambda r: ((randf(r, 5, 4), 2), {}), lambda a, s: _views(a, 0, (2, 2, 1)), id="uneven")
case("split", lambda r: ((randf(r, 3, 6), [1, 3, 2], -1), {}), lambda a, s, d: _views(a, 1, s), id="sections")
case("split", lambda r: ((randf(r, 3, 7), (4, 0, 3), 1), {}), _method("split"), id="torch_sections")
case("split", lambda r: ((randf(r, 7, 3), 3), {}), _method("split"), id="torch_uneven")
case("split", lambda r: ((randf(r, 0, 3), 2), {}), lambda a, s: (a,), id="empty")
case("split", lambda r: ((randf(r, 6, 4).T, 2, 1), {}), lambda a, s, d: _views(a, 1, (2, 2, 2)),
     id="noncontiguous")
case("chunk", lambda r: ((randf(r, 6, 4), 3), {}), lambda a, c: _views(a, 0, (2, 2, 2)), id="even")
case("chunk", lambda r: ((randf(r, 3, 5), 3, 1), {}), lambda a, c, d: _views(a, 1, (2, 2, 1)), id="uneven")
case("chunk", lambda r: ((randf(r, 6, 2), 4), {}), _method("chunk"), id="torch_fewer_chunks")
case("chunk", lambda r: ((randf(r, 2, 7), 3, -1), {}), _method("chunk"), id="torch_uneven")
case("chunk", lambda r: ((randf(r, 0, 2), 3), {}), _method("chunk"), id="torch_empty")
case("chunk", lambda r: ((randf(r, 4, 6).T, 2), {}), lambda a, c: _views(a, 0, (3, 3)), id="noncontiguous")
