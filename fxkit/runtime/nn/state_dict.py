"""Loading a state_dict into a Module, with PyTorch's checks and messages.

Values may be fxkit Tensors, numpy arrays, or anything numpy can read (a CPU
``torch.Tensor`` included), so ``{k: v.numpy() for k, v in torch_sd.items()}``
loads unchanged. Values are copied into the existing storage (casting to the
parameter's dtype, as ``Tensor.copy_`` does) unless ``assign=True``.
"""
import numpy as np

from fxkit.errors import StateDictError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.autograd.autograd_meta import bump_version
from fxkit.runtime.tensor import Tensor


def load_into(module, state_dict, *, strict, assign):
    """Copy ``state_dict`` into ``module``; return ``(missing_keys, unexpected_keys)``.

    Raises:
        StateDictError: for shape mismatches and unreadable values always, and
            for missing or unexpected keys when ``strict``.
    """
    own = module.state_dict(keep_vars=True)
    missing = [key for key in own if key not in state_dict]
    unexpected = [key for key in state_dict if key not in own]
    errors = []
    for key, target in own.items():
        if key not in state_dict:
            continue
        value = state_dict[key]
        array = _array_for(value, target)
        if array is None:
            errors.append(f'While copying the parameter named "{key}", expected an fxkit Tensor or a numpy '
                          f"array from checkpoint but received {type(value).__name__}")
            continue
        if tuple(array.shape) != tuple(target.shape):
            errors.append(f"size mismatch for {key}: copying a param with shape {list(array.shape)} from "
                          f"checkpoint, the shape in current model is {list(target.shape)}.")
            continue
        if assign:
            _dt.from_numpy(array.dtype)
            target._data = array
        else:
            target._data[...] = array
        bump_version(target)
    if strict:
        if unexpected:
            errors.insert(0, "Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ". ")
        if missing:
            errors.insert(0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ". ")
    if errors:
        hint = ("\n  hint: pass strict=False to load the matching keys only" if strict and (missing or unexpected)
                else "")
        raise StateDictError(f"Error(s) in loading state_dict for {type(module).__name__}:\n\t"
                             + "\n\t".join(errors) + hint)
    return missing, unexpected


def _array_for(value, target):
    """``value`` as an array on ``target``'s device, or None when it is no array."""
    if isinstance(value, Tensor):
        if value.device is target.device:
            return value._data
        array = value._host()
    elif isinstance(value, np.ndarray):
        array = value
    elif hasattr(value, "__cuda_array_interface__") and hasattr(value, "get"):
        array = value.get()
    else:
        try:
            array = np.asarray(value)
        except (TypeError, ValueError, RuntimeError):
            return None
    if array.dtype.kind not in "biuf" and array.dtype not in _dt._BY_NP:
        return None
    if target.device.type == "cpu":
        return array
    with target.device.activate():
        return target.device.xp.asarray(array)
