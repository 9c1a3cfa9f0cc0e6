"""Devices: ``cpu`` runs on numpy, ``cuda[:N]`` on cupy (imported lazily).

A `Device` knows its array module (``xp``), so an op's implementation is
written once against ``xp`` and runs on either.
"""
import numpy as np

from fxkit.errors import DeviceError

_cupy = None


def _import_cupy():
    global _cupy
    if _cupy is None:
        try:
            import cupy
        except ImportError as exc:
            raise DeviceError(
                "a cuda device needs cupy, which is not installed; "
                "install the extra with `pip install fxkit[cuda]` (cupy-cuda12x)"
            ) from exc
        _cupy = cupy
    return _cupy


class Device:
    """One place tensors live: ``Device("cpu")``, ``Device("cuda:1")``.

    Devices are interned, so ``a.device is b.device`` compares them; ``xp`` is the
    device's array module (numpy, or cupy for cuda).
    """

    __slots__ = ("type", "index", "xp")
    _interned = {}

    def __new__(cls, spec="cpu"):
        if isinstance(spec, Device):
            return spec
        key = spec
        dev = cls._interned.get(key)
        if dev is not None:
            return dev
        dtype, index = _parse(spec)
        canon = "cpu" if dtype == "cpu" else f"cuda:{index}"
        dev = cls._interned.get(canon)
        if dev is None:
            dev = object.__new__(cls)
            # NOTE: a cuda device imports cupy when first named: that is when one is used.
            dev.type, dev.index = dtype, index
            dev.xp = np if dtype == "cpu" else _import_cupy()
            cls._interned[canon] = dev
        cls._interned[key] = dev
        return dev

    def activate(self):
        """A context manager making this device cupy's current one (no-op on cpu)."""
        if self.type == "cpu":
            return _NULL_CONTEXT
        return self.xp.cuda.Device(self.index)

    def __repr__(self):
        return f"device(type='{self.type}')" if self.type == "cpu" else f"device(type='cuda', index={self.index})"

    def __str__(self):
        return "cpu" if self.type == "cpu" else f"cuda:{self.index}"

    def __reduce__(self):
        return (Device, (str(self),))


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NULL_CONTEXT = _NullContext()


def _parse(spec):
    if not isinstance(spec, str):
        raise DeviceError(f"a device is 'cpu', 'cuda' or 'cuda:N', got {spec!r}")
    if spec == "cpu":
        return "cpu", None
    if spec == "cuda":
        return "cuda", 0
    if spec.startswith("cuda:") and spec[5:].isdigit():
        return "cuda", int(spec[5:])
    raise DeviceError(f"unknown device {spec!r}; use 'cpu', 'cuda' or 'cuda:N'")


cpu = Device("cpu")


def device_of_array(array):
    """The device an ndarray lives on (numpy: cpu; cupy: its GPU)."""
    if isinstance(array, np.ndarray):
        return cpu
    dev = getattr(array, "device", None)
    if _cupy is not None and isinstance(array, _cupy.ndarray):
        return Device(f"cuda:{dev.id}")
    raise DeviceError(f"expected a numpy or cupy array, got {type(array).__name__}")


class cuda:
    """``fxkit.cuda.is_available()`` and ``fxkit.cuda.device_count()``."""

    @staticmethod
    def device_count():
        """Number of visible GPUs; 0 when cupy or a driver is missing."""
        try:
            cupy = _import_cupy()
            return cupy.cuda.runtime.getDeviceCount()
        except Exception:  # no cupy, no driver, or no device: all mean zero GPUs
            return 0

    @staticmethod
    def is_available():
        """True when at least one GPU can be used through cupy."""
        return cuda.device_count() > 0
