"""Reading the files of a saved GraphModule without trusting them.

`fxkit.load` reads files anyone may have written, so everything it reads is
bounded and every failure is a `GraphError` naming the entry:

- only regular files are opened (a FIFO named ``graph.json`` would block the
  read forever; a directory named so raises `IsADirectoryError`);
- what the files may make `load` allocate is bounded relative to their size on
  disk (`LoadBudget`): a 1 MB zip entry that inflates to 1 GB, an ``.npz``
  member whose header declares a huge shape, a ``modules.json`` declaring
  ``Linear(20000, 20000)`` with no weights behind it are refused before the
  memory is taken, unless the caller passes a larger ``max_bytes``;
- decompression errors, encrypted entries, unknown compression methods and
  JSON nested too deeply to parse become `GraphError`\\ s.
"""
import io
import json
import math
import os
import stat
import zipfile
import zlib

import numpy as np

from fxkit.errors import GraphError, ResourceLimitError
from fxkit.runtime.alloc_limit import human_bytes

FILES = ("graph.json", "modules.json", "weights.npz", "code.py")
# NOTE: the default bound is this floor or this multiple of the size on disk, whichever is
# larger. Stored weights take about their size on disk in memory; deflated integer weights of a
# quantized model a few times more; parsed JSON up to ~20x its text (an empty dict is 64 bytes
# for 3 bytes of text), which JSON_WEIGHT charges.
FLOOR_BYTES = 64_000_000
DISK_RATIO = 16
JSON_WEIGHT = 16
_CHUNK = 1 << 20


class LoadBudget:
    """What one `load` may still allocate; every entry read is charged before it is read."""

    def __init__(self, path, size_on_disk, max_bytes=None):
        if max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes <= 0):
            raise GraphError(f"load: max_bytes must be a positive int (bytes), got {max_bytes!r}")
        self.path = path
        self.size_on_disk = size_on_disk
        self.limit = max_bytes if max_bytes is not None else max(FLOOR_BYTES, DISK_RATIO * size_on_disk)
        self.explicit = max_bytes is not None
        self.used = 0

    def hint(self):
        """How to allow more, for messages."""
        if self.explicit:
            return f"; pass a larger max_bytes= (now {self.limit}) if you trust this file"
        return (f" (by default {DISK_RATIO}x the {human_bytes(self.size_on_disk)} on disk, at least "
                f"{human_bytes(FLOOR_BYTES)}); pass fxkit.load(path, max_bytes=N) if you trust this file")

    def charge(self, nbytes, entry):
        """Count ``nbytes`` for ``entry``; refuse when the total passes the limit."""
        self.used += nbytes
        if self.used > self.limit:
            raise ResourceLimitError(f"load: {self.path}: {entry} would take {human_bytes(nbytes)} in memory, "
                                     f"more than the {human_bytes(self.limit)} this file may make load "
                                     f"allocate{self.hint()}")


def read_saved(path, max_bytes=None):
    """The four files of the save at ``path`` (a directory or a zip): JSON parsed, the rest bytes.

    Returns:
        ``(files, budget)``: ``{name: content}`` and the `LoadBudget` left for building the module.
    """
    info = _stat(path, path)
    if stat.S_ISDIR(info.st_mode):
        return _read_directory(path, max_bytes)
    if not stat.S_ISREG(info.st_mode):
        raise GraphError(f"load: {path} is {_kind(info)}, neither a directory nor a zip file written by fxkit.save")
    return _read_zip(path, max_bytes)


def _stat(path, shown):
    try:
        return os.stat(path)
    except OSError as exc:
        raise GraphError(f"load: cannot read {shown} ({exc.strerror or exc})") from None


def _kind(info):
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory")):
        if test(info.st_mode):
            return kind
    return "no regular file"


def _read_directory(path, max_bytes):
    try:
        present = set(os.listdir(path))
    except OSError as exc:
        raise GraphError(f"load: cannot list the folder {path} ({exc.strerror or exc})") from None
    _require_all(path, present)
    paths = {name: os.path.join(path, name) for name in FILES}
    infos = {name: _stat(p, p) for name, p in paths.items()}
    for name, info in infos.items():
        if not stat.S_ISREG(info.st_mode):
            raise GraphError(f"load: {paths[name]} is {_kind(info)}, not a regular file; fxkit.save writes "
                             f"{name} as a plain file")
    budget = LoadBudget(path, sum(info.st_size for info in infos.values()), max_bytes)
    files = {}
    for name, p in paths.items():
        # NOTE: O_NONBLOCK and fstat on the opened file: a file swapped for a FIFO after the
        # stat above is still refused, not read forever.
        try:
            fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except OSError as exc:
            raise GraphError(f"load: cannot read {p} ({exc.strerror or exc})") from None
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise GraphError(f"load: {p} is {_kind(info)}, not a regular file")
            budget.charge(_weight(name, info.st_size), name)
            try:
                files[name] = _bounded_read(f, info.st_size, budget, name)
            except OSError as exc:
                raise GraphError(f"load: cannot read {p} ({exc.strerror or exc})") from None
    return _parse(path, files, budget), budget


def _read_zip(path, max_bytes):
    try:
        with zipfile.ZipFile(path) as zf:
            entries = {}
            for entry in zf.infolist():
                if entry.filename in FILES and entry.filename not in entries:
                    entries[entry.filename] = entry
            _require_all(path, set(entries))
            budget = LoadBudget(path, sum(e.compress_size for e in entries.values()), max_bytes)
            files = {}
            for name, entry in entries.items():
                # NOTE: zipfile never returns more than the declared file_size, so charging it
                # bounds what the entry inflates to, however well it compresses.
                budget.charge(_weight(name, entry.file_size), f"{name} (inflates to {human_bytes(entry.file_size)} "
                                                              f"from {human_bytes(entry.compress_size)})")
                files[name] = _read_entry(path, zf, entry, budget)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        raise GraphError(f"load: {path} is neither a directory nor a zip file written by fxkit.save "
                         f"({type(exc).__name__}: {exc})") from None
    return _parse(path, files, budget), budget


def _read_entry(path, zf, entry, budget):
    try:
        with zf.open(entry) as f:
            return _bounded_read(f, entry.file_size, budget, entry.filename)
    except (zlib.error, zipfile.BadZipFile, EOFError, NotImplementedError, RuntimeError, ValueError) as exc:
        # NOTE: zlib.error: damaged deflate data; NotImplementedError: a compression method
        # zipfile lacks; RuntimeError: an encrypted entry; BadZipFile: a CRC mismatch.
        raise GraphError(f"load: {path}: the zip entry {entry.filename} cannot be read ({type(exc).__name__}: "
                         f"{exc}); the file is damaged or was not written by fxkit.save") from None


def _bounded_read(f, declared, budget, name):
    """At most ``declared`` bytes of ``f``; more means the file grew or lied about its size."""
    chunks, total = [], 0
    while True:
        chunk = f.read(min(_CHUNK, declared + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > declared:
            raise GraphError(f"load: {budget.path}: {name} holds more than the {declared} bytes it declares; "
                             f"the file changed while being read or is damaged")
    return b"".join(chunks)


def _weight(name, nbytes):
    return nbytes * JSON_WEIGHT if name.endswith(".json") else nbytes


def _require_all(path, present):
    missing = [name for name in FILES if name not in present]
    if missing:
        raise GraphError(f"load: {path} lacks {', '.join(missing)}; fxkit.save writes {', '.join(FILES)}, "
                         f"so it was not written by fxkit.save or was damaged")


def _parse(path, files, budget):
    for name in ("graph.json", "modules.json"):
        try:
            files[name] = json.loads(files[name])
        except (ValueError, RecursionError) as exc:
            what = "nested too deeply" if isinstance(exc, RecursionError) else f"no valid JSON ({exc})"
            raise GraphError(f"load: {path}: {name} is {what}; the file is damaged") from None
    return files


def read_weights(data, names, budget):
    """The arrays of ``weights.npz`` (bytes) as ``{qualified name: array}``, ``arr_<i>`` for ``names[i]``.

    Each member's ``.npy`` header is read first: object dtypes (which only pickles
    can fill) and shapes larger than the member's bytes are refused before any
    array is allocated.
    """
    if type(names) is not list or not all(type(n) is str for n in names):
        raise GraphError(f"load: {budget.path}: graph.json's 'weights' must be a list of names, got "
                         f"{names!r:.80}")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as npz:
            members = {entry.filename: entry for entry in npz.infolist()}
            out = {}
            for i, name in enumerate(names):
                member = members.get(f"arr_{i}.npy")
                if member is None:
                    raise GraphError(f"load: {budget.path}: weights.npz lacks arr_{i} (the weight {name!r} that "
                                     f"graph.json lists); the file is damaged")
                budget.charge(member.file_size, f"weights.npz member arr_{i} ({name!r})")
                out[name] = _read_array(npz, member, name, budget)
            return out
    except GraphError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, OSError) as exc:
        raise GraphError(f"load: {budget.path}: weights.npz is damaged ({type(exc).__name__}: {exc})") from None


def _read_array(npz, member, name, budget):
    entry = f"weights.npz member {member.filename} ({name!r})"
    with npz.open(member) as f:
        raw = _bounded_read(f, member.file_size, budget, entry)
    stream = io.BytesIO(raw)
    try:
        version = np.lib.format.read_magic(stream)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read_header is None:
            raise ValueError(f".npy version {version} (fxkit.save writes 1.0)")
        shape, fortran, dtype = read_header(stream)
    except (ValueError, SyntaxError, TypeError, KeyError, OverflowError) as exc:
        raise GraphError(f"load: {budget.path}: {entry} has no valid .npy header ({exc})") from None
    if dtype.hasobject:
        raise GraphError(f"load: {budget.path}: {entry} holds Python objects (dtype {dtype}), which only "
                         f"unpickling could read; fxkit never unpickles, so such files cannot be loaded")
    if any(d < 0 for d in shape):
        raise GraphError(f"load: {budget.path}: {entry} declares the negative shape {shape}; the file is damaged")
    payload = len(raw) - stream.tell()
    if math.prod(shape) * dtype.itemsize != payload:
        raise GraphError(f"load: {budget.path}: {entry} declares shape {shape} of {dtype} "
                         f"({math.prod(shape) * dtype.itemsize} bytes) but holds {payload} bytes; the file is damaged")
    array = np.frombuffer(raw, dtype=dtype, offset=stream.tell())
    if fortran:
        return array.reshape(shape[::-1]).T.copy()
    return array.reshape(shape).copy()
