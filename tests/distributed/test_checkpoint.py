"""save_checkpoint / load_checkpoint: one .npz with a JSON record, never pickled; resuming restores the
model and the optimizer so training continues exactly as without the interruption."""
import numpy as np
import pytest

import fxkit
import fxkit.nn.functional as F
from fxkit import nn
from fxkit.distributed import load_checkpoint, save_checkpoint
from fxkit.errors import DistributedError


def setup():
    fxkit.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2)).double()
    return model, fxkit.optim.Adam(model.parameters(), lr=0.01)


def train(model, opt, steps, start=0):
    for step in range(start, start + steps):
        rng = np.random.default_rng(step)
        x, y = fxkit.from_numpy(rng.standard_normal((8, 4))), fxkit.from_numpy(rng.integers(0, 2, 8))
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def test_resuming_from_a_checkpoint_continues_exactly(tmp_path):
    path = str(tmp_path / "ckpt.npz")
    straight, straight_opt = setup()
    train(straight, straight_opt, 6)
    first, first_opt = setup()
    train(first, first_opt, 3)
    save_checkpoint(path, first, first_opt, epoch=2, note="half way")
    fxkit.manual_seed(1)
    resumed = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2)).double()
    resumed_opt = fxkit.optim.Adam(resumed.parameters(), lr=0.5)
    assert load_checkpoint(path, resumed, resumed_opt) == {"epoch": 2, "note": "half way"}
    assert resumed_opt.param_groups[0]["lr"] == 0.01
    train(resumed, resumed_opt, 3, start=3)
    for a, b in zip(resumed.parameters(), straight.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with np.load(path, allow_pickle=False) as saved:  # data only: loads without pickle
        assert "model/0.weight" in saved.files


def test_a_missing_file_or_optimizer_state_says_what_to_do(tmp_path):
    model, opt = setup()
    with pytest.raises(DistributedError, match="no checkpoint at .*every rank must see the file"):
        load_checkpoint(str(tmp_path / "nope.npz"), model)
    save_checkpoint(str(tmp_path / "m.npz"), model)
    with pytest.raises(DistributedError, match="holds no optimizer state; pass optimizer=None"):
        load_checkpoint(str(tmp_path / "m.npz"), model, opt)
