"""Model specs and ``--input`` texts, in process (the subprocess tests cover the command around them)."""
import sys

import pytest

import fxkit
from fxkit.cli.model_spec import concrete, input_specs, load_model, parse_input
from fxkit.errors import DTypeError, ModelSpecError, ShapeError
from tests.cli.run import write_models


@pytest.mark.parametrize("text, expected", [
    ("1,3,224,224", (1, 3, 224, 224)),
    (" (8, 16) ", (8, 16)),
    ("[4,]", (4,)),
    ("N,3,224,224", ("N", 3, 224, 224)),
    ("0,5", (0, 5)),
    ("8,16:int64", ((8, 16), fxkit.int64)),
])
def test_parse_input(text, expected):
    assert parse_input(text) == expected


def test_parse_input_default_dtype():
    assert parse_input("2,3", fxkit.float16) == ((2, 3), fxkit.float16)
    assert parse_input("2,3:int32", fxkit.float16) == ((2, 3), fxkit.int32)


@pytest.mark.parametrize("text, message", [("1,,3", "'' is not a dimension"), ("2.5", "'2.5' is not a dimension"),
                                           ("()", "names no dimensions")])
def test_parse_input_errors(text, message):
    with pytest.raises(ShapeError, match=message):
        parse_input(text)
    with pytest.raises(DTypeError, match="unknown dtype name 'f32'"):
        parse_input("2:f32")


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    write_models(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    sys.modules.pop("my_models", None)


def test_zoo_and_shapes():
    loaded = load_model("lstm_cell")
    assert type(loaded.model).__name__ == "LSTMCell" and not loaded.model.training
    assert input_specs(loaded, []) == [(32, 128), (32, 256), (32, 256)]
    assert input_specs(loaded, ["4,128"], "float64") == [((4, 128), fxkit.float64)]


def test_module_class_factory_and_instance(user_dir):
    net = load_model("my_models:Net")
    assert net.model.fc.in_features == 16 and net.example_shapes is None
    assert input_specs(net, []) is None
    built = load_model("my_models.py:build")
    assert built.model.fc.in_features == 8 and built.example_shapes == [(3, 8)]
    instance = load_model("fxkit.models.mlp:MLP")
    assert isinstance(instance.model, fxkit.nn.Module)


def test_spec_errors(user_dir):
    with pytest.raises(ModelSpecError, match="is incomplete"):
        load_model("my_models:")
    with pytest.raises(ModelSpecError, match="build_net"):
        load_model("my_models:build_net")
    with pytest.raises(ModelSpecError, match="importing 'fxkit.errors.nothing' failed|no module named"):
        load_model("fxkit.errors.nothing:X")
    with pytest.raises(ModelSpecError, match="is a str, not an fxkit.nn.Module"):
        load_model("fxkit.errors:__doc__")


def test_concrete():
    assert concrete([(2, 3), ((4,), fxkit.int64)], "split") == [(2, 3), ((4,), fxkit.int64)]
    with pytest.raises(ShapeError, match="needs concrete sizes; got --input N,3"):
        concrete([("N", 3)], "split")
