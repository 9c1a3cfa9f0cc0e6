"""Cases for fxkit/runtime/ops/nn_misc_ops.py: dropout, dropout2d, embedding, one_hot.

Only the deterministic modes of dropout fit a reference (eval, p=0, p=1);
training-mode statistics are checked in tests/runtime/test_nn_ops_effects.py.
"""
import numpy as np

import fxkit
from tests.runtime.opcheck import case, randf, randi, torch_ref


def _torch_f(name):
    def call(*args, **kw):
        import torch.nn.functional as F

        return getattr(F, name)(*args, **kw)

    return torch_ref(call)


for _name in ("dropout", "dropout2d"):
    case(_name, lambda r: ((randf(r, 4, 3, 5, 5), 0.5), {"training": False}), lambda x, p, training: x,
         id="eval_identity")
    case(_name, lambda r: ((randf(r, 4, 3, 5, 5),), {"p": 0.0}), lambda x, p: x, id="p0_identity")
    case(_name, lambda r: ((randf(r, 4, 3, 5, 5),), {"p": 1.0}), lambda x, p: np.zeros_like(x), id="p1_zeros")
    case(_name, lambda r: ((randf(r, 4, 3, 5, 5),), {"p": 1.0, "inplace": True}), lambda x, p, inplace: 0 * x,
         id="p1_inplace", mutates=True)
    case(_name, lambda r: ((randi(r, 2, 3, 4), 0.3, False), {}), lambda x, p, training: x, id="eval_int_identity")
    case(_name, lambda r: ((randf(r, 6, 4)[:, ::2],), {"training": False}), lambda x, training: x,
         id="eval_non_contiguous")
    case(_name, lambda r: ((randf(r, 2, 3, 4, 4), 1.0), {}), _torch_f(_name), id="p1_torch")
    case(_name, lambda r: ((randf(r, 2, 3, 4, 4), 0.4), {"training": False}), _torch_f(_name), id="eval_torch")


def embedding_ref(idx, weight, padding_idx=None, max_norm=None, norm_type=2.0, **_):
    """Row lookup in float64, with PyTorch's max_norm renormalisation of the referenced rows."""
    if max_norm is not None:
        weight = weight.copy()
        rows = np.unique(idx)
        norms = np.linalg.norm(weight[rows], ord=norm_type, axis=1)
        scale = np.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
        weight[rows] *= scale[:, None]
    return weight[idx]


for _ref, _tag in ((embedding_ref, ""), (_torch_f("embedding"), "_torch")):
    case("embedding", lambda r: ((randi(r, 7, low=0, high=10), randf(r, 10, 4)), {}), _ref, id="1d" + _tag)
    case("embedding", lambda r: ((randi(r, 3, 5, low=0, high=10), randf(r, 10, 4)), {}), _ref, id="2d" + _tag)
    case("embedding", lambda r: ((randi(r, 6, low=0, high=10, dtype=np.int32), randf(r, 10, 3)), {}), _ref,
         id="int32_indices" + _tag)
    case("embedding", lambda r: ((randi(r, 2, 4, low=0, high=5), randf(r, 5, 8)), {"padding_idx": 0}), _ref,
         id="padding_idx" + _tag)
    case("embedding", lambda r: ((randi(r, 2, 4, low=0, high=5), randf(r, 5, 8)), {"padding_idx": -1}), _ref,
         id="negative_padding_idx" + _tag)
    case("embedding", lambda r: ((randi(r, 9, low=0, high=6), randf(r, 6, 5) * 3), {"max_norm": 1.5}), _ref,
         id="max_norm" + _tag)
    case("embedding", lambda r: ((randi(r, 9, low=0, high=6), randf(r, 6, 5) * 3),
                                 {"max_norm": 2.0, "norm_type": 1.0}), _ref, id="max_norm_l1" + _tag)
    case("embedding", lambda r: ((randi(r, 4, low=0, high=6), randf(r, 5, 6).T), {}), _ref,
         id="non_contiguous_weight" + _tag)
    case("embedding", lambda r: ((randi(r, 0, 3, low=0, high=6), randf(r, 6, 2)), {}), _ref, id="empty" + _tag)
    case("embedding", lambda r: ((randi(r, 5, low=0, high=6), randf(r, 6, 2, dtype=np.float64)), {}), _ref,
         id="float64" + _tag)


def one_hot_ref(t, num_classes=-1):
    n = int(t.max()) + 1 if num_classes == -1 else num_classes
    return np.eye(n, dtype=np.int64)[t]


for _ref, _tag in ((one_hot_ref, ""), (_torch_f("one_hot"), "_torch")):
    case("one_hot", lambda r: ((randi(r, 6, low=0, high=4), 5), {}), _ref, id="num_classes" + _tag,
         dtype=fxkit.int64)
    case("one_hot", lambda r: ((randi(r, 3, 4, low=0, high=7),), {}), _ref, id="inferred" + _tag,
         dtype=fxkit.int64, check_rule=False)
    case("one_hot", lambda r: ((randi(r, 4, 5, low=0, high=3)[:, ::2],), {"num_classes": 3}), _ref,
         id="non_contiguous" + _tag, dtype=fxkit.int64)
    case("one_hot", lambda r: ((randi(r, 0, 2, low=0, high=3), 3), {}), _ref, id="empty" + _tag,
         dtype=fxkit.int64)
    case("one_hot", lambda r: ((np.array(2), 4), {}), _ref, id="0d" + _tag, dtype=fxkit.int64)
