"""Mutated save files: `fxkit.load` returns a module or raises an fxkit error, nothing else."""
import json
import zipfile

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import fxkit  # noqa: E402
from fxkit import nn  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.bn = nn.BatchNorm2d(2)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        y = self.bn(self.conv(x)).relu()
        return self.fc(y.flatten(1)[:, :8]).softmax(-1)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The files of a saved model, as ``{name: bytes}``."""
    path = tmp_path_factory.mktemp("fuzz") / "m"
    fxkit.save(fxkit.symbolic_trace(Net()), path)
    return {p.name: p.read_bytes() for p in path.iterdir()}


json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                       max_size=3),
                           max_leaves=8)
tags = st.sampled_from(["$node", "$tuple", "$dict", "$slice", "$float", "$complex", "$dtype", "$device", "$op",
                        "$scalar", "$tensor", "$function", "$target", "$location", "$ellipsis", "$bogus"])


def _paths(value, prefix=()):
    """Every path into a JSON document (list indices and dict keys)."""
    yield prefix
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, prefix + (i,))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))


def _replace(doc, path, new):
    if not path:
        return new
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = new
    return doc


def _load(tmp_path, files):
    bundle = tmp_path / "m.zip"
    with zipfile.ZipFile(bundle, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    try:
        fxkit.load(bundle)
    except fxkit.FxkitError:
        pass


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), name=st.sampled_from(["graph.json", "modules.json"]))
def test_mutated_json_gives_only_fxkit_errors(saved, tmp_path, data, name):
    doc = json.loads(saved[name])
    path = data.draw(st.sampled_from(list(_paths(doc))))
    new = data.draw(json_values | st.builds(lambda t, v: {t: v}, tags, json_values))
    files = dict(saved, **{name: json.dumps(_replace(doc, path, new)).encode()})
    _load(tmp_path, files)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), name=st.sampled_from(["graph.json", "modules.json", "weights.npz"]))
def test_mutated_bytes_give_only_fxkit_errors(saved, tmp_path, data, name):
    raw = bytearray(saved[name])
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(0, len(raw)))
        raw = raw[:cut]
    _load(tmp_path, dict(saved, **{name: bytes(raw)}))
