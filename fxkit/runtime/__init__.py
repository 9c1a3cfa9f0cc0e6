"""The eager runtime: op registry, Tensor, devices, dtypes, nn, functional."""
from fxkit.runtime import ops as _ops  # noqa: F401  (registers every op)
from fxkit.runtime.tensor_methods import install_tensor as _install_tensor

_install_tensor()
