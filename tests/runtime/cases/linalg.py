"""Cases for fxkit/runtime/ops/linalg.py (and einsum_plan.py).

numpy float64 references for every op; PyTorch (`torch_ref`) for einsum's
equations (ellipsis, implicit output, size-1 broadcasting) and the
``beta``/``alpha`` forms of addmm/baddbmm.
"""
import numpy as np

from tests.runtime.opcheck import case, randf, randi, torch_ref

TOL = {"rtol": 1e-5, "atol": 1e-5}


def _torch(name, **fixed):
    def call(*args, **kwargs):
        import torch

        return getattr(torch, name)(*args, **kwargs, **fixed)

    return torch_ref(call)


def _linear_ref(x, w, bias=None):
    return x @ w.T if bias is None else x @ w.T + bias


# -- matmul ----------------------------------------------------------------------------
case("matmul", lambda r: ((randf(r, 3, 4), randf(r, 4, 5)), {}), np.matmul, id="2d", **TOL)
case("matmul", lambda r: ((randf(r, 2, 1, 3, 4), randf(r, 5, 4, 6)), {}), np.matmul, id="batch_broadcast", **TOL)
case("matmul", lambda r: ((randf(r, 4), randf(r, 2, 4, 5)), {}), np.matmul, id="1d_left", **TOL)
case("matmul", lambda r: ((randf(r, 2, 3, 4), randf(r, 4)), {}), np.matmul, id="1d_right", **TOL)
case("matmul", lambda r: ((randf(r, 4), randf(r, 4)), {}), np.matmul, id="dot_0d", **TOL)
case("matmul", lambda r: ((randf(r, 4, 3).T, randf(r, 4, 10)[:, ::2]), {}), np.matmul, id="noncontiguous", **TOL)
case("matmul", lambda r: ((randi(r, 3, 4), randi(r, 4, 2)), {}), np.matmul, id="int64")
case("matmul", lambda r: ((randf(r, 3, 0), randf(r, 0, 2)), {}), np.matmul, id="empty_inner")

# -- mm, bmm ---------------------------------------------------------------------------
case("mm", lambda r: ((randf(r, 3, 4), randf(r, 4, 5)), {}), np.matmul, id="basic", **TOL)
case("mm", lambda r: ((randf(r, 4, 3).T, randf(r, 5, 4).T), {}), np.matmul, id="transposed_views", **TOL)
case("mm", lambda r: ((randi(r, 3, 4, dtype=np.int32), randi(r, 4, 2, dtype=np.int32)), {}),
     lambda a, b: (a @ b).astype(np.int32), id="int32")
case("bmm", lambda r: ((randf(r, 2, 3, 4), randf(r, 2, 4, 5)), {}), np.matmul, id="basic", **TOL)
case("bmm", lambda r: ((randf(r, 2, 4, 3).transpose(0, 2, 1), randf(r, 2, 4, 5)), {}), np.matmul,
     id="noncontiguous", **TOL)
case("bmm", lambda r: ((randf(r, 2, 3, 4, dtype=np.float64), randf(r, 2, 4, 1, dtype=np.float64)), {}), np.matmul,
     id="float64")

# -- linear ----------------------------------------------------------------------------
case("linear", lambda r: ((randf(r, 6, 4), randf(r, 3, 4), randf(r, 3)), {}), _linear_ref, id="bias", **TOL)
case("linear", lambda r: ((randf(r, 6, 4), randf(r, 3, 4)), {}), _linear_ref, id="no_bias", **TOL)
case("linear", lambda r: ((randf(r, 2, 5, 4), randf(r, 3, 4)), {"bias": randf(r, 3)}), _linear_ref,
     id="3d_input_bias_kwarg", **TOL)
case("linear", lambda r: ((randf(r, 4), randf(r, 3, 4), randf(r, 3)), {}), _linear_ref, id="1d_input", **TOL)
case("linear", lambda r: ((randf(r, 6, 4), randf(r, 4, 3).T, randf(r, 6)[::2]), {}), _linear_ref,
     id="noncontiguous_weight_bias", **TOL)
case("linear", lambda r: ((randf(r, 6, 4), randf(r, 3, 4), randf(r, 6, 1)), {}), _linear_ref,
     id="bias_broadcast", **TOL)
case("linear", lambda r: ((randf(r, 2, 5, 4), randf(r, 3, 4), randf(r, 3)), {}),
     torch_ref(lambda x, w, b: __import__("torch").nn.functional.linear(x, w, b)), id="torch", **TOL)

# -- addmm, baddbmm --------------------------------------------------------------------


def _nan_input(r, *shape):
    return np.full(shape, np.nan, np.float32)


case("addmm", lambda r: ((randf(r, 3, 5), randf(r, 3, 4), randf(r, 4, 5)), {}), lambda c, a, b: c + a @ b,
     id="basic", **TOL)
case("addmm", lambda r: ((randf(r, 5), randf(r, 3, 4), randf(r, 4, 5)), {"beta": 0.5, "alpha": 2.0}),
     lambda c, a, b, beta, alpha: beta * c + alpha * (a @ b), id="beta_alpha_broadcast", **TOL)
case("addmm", lambda r: ((_nan_input(r, 3, 1), randf(r, 3, 4), randf(r, 4, 5)), {"beta": 0}),
     lambda c, a, b, beta: a @ b, id="beta0_ignores_nan", **TOL)
case("addmm", lambda r: ((randi(r, 3, 5), randi(r, 3, 4), randi(r, 4, 5)), {"beta": 2, "alpha": 3}),
     lambda c, a, b, beta, alpha: 2 * c + 3 * (a @ b), id="int")
case("addmm", lambda r: ((randf(r, 3, 1), randf(r, 4, 3).T, randf(r, 4, 5)), {"beta": -1.5, "alpha": 0.25}),
     _torch("addmm"), id="torch_beta_alpha", **TOL)
case("baddbmm", lambda r: ((randf(r, 2, 3, 5), randf(r, 2, 3, 4), randf(r, 2, 4, 5)), {}),
     lambda c, a, b: c + a @ b, id="basic", **TOL)
case("baddbmm", lambda r: ((randf(r, 5), randf(r, 2, 3, 4), randf(r, 2, 4, 5)), {"beta": 0.5, "alpha": 2}),
     lambda c, a, b, beta, alpha: beta * c + alpha * (a @ b), id="beta_alpha_broadcast", **TOL)
case("baddbmm", lambda r: ((_nan_input(r, 2, 3, 5), randf(r, 2, 3, 4), randf(r, 2, 4, 5)), {"beta": 0.0}),
     lambda c, a, b, beta: a @ b, id="beta0_ignores_nan", **TOL)
case("baddbmm", lambda r: ((randf(r, 1, 3, 1), randf(r, 2, 3, 4), randf(r, 2, 5, 4).transpose(0, 2, 1)),
                           {"beta": 0.75, "alpha": -2.0}), _torch("baddbmm"), id="torch_beta_alpha", **TOL)

# -- einsum ----------------------------------------------------------------------------
_EQUATIONS = [
    # (id, equation, shapes)
    ("matmul", "ij,jk->ik", [(3, 4), (4, 5)]),
    ("batch_matmul", "bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("attention_scores", "bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("attention_values", "bhqk,bhkd->bqhd", [(2, 3, 4, 6), (2, 3, 6, 5)]),
    ("trace", "ii", [(4, 4)]),
    ("diagonal", "ii->i", [(4, 4)]),
    ("batch_trace", "bii->b", [(3, 4, 4)]),
    ("outer", "i,j->ij", [(3,), (4,)]),
    ("dot", "i,i", [(5,), (5,)]),
    ("transpose", "ij->ji", [(2, 3)]),
    ("sum_all", "ijk->", [(2, 3, 4)]),
    ("implicit_output", "ij,jk", [(3, 4), (4, 5)]),
    ("implicit_sorted", "kj,ji", [(3, 4), (4, 5)]),
    ("ellipsis", "...ij,jk->...ik", [(2, 3, 3, 4), (4, 5)]),
    ("ellipsis_implicit", "...ij,jk", [(2, 3, 4), (4, 5)]),
    ("three_operands", "ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("sum_one_side", "ij,kl->jl", [(2, 3), (4, 5)]),
    ("bilinear", "bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("spaces", " ij , jk -> ik ", [(3, 4), (4, 5)]),
    ("empty_dim", "ij,jk->ik", [(3, 0), (0, 5)]),
]
for _id, _eq, _shapes in _EQUATIONS:
    case("einsum", lambda r, _eq=_eq, _shapes=_shapes: ((_eq, *[randf(r, *s) for s in _shapes]), {}),
         lambda eq, *ops: np.einsum(eq.replace(" ", ""), *ops), id=_id, **TOL)

case("einsum", lambda r: (("ij,jk->ik", [randf(r, 3, 4), randf(r, 4, 5)]), {}),
     lambda eq, ops: np.einsum(eq, *ops), id="list_form", **TOL)
case("einsum", lambda r: (("ij,jk->ik", randf(r, 4, 3).T, randf(r, 4, 10)[:, ::2]), {}),
     lambda eq, *ops: np.einsum(eq, *ops), id="noncontiguous", **TOL)
case("einsum", lambda r: (("bij,bjk->bik", randi(r, 2, 3, 4), randi(r, 2, 4, 5)), {}),
     lambda eq, *ops: np.einsum(eq, *ops), id="int64")
case("einsum", lambda r: (("ij,ij->", randf(r, 3, 1), randf(r, 3, 4)), {}), _torch("einsum"),
     id="torch_broadcast_contracted", **TOL)
case("einsum", lambda r: (("bij,bjk->bik", randf(r, 1, 3, 4), randf(r, 2, 4, 5)), {}), _torch("einsum"),
     id="torch_broadcast_batch", **TOL)
case("einsum", lambda r: (("...ij,...jk", randf(r, 2, 1, 3, 4), randf(r, 5, 4, 2)), {}), _torch("einsum"),
     id="torch_ellipsis_broadcast", **TOL)
case("einsum", lambda r: (("bhqd,bhkd->bhqk", randf(r, 2, 3, 4, 5), randf(r, 2, 3, 6, 5)), {}), _torch("einsum"),
     id="torch_attention", **TOL)
case("einsum", lambda r: (("ii->", randf(r, 4, 4)), {}), _torch("einsum"), id="torch_trace", **TOL)
