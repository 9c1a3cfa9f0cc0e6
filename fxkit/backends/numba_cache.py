"""Generated numba kernels, compiled once: in memory by source, on disk through numba's cache.

Each kernel module's source is written to ``<cache dir>/kernel_<hash>.py``
(the hash covers the source, the numba version and the kernel helpers) and
imported from there, so its ``@numba.njit(cache=True)`` functions keep their
machine code in numba's on-disk cache next to it: a second process that
generates the same source loads the compiled code instead of compiling
(numba's ``dispatcher.stats.cache_hits`` counts it). A file is never
rewritten once it exists: numba's cache index is keyed by the file's
modification time.

The cache directory is ``$FXKIT_CACHE_DIR/numba`` when that variable is set,
else ``$XDG_CACHE_HOME/fxkit/numba`` (``~/.cache/fxkit/numba``); when it cannot
be written, a directory under the system's temporary directory is used.
"""
import functools
import hashlib
import importlib.util
import inspect
import os
import sys
import tempfile
from pathlib import Path

import numba

from fxkit.backends import numba_math

_MODULES = {}


def cache_dir():
    """The directory kernel modules and numba's cache files are written to (created if missing)."""
    root = os.environ.get("FXKIT_CACHE_DIR")
    if root:
        base = Path(root)
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fxkit"
    directory = base / "numba"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if os.access(directory, os.W_OK):
            return directory
    except OSError:
        pass
    fallback = Path(tempfile.gettempdir()) / f"fxkit-numba-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


@functools.lru_cache(maxsize=1)
def _salt():
    """What besides the source decides the compiled code: numba's version and the helpers kernels call."""
    return f"numba {numba.__version__}\n{inspect.getsource(numba_math)}\n"


def source_digest(source):
    """The hash naming a kernel module's file."""
    return hashlib.sha256((_salt() + source).encode()).hexdigest()[:24]


def load_kernel_module(source):
    """The imported module of a generated kernel source, compiled at most once a process.

    Args:
        source: the module text (`fxkit.codegen.numba_kernel.KernelSource.source`).

    Returns:
        The module; its ``kernel`` (and ``kernel_strided``) are numba dispatchers.
    """
    digest = source_digest(source)
    module = _MODULES.get(digest)
    if module is None:
        module = _MODULES[digest] = _import(digest, source)
    return module


def _import(digest, source):
    path = cache_dir() / f"kernel_{digest}.py"
    if not path.exists() or path.read_text() != source:
        # NOTE: written whole and renamed, so a concurrent process never imports half a file.
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_text(source)
        os.replace(partial, path)
    name = f"fxkit_kernel_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
