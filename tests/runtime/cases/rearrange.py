"""Cases for fxkit/runtime/ops/rearrange.py: cat, stack, repeat, tile, flip, roll, pad.

numpy float64 references for every op; PyTorch (`torch_ref`) for the pad
modes (including negative padding), roll over several dims, cat's dtype
promotion and its legacy skipping of 1-d empty tensors.
"""
import numpy as np

from tests.runtime.opcheck import case, randf, randi, torch_ref


def _torch(name):
    """``torch.<name>(*args, **kwargs)`` as a reference."""

    def call(*args, **kwargs):
        import torch

        return getattr(torch, name)(*args, **kwargs)

    return torch_ref(call)


def _torch_pad(a, pad, mode="constant", value=None):
    import torch.nn.functional as F

    return F.pad(a, pad, mode=mode, value=value)


_NP_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _np_pad(a, pad, mode="constant", value=None):
    """``F.pad`` in numpy for non-negative pads: the pad list starts at the last dim."""
    widths = [(0, 0)] * a.ndim
    for i in range(len(pad) // 2):
        widths[a.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if mode == "constant":
        return np.pad(a, widths, constant_values=0 if value is None else value)
    return np.pad(a, widths, mode=_NP_MODES[mode])


# -- cat / stack ----------------------------------------------------------------------------
case("cat", lambda r: (([randf(r, 2, 3), randf(r, 4, 3)],), {}), lambda ts: np.concatenate(ts), id="dim0")
case("cat", lambda r: (([randf(r, 2, 3), randf(r, 2, 1), randf(r, 2, 2)], -1), {}),
     lambda ts, d: np.concatenate(ts, axis=1), id="neg_dim_three")
case("cat", lambda r: (((randf(r, 2, 3), randf(r, 2, 3)),), {"dim": 1}), lambda ts, dim: np.concatenate(ts, 1),
     id="tuple_kwarg_dim")
case("cat", lambda r: (([randi(r, 2, 3, dtype=np.int32), randf(r, 1, 3)],), {}),
     lambda ts: np.concatenate([t.astype(np.float64) for t in ts]), id="promote_int_float")
case("cat", lambda r: (([randi(r, 2, dtype=np.int32), randi(r, 3) > 0],), {}),
     lambda ts: np.concatenate([ts[0], ts[1].astype(np.int32)]), id="promote_int32_bool")
case("cat", lambda r: (([randi(r, 2, dtype=np.int32), randi(r, 3, dtype=np.int64)],), {}), _torch("cat"),
     id="torch_int32_int64")
case("cat", lambda r: (([randf(r, 2, 3), np.zeros((0,), np.float32), randf(r, 1, 3)],), {}),
     lambda ts: np.concatenate([ts[0], ts[2]]), id="skip_1d_empty")
case("cat", lambda r: (([randi(r, 2, 3), np.zeros((0,), np.float32)],), {}), _torch("cat"),
     id="torch_skip_1d_empty_promotes")
case("cat", lambda r: (([np.zeros((0, 3), np.float32), randf(r, 2, 3)],), {}), lambda ts: np.concatenate(ts),
     id="empty_2d")
case("cat", lambda r: (([randf(r, 5, 2).T, randf(r, 2, 6)[:, ::2]], 1), {}), lambda ts, d: np.concatenate(ts, 1),
     id="noncontiguous")
case("stack", lambda r: (([randf(r, 2, 3), randf(r, 2, 3)],), {}), lambda ts: np.stack(ts), id="dim0")
case("stack", lambda r: (([randf(r, 2, 3), randf(r, 2, 3), randf(r, 2, 3)], -1), {}),
     lambda ts, d: np.stack(ts, axis=-1), id="neg_dim")
case("stack", lambda r: (([randi(r, 4), randf(r, 4)], 1), {}),
     lambda ts, d: np.stack([t.astype(np.float64) for t in ts], 1), id="promote")
case("stack", lambda r: (([randf(r, 0, 2), randf(r, 0, 2)], 1), {}), lambda ts, d: np.zeros((0, 2, 2)),
     id="empty")
case("stack", lambda r: (([randf(r, 3, 2).T, randf(r, 2, 3)],), {}), lambda ts: np.stack(ts), id="noncontiguous")
case("stack", lambda r: (([randf(r, 1).reshape(()), randf(r, 1).reshape(())],), {}), lambda ts: np.stack(ts),
     id="scalars")

# -- repeat / tile -----------------------------------------------------------------------------
case("repeat", lambda r: ((randf(r, 2, 3), 2, 3), {}), lambda a, *s: np.tile(a, s), id="basic")
case("repeat", lambda r: ((randf(r, 2, 3), (2, 1, 2)), {}), lambda a, s: np.tile(a, s), id="new_leading")
case("repeat", lambda r: ((randi(r, 3), 0, 2), {}), lambda a, *s: np.zeros((0, 6), np.int64), id="zero_int")
case("repeat", lambda r: ((randf(r, 4, 3).T, 2, 2), {}), lambda a, *s: np.tile(a, s), id="noncontiguous")
case("tile", lambda r: ((randf(r, 2, 3), (2,)), {}), lambda a, s: np.tile(a, (1, 2)), id="fewer_dims")
case("tile", lambda r: ((randf(r, 2, 3), 2, 1, 2), {}), lambda a, *s: np.tile(a, s), id="more_dims")
case("tile", lambda r: ((randf(r, 2, 3), (3, 2)), {}), _torch("tile"), id="torch")
case("tile", lambda r: ((randf(r, 2, 3),), {"dims": (2, 1, 3)}), _torch("tile"), id="torch_dims_keyword")

# -- flip / roll -------------------------------------------------------------------------------
case("flip", lambda r: ((randf(r, 3, 4), 0), {}), lambda a, d: a[::-1], id="one")
case("flip", lambda r: ((randf(r, 2, 3, 4), (0, -1)), {}), lambda a, d: a[::-1, :, ::-1], id="tuple_neg")
case("flip", lambda r: ((randf(r, 2, 3, 4), 1, 2), {}), lambda a, *d: a[:, ::-1, ::-1], id="varargs")
case("flip", lambda r: ((randf(r, 6, 4)[::2], 1), {}), lambda a, d: a[:, ::-1], id="noncontiguous")
case("flip", lambda r: ((randi(r, 0, 3), 0), {}), lambda a, d: a, id="empty_int")
case("flip", lambda r: ((randf(r, 3, 4),), {"dims": [0, 1]}), _torch("flip"), id="torch_dims_keyword")
case("roll", lambda r: ((randf(r, 3, 4), 1), {}), lambda a, s: np.roll(a, 1), id="flat")
case("roll", lambda r: ((randf(r, 3, 4), -2, 1), {}), lambda a, s, d: np.roll(a, -2, 1), id="neg_shift")
case("roll", lambda r: ((randf(r, 3, 4, 5), (1, -3), (0, 2)), {}), lambda a, s, d: np.roll(a, s, d), id="multi")
case("roll", lambda r: ((randf(r, 3, 4, 5),), {"shifts": (2, 7), "dims": (-1, 1)}), _torch("roll"),
     id="torch_multi")
case("roll", lambda r: ((randf(r, 5, 4).T, 2, 0), {}), lambda a, s, d: np.roll(a, 2, 0), id="noncontiguous")
case("roll", lambda r: ((randf(r, 0, 3), 1, 1), {}), lambda a, s, d: a, id="empty")

# -- pad ---------------------------------------------------------------------------------------
case("pad", lambda r: ((randf(r, 2, 3), (1, 2)), {}), _np_pad, id="constant_last")
case("pad", lambda r: ((randf(r, 2, 3, 4), (1, 0, 2, 1)), {"value": 1.5}), _np_pad, id="constant_value")
case("pad", lambda r: ((randi(r, 2, 3), (1, 1)), {"value": 3}), _np_pad, id="constant_int")
case("pad", lambda r: ((randf(r, 2, 3, 4), (-1, 2, 1, -1)), {}), torch_ref(_torch_pad), id="torch_negative")
case("pad", lambda r: ((randf(r, 2, 5, 4), (2, 3, 1, 4)), {"mode": "reflect"}), _np_pad, id="reflect")
case("pad", lambda r: ((randf(r, 2, 5, 4), (1, 3, 2, 0)), {"mode": "replicate"}), _np_pad, id="replicate")
case("pad", lambda r: ((randf(r, 2, 5, 4), (4, 1, 0, 5)), {"mode": "circular"}), _np_pad, id="circular")
for _mode in ("reflect", "replicate", "circular"):
    case("pad", lambda r, m=_mode: ((randf(r, 2, 3, 5, 4), (3, 1, 2, 4)), {"mode": m}), torch_ref(_torch_pad),
         id=f"torch_{_mode}")
    case("pad", lambda r, m=_mode: ((randf(r, 2, 3, 5), (-1, 2)), {"mode": m}), torch_ref(_torch_pad),
         id=f"torch_{_mode}_crop_left")
    case("pad", lambda r, m=_mode: ((randf(r, 2, 3, 5), (2, -1)), {"mode": m}), torch_ref(_torch_pad),
         id=f"torch_{_mode}_crop_right")
    case("pad", lambda r, m=_mode: ((randf(r, 2, 3, 4, 5, 6), (1, 2, 2, 1, 1, 1)), {"mode": m}),
         torch_ref(_torch_pad), id=f"torch_{_mode}_3d")
case("pad", lambda r: ((randf(r, 3, 6, 4).transpose(0, 2, 1), (1, 1, 2, 2)), {"mode": "reflect"}), _np_pad,
     id="noncontiguous")
case("pad", lambda r: ((randf(r, 0, 3), (1, 1, 2, 0)), {}), _np_pad, id="empty")
