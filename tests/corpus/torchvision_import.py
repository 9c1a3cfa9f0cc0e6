"""The one way fxkit's tests and benchmarks import torchvision.

The torchvision 0.28.0 wheel the package registry serves is a CUDA build: its
C extension (``torchvision._C``: ``nms``, ``roi_align``, ...) does not load
beside the CPU torch 2.13.0, which torchvision tolerates, but its
``_meta_registrations`` module then registers fake kernels for
``torchvision::nms`` and ``torchvision::qnms`` unconditionally and the import
fails with ``operator torchvision::nms does not exist``.

The classification models need none of the C ops, so before the import we
declare the two schemas with ``torch.library`` (the same ``DEF`` the extension
would have made) and give them a kernel that raises, so that the fake-kernel
registrations find their operators. Installed packages are left untouched.
A torchvision whose extension does load is imported as it is.
"""
import functools
import importlib.util

# NOTE: the Library object must stay alive for the schemas to stay defined.
_SHIM_LIBRARY = []

_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}


def _extension_loads():
    """Whether torchvision's C extension loads beside this torch (then no shim is needed)."""
    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return True  # not installed: let the import raise its own ImportError
    import glob
    import os

    for path in glob.glob(os.path.join(spec.submodule_search_locations[0], "_C*.so")):
        try:
            torch.ops.load_library(path)
            return True
        except (OSError, RuntimeError):
            return False
    return False


def _unavailable(name):
    def kernel(*args, **kwargs):
        raise RuntimeError(
            f"torchvision::{name} is unavailable: torchvision's C extension does not load beside this "
            f"torch (a CUDA torchvision wheel beside a CPU torch); the classification models do not need it")
    return kernel


@functools.cache
def import_torchvision():
    """Import and return ``torchvision``, declaring its C op schemas first when its extension cannot load."""
    import torch

    if not _extension_loads():
        library = torch.library.Library("torchvision", "DEF")
        for name, schema in _SCHEMAS.items():
            library.define(schema)
            library.impl(name, _unavailable(name), "CompositeExplicitAutograd")
        _SHIM_LIBRARY.append(library)
    import torchvision

    return torchvision
