"""The eager runtime: op registry, Tensor, devices, dtypes, nn, functional, autograd."""
from fxkit.runtime import ops as _ops  # noqa: F401  (registers every op)
from fxkit.runtime.autograd import load_rules as _load_rules
from fxkit.runtime.tensor_methods import install_tensor as _install_tensor

_load_rules()  # the backward ops join the registry, every op gets its derivative rule
_install_tensor()
