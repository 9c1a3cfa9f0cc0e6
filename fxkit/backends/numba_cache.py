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
be created or written, ``<tmpdir>/fxkit-numba-<uid>`` is used.

NOTE: numba reads its index files with ``pickle`` and this module imports the
``.py`` files it finds there, so whoever can write the cache directory runs code
in this process. Directories are created ``0700`` and, on every use, must be
owned by this user and writable by nobody else (the temporary one: no access
for anybody else at all), in a parent nobody else can rename them out of. A
directory that fails is refused with a `CacheDirWarning`, and kernels are then
compiled in a fresh private directory of this process (removed at exit): no
disk cache, nothing read that another user could have written.
"""
import atexit
import functools
import hashlib
import importlib.util
import inspect
import os
import shutil
import stat
import sys
import tempfile
import warnings
from pathlib import Path

import numba

from fxkit.backends import numba_math

_MODULES = {}


class CacheDirWarning(UserWarning):
    """A kernel cache directory fxkit will not use because another user could write into it."""


def cache_dir():
    """The directory kernel modules and numba's cache files are written to, checked on every call.

    Returns the normal cache directory (created ``0700`` if missing), else the
    temporary fallback, else, with a `CacheDirWarning`, this process's private
    scratch directory (no disk cache).
    """
    root = os.environ.get("FXKIT_CACHE_DIR")
    if root:
        base = Path(root)
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fxkit"
    directory = base / "numba"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        usable = os.access(directory, os.W_OK | os.X_OK)
    except OSError:
        usable = False
    if not usable:
        directory = Path(tempfile.gettempdir()) / f"fxkit-numba-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
        try:
            directory.mkdir(mode=0o700, exist_ok=True)
        except OSError as error:
            return _refuse(directory, f"it cannot be created ({error})")
        problem = unsafe_reason(directory, private=True)
    else:
        problem = unsafe_reason(directory, private=False)
    return _refuse(directory, problem) if problem else directory


def unsafe_reason(directory, private):
    """Why another local user could write into ``directory`` (None when nobody else can).

    Args:
        directory: the cache directory (followed if a symlink: its target is what is written).
        private: demand no access at all for group and others (the shared temporary
            directory's fallback), not only no write access.
    """
    if os.name != "posix":
        return None  # NOTE: no uid or mode bits to check; the user's profile directory is private.
    uid = os.getuid()
    info = os.stat(directory)
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a directory"
    if info.st_uid != uid:
        return f"it is owned by uid {info.st_uid}, not by this user (uid {uid})"
    loose = stat.S_IMODE(info.st_mode) & (0o077 if private else 0o022)
    if loose:
        return (f"its mode is {stat.S_IMODE(info.st_mode):04o}: "
                f"{'group and others have access' if private else 'group or others can write into it'}")
    parent = os.stat(Path(directory).resolve().parent)
    if parent.st_uid not in (uid, 0):
        return f"its parent directory is owned by uid {parent.st_uid}, who can rename it and put another in its place"
    if parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX:
        return "its parent directory is writable by other users without the sticky bit: they can replace it"
    pycache = Path(directory) / "__pycache__"
    if pycache.exists():
        sub = unsafe_reason(pycache, private)
        return f"numba's __pycache__ in it: {sub}" if sub else None
    return None


def _refuse(directory, problem):
    warnings.warn(f"fxkit: not using {directory} as the numba kernel cache: {problem}. Another local user could "
                  f"put files there that this process would load (numba unpickles its cache index). Kernels "
                  f"are compiled without a disk cache. Fix: remove the directory (`rm -rf {directory}`) or "
                  f"`chmod 700` it if it is yours, or set FXKIT_CACHE_DIR to a directory only you can write.",
                  CacheDirWarning, stacklevel=4)
    return scratch_dir()


_SCRATCH = []


def scratch_dir():
    """This process's private kernel directory (``mkdtemp``: a fresh name, mode 0700), removed at exit."""
    if not _SCRATCH or not os.path.isdir(_SCRATCH[-1]):
        directory = tempfile.mkdtemp(prefix="fxkit-numba-scratch-")
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        _SCRATCH.append(directory)
    return Path(_SCRATCH[-1])


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
