"""PyTorch-style printing of tensors: ``tensor([[0.1000, 0.2000]], dtype=fxkit.float16)``."""
import numpy as np

from fxkit.runtime import dtypes as _dt

_IMPLICIT = ("float32", "int64", "bool")
_THRESHOLD = 1000
_EDGEITEMS = 3


def tensor_repr(t):
    """The text PyTorch prints for ``t``: four decimals, summarised past 1000 elements."""
    a = t._host()
    dtype = _dt.from_numpy(a.dtype)
    body = _format_array(a, dtype)
    extras = []
    if t.device.type != "cpu":
        extras.append(f"device='{t.device}'")
    if dtype.name not in _IMPLICIT or a.size == 0:
        if not (a.size == 0 and dtype.name == "float32"):
            extras.append(f"dtype={dtype!r}")
    if a.size == 0 and a.ndim != 1:
        extras.insert(0, f"size={tuple(a.shape)}")
    suffix = "".join(", " + e for e in extras)
    return f"tensor({body}{suffix})"


def _format_array(a, dtype):
    if dtype.category == 2:
        shown = a.astype(np.float64)
        formatter = {"float_kind": _float_formatter(shown)}
    elif dtype.category == 1:
        formatter = {"int": str}
    else:
        formatter = {"bool": lambda v: "True" if v else "False"}
    return np.array2string(
        a if dtype.category != 2 else shown,
        separator=", ",
        prefix="tensor(",
        threshold=_THRESHOLD,
        edgeitems=_EDGEITEMS,
        formatter=formatter,
        max_line_width=80,
    )


def _float_formatter(a):
    finite = a[np.isfinite(a)] if a.size else a
    if finite.size == 0:
        return lambda v: _special(v) or f"{v:.4f}"
    if a.size <= _THRESHOLD:
        sample = finite
    else:
        sample = np.concatenate([finite.ravel()[:_EDGEITEMS * 10], finite.ravel()[-_EDGEITEMS * 10:]])
    big = np.abs(sample).max()
    small = np.abs(sample[sample != 0]).min() if np.any(sample != 0) else 1.0
    if np.all(sample == np.round(sample)) and big < 1e8:
        return lambda v: _special(v) or f"{v:.0f}."
    if big >= 1e8 or small < 1e-4 or (big / small > 1000 and big > 1e3):
        return lambda v: _special(v) or f"{v:.4e}"
    return lambda v: _special(v) or f"{v:.4f}"


def _special(v):
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return None
