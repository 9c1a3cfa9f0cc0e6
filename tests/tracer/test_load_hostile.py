"""`fxkit.load` on files written to hurt: bombs, FIFOs, forged specs and damaged entries.

Every failure must be an fxkit error naming the entry, come before the memory is
taken, and never block.
"""
import json
import os
import struct
import sys
import threading
import zipfile

import numpy as np
import pytest

import fxkit
from fxkit import nn
from tests.tracer.paths import assert_same


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x).relu()


def _saved(tmp_path, name="m"):
    fxkit.save(fxkit.symbolic_trace(Small()), tmp_path / name)
    return tmp_path / name


def _rewrite(path, name, edit):
    file = path / name
    doc = json.loads(file.read_text())
    edit(doc)
    file.write_text(json.dumps(doc))


def _zip_of(directory, target, replace=None):
    """``directory``'s files as a zip at ``target``; ``replace`` maps names to (bytes or a writer)."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in ("graph.json", "modules.json", "weights.npz", "code.py"):
            content = (replace or {}).get(name)
            if callable(content):
                with zf.open(name, "w") as f:
                    content(f)
            else:
                zf.writestr(name, content if content is not None else (directory / name).read_bytes())
    return target


# -- memory bounded relative to size ------------------------------------------------------------------
def test_a_zip_bomb_graph_json_is_refused_before_it_inflates(tmp_path):
    saved = _saved(tmp_path)
    text = (saved / "graph.json").read_bytes()

    def padded(f):  # JSON allows any whitespace: 8 MB of spaces deflate to a few KB
        f.write(text[:-1])
        for _ in range(8):
            f.write(b" " * (1 << 20))
        f.write(text[-1:])

    bomb = _zip_of(saved, tmp_path / "bomb.zip", {"graph.json": padded})
    assert bomb.stat().st_size < 100_000
    with pytest.raises(fxkit.ResourceLimitError, match=r"graph.json \(inflates to 8.4 MB from .* KB\) would take "
                                                       r".* more than the 64.0 MB this file may make load allocate "
                                                       r".*pass fxkit.load\(path, max_bytes=N\)"):
        fxkit.load(bomb)
    x = fxkit.randn(2, 4)
    assert_same(fxkit.load(bomb, max_bytes=1 << 30)(x), fxkit.load(saved)(x))


@pytest.mark.slow
def test_a_zip_bomb_weight_is_refused_before_it_inflates(tmp_path):
    saved = _saved(tmp_path)

    def zeros_npz(f):  # one deflated member of 96 MB of zeros: about 100 KB on disk
        with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as npz, npz.open("arr_0.npy", "w", force_zip64=True) as m:
            np.lib.format.write_array_header_1_0(m, {"descr": "<f4", "fortran_order": False, "shape": (24 << 20,)})
            for _ in range(96):
                m.write(bytes(1 << 20))

    bomb = _zip_of(saved, tmp_path / "bomb.zip", {"weights.npz": zeros_npz})
    assert bomb.stat().st_size < 1_000_000
    with pytest.raises(fxkit.ResourceLimitError, match=r"weights.npz member arr_0 \('fc.weight'\) would take 100.7 MB"):
        fxkit.load(bomb)


def test_an_npz_header_larger_than_its_data_is_refused(tmp_path):
    saved = _saved(tmp_path)
    with zipfile.ZipFile(saved / "weights.npz", "w") as npz, npz.open("arr_0.npy", "w") as m:
        np.lib.format.write_array_header_1_0(m, {"descr": "<f4", "fortran_order": False, "shape": (20000, 20000)})
        m.write(bytes(64))
    with pytest.raises(fxkit.GraphError, match=r"weights.npz member arr_0.npy \('fc.weight'\) declares shape "
                                               r"\(20000, 20000\) of float32 \(1600000000 bytes\) but holds 64 bytes"):
        fxkit.load(saved)


def test_a_forged_layer_size_is_refused_before_it_is_allocated(tmp_path):
    saved = _saved(tmp_path)
    _rewrite(saved, "modules.json", lambda d: d["fc"]["kwargs"].update(in_features=20000, out_features=20000))
    with pytest.raises(fxkit.ResourceLimitError, match=r"module 'fc' \(Linear\) would allocate 1.6 GB \(empty\(20000, "
                                                       r"20000\) takes 1.6 GB\), more than the 1.0 MB allowed by its 2 "
                                                       r"saved weights; the file is damaged or forged"):
        fxkit.load(saved)
    with pytest.raises(fxkit.ResourceLimitError, match=r"module 'fc' \(Linear\) would allocate 1.6 GB .* more than "
                                                       r"the 100.0 MB allowed by max_bytes=100000000"):
        fxkit.load(saved, max_bytes=100_000_000)


def test_max_bytes_must_be_a_positive_int(tmp_path):
    with pytest.raises(fxkit.GraphError, match=r"max_bytes must be a positive int \(bytes\), got -1"):
        fxkit.load(_saved(tmp_path), max_bytes=-1)


# -- files that are not regular ----------------------------------------------------------------------
def _load_in_thread(path, fifo):
    """``load(path)``'s exception, or a failure when it blocks (``fifo`` is then opened to free the thread)."""
    result = []
    thread = threading.Thread(target=lambda: result.append(_raised(path)), daemon=True)
    thread.start()
    thread.join(10)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(10)
        pytest.fail(f"fxkit.load({path}) blocked on a FIFO")
    return result[0]


def _raised(path):
    try:
        fxkit.load(path)
    except Exception as exc:  # noqa: BLE001  (the test inspects it)
        return exc
    return None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_named_graph_json_is_refused_without_blocking(tmp_path):
    saved = _saved(tmp_path)
    (saved / "graph.json").unlink()
    os.mkfifo(saved / "graph.json")
    exc = _load_in_thread(saved, saved / "graph.json")
    assert isinstance(exc, fxkit.GraphError), exc
    assert "graph.json is a FIFO, not a regular file" in str(exc)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_given_as_the_path_is_refused(tmp_path):
    os.mkfifo(tmp_path / "model.zip")
    with pytest.raises(fxkit.GraphError, match=r"model.zip is a FIFO, neither a directory nor a zip file"):
        fxkit.load(tmp_path / "model.zip")


def test_a_directory_named_graph_json_is_refused(tmp_path):
    saved = _saved(tmp_path)
    (saved / "graph.json").unlink()
    (saved / "graph.json").mkdir()
    with pytest.raises(fxkit.GraphError, match=r"graph.json is a directory, not a regular file"):
        fxkit.load(saved)


# -- damaged entries: fxkit errors naming the entry --------------------------------------------------
def _patch_local_header(path, name, offset, fmt, value):
    """Overwrite a field of ``name``'s local header in the zip at ``path``."""
    with zipfile.ZipFile(path) as zf:
        start = zf.getinfo(name).header_offset
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, start + offset, value)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage, message", [
    ("deflate", r"the zip entry graph.json cannot be read \(error: Error -3 while decompressing"),
    ("method", r"the zip entry graph.json cannot be read \(NotImplementedError: That compression method"),
    ("encrypted", r"the zip entry graph.json cannot be read \(RuntimeError: File .* is encrypted"),
])
def test_damaged_zip_entries_are_named(tmp_path, damage, message):
    saved = _saved(tmp_path)
    bundle = _zip_of(saved, tmp_path / "m.zip")
    with zipfile.ZipFile(bundle) as zf:
        info = zf.getinfo("graph.json")
    if damage == "deflate":
        data = bytearray(bundle.read_bytes())
        body = info.header_offset + 30 + len(info.filename) + len(info.extra)
        data[body:body + 8] = b"\xff" * 8
        bundle.write_bytes(bytes(data))
    if damage == "method":  # both headers name an unknown method
        _patch_local_header(bundle, "graph.json", 8, "<H", 99)
        data = bytearray(bundle.read_bytes())
        for start in range(len(data)):
            if data[start:start + 4] == b"PK\x01\x02" and data[start + 46:start + 56] == b"graph.json":
                central = start
        struct.pack_into("<H", data, central + 10, 99)
        bundle.write_bytes(bytes(data))
    if damage == "encrypted":
        data = bytearray(bundle.read_bytes())
        for start in range(len(data)):
            if data[start:start + 4] == b"PK\x01\x02" and data[start + 46:start + 56] == b"graph.json":
                struct.pack_into("<H", data, start + 8, info.flag_bits | 1)
        bundle.write_bytes(bytes(data))
    with pytest.raises(fxkit.GraphError, match=message):
        fxkit.load(bundle)


def test_json_nested_too_deeply_is_a_graph_error(tmp_path):
    saved = _saved(tmp_path)
    (saved / "modules.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(fxkit.GraphError, match=r"modules.json is nested too deeply; the file is damaged"):
        fxkit.load(saved)


# -- what loading may reach and build --------------------------------------------------------------
def test_loading_imports_no_module(tmp_path, monkeypatch):
    """``fxkit.onnx`` is imported on first access; a name in a file must not trigger it."""
    monkeypatch.delitem(sys.modules, "fxkit.interop.onnx_export", raising=False)
    saved = _saved(tmp_path)
    _rewrite(saved, "graph.json", lambda d: next(n for n in d["nodes"] if n["name"] == "relu").update(
        target={"$function": "fxkit.onnx.export"}))
    with pytest.raises(fxkit.GraphError, match=r"calls function 'fxkit.onnx.export', which is no function of fxkit"):
        fxkit.load(saved)
    assert "fxkit.interop.onnx_export" not in sys.modules


def test_a_bare_module_class_is_refused_at_load(tmp_path):
    saved = _saved(tmp_path)
    _rewrite(saved, "modules.json", lambda d: d["fc"].update({"class": "Module", "kwargs": {}}))
    with pytest.raises(fxkit.GraphError, match=r"module 'fc' is a bare Module, which has no forward to call"):
        fxkit.load(saved)


def test_kwargs_keys_that_are_not_names_are_refused_at_load(tmp_path):
    saved = _saved(tmp_path)
    _rewrite(saved, "graph.json", lambda d: next(n for n in d["nodes"] if n["name"] == "relu").update(
        kwargs={"$dict": [[1, 2]]}))
    with pytest.raises(fxkit.GraphError, match=r"node %relu has args .* and kwargs \{1: 2\}; a node's args are a "
                                               r"tuple and its kwargs a dict of names"):
        fxkit.load(saved)
    _rewrite(saved, "modules.json", lambda d: d["fc"].update(kwargs=[4, 3]))
    with pytest.raises(fxkit.GraphError, match=r"module 'fc': its constructor arguments must be a dict of names"):
        fxkit.load(saved)


@pytest.mark.parametrize("name", ["code", "_graph", "forward", "graph", "recompile"])
def test_submodules_and_buffers_named_like_graph_module_fields_are_refused(name):
    class Clash(nn.Module):
        def __init__(self):
            super().__init__()
            self._modules[name] = nn.Linear(2, 2)  # forward and recompile clash with methods on add_module
            self._buffers["b_" + name] = fxkit.ones(2)

        def forward(self, x):
            return self._modules[name](x)

    with pytest.raises(fxkit.GraphError, match=rf"reads a submodule, parameter or buffer named '{name}', which is "
                                               rf"a field of GraphModule itself"):
        fxkit.symbolic_trace(Clash())
    gm = fxkit.symbolic_trace(Small())
    with pytest.raises(fxkit.GraphError, match=rf"adding a submodule, parameter or buffer named '{name}'"):
        gm.add_submodule(f"{name}.inner", nn.ReLU())


def test_a_buffer_named_forward_is_refused_at_registration():
    with pytest.raises(KeyError, match=r"buffer name 'forward': attribute 'forward' already exists on Linear"):
        nn.Linear(2, 2).register_buffer("forward", fxkit.ones(2))


@pytest.mark.parametrize("scalar", [["O", 1], ["V1000000000", 1], ["<U5", "x"], ["(100000,100000)f8", 1], [1, 2]])
def test_numpy_scalars_of_odd_dtypes_are_refused(tmp_path, scalar):
    saved = _saved(tmp_path)
    _rewrite(saved, "graph.json", lambda d: next(n for n in d["nodes"] if n["name"] == "relu").update(
        kwargs={"$dict": [["inplace", {"$scalar": scalar}]]}))
    with pytest.raises(fxkit.GraphError, match=r"holds a numpy scalar of .*; fxkit.save writes only numbers of "
                                               r"numeric dtypes"):
        fxkit.load(saved)
