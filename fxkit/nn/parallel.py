"""``fxkit.nn.parallel``: the data-parallel wrappers under torch's names.

``DataParallel`` (threads over devices in one process) lives in the runtime;
``DistributedDataParallel`` and ``DistributedSampler`` live in
`fxkit.distributed`, a layer above ``fxkit.nn`` (which is the runtime's), so
they are looked up on first use instead of imported here.

Example:
    >>> from fxkit.nn.parallel import DistributedDataParallel as DDP
"""
from fxkit.runtime.nn.data_parallel import DataParallel

_DISTRIBUTED = ("DistributedDataParallel", "DistributedSampler")


def __getattr__(name):
    if name in _DISTRIBUTED:
        # NOTE: fxkit.distributed sits above the runtime (DESIGN.md layers); imported on first use.
        import fxkit.distributed

        return getattr(fxkit.distributed, name)
    raise AttributeError(f"module 'fxkit.nn.parallel' has no attribute {name!r}")


__all__ = ["DataParallel", *_DISTRIBUTED]
