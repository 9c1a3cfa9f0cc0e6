"""Training checkpoints for data-parallel jobs: rank 0 writes, every rank resumes from the same file.

The replicas are equal, so one copy suffices: `save_checkpoint` writes on
rank 0 only (the others wait at a barrier, so nobody reads a half-written
file), `load_checkpoint` reads on every rank. The file is one ``.npz``:
the model's ``state_dict`` arrays, the optimizer state's arrays, and a JSON
record of everything else (hyperparameters, step counts, your own values
such as the epoch). Loading never unpickles (``allow_pickle=False``).

Example:
    >>> save_checkpoint("ckpt.npz", ddp.module, opt, epoch=epoch)          # every rank calls it
    >>> meta = load_checkpoint("ckpt.npz", ddp.module, opt)               # every rank calls it
    >>> start_epoch = meta["epoch"] + 1
"""
import json
import os

import numpy as np

from fxkit.distributed.collectives import barrier
from fxkit.distributed.process_group import is_initialized, resolve
from fxkit.errors import DistributedError
from fxkit.runtime.tensor import Tensor

_META = "__meta__"


def save_checkpoint(path, model, optimizer=None, group=None, **meta):
    """Write ``model`` (and ``optimizer``) to ``path`` from the group's first rank; every rank calls it.

    Args:
        path: the ``.npz`` file (written whole, then renamed into place).
        model: the module whose ``state_dict`` is saved (``ddp.module``).
        optimizer: its optimizer, or None.
        group: the process group (the world by default); without an
            initialized process group this process writes.
        **meta: JSON-able values stored with it (epoch, step, ...).
    """
    writer = not is_initialized() or resolve(group).rank() == 0
    if writer:
        arrays = {f"model/{k}": _host(v) for k, v in model.state_dict().items()}
        record = {"meta": meta, "optimizer": None}
        if optimizer is not None:
            state = optimizer.state_dict()
            plain = {}
            for index, entries in state["state"].items():
                plain[str(index)] = {}
                for key, value in entries.items():
                    if isinstance(value, Tensor):
                        arrays[f"optim/{index}/{key}"] = _host(value)
                    else:
                        plain[str(index)][key] = value
            record["optimizer"] = {"param_groups": state["param_groups"], "plain": plain}
        arrays[_META] = np.frombuffer(json.dumps(record).encode(), np.uint8)
        partial = f"{path}.partial.npz"
        np.savez(partial, **arrays)
        os.replace(partial, path)
    if is_initialized():
        barrier(group)


def load_checkpoint(path, model, optimizer=None):
    """Load ``path`` into ``model`` (and ``optimizer``) on this rank; returns the saved ``**meta``."""
    if not os.path.exists(path):
        raise DistributedError(f"load_checkpoint: no checkpoint at {path}; every rank must see the file (a shared "
                               f"file system when the ranks run on several machines)")
    with np.load(path, allow_pickle=False) as saved:
        record = json.loads(saved[_META].tobytes())
        model.load_state_dict({k[len("model/"):]: saved[k] for k in saved.files if k.startswith("model/")})
        if optimizer is not None:
            if record["optimizer"] is None:
                raise DistributedError(f"load_checkpoint: {path} holds no optimizer state; pass optimizer=None")
            state = {int(i): dict(entries) for i, entries in record["optimizer"]["plain"].items()}
            for key in saved.files:
                if key.startswith("optim/"):
                    _, index, name = key.split("/", 2)
                    state.setdefault(int(index), {})[name] = Tensor(saved[key].copy())
            optimizer.load_state_dict({"state": state, "param_groups": record["optimizer"]["param_groups"]})
    return record["meta"]


def _host(t):
    data = t._data if isinstance(t, Tensor) else np.asarray(t)
    return data if isinstance(data, np.ndarray) else data.get()
