"""Bad quantization configurations fail with a clear error before anything runs: an observer
never calibrated, a qconfig naming a missing module, an unsupported dtype or scheme, the
wrong mode or qconfig kind, calibration batches that do not fit the model."""
import numpy as np
import pytest

import fxkit
import fxkit.models  # noqa: F401  (fxkit.models.MLP)
from fxkit.errors import DTypeError, GraphError
from fxkit.transforms.quantize import (FakeQuantize, MinMaxObserver, PerChannelMinMaxObserver, QConfig,
                                       QConfigMapping, calibrate, convert, default_qat_qconfig, default_qconfig,
                                       prepare, prepare_qat)


@pytest.fixture
def mlp():
    return fxkit.models.MLP(8, (16,), 4).eval()


def test_convert_before_calibrate_names_every_observer_and_changes_nothing(mlp):
    prepared = prepare(mlp)
    before = str(prepared.graph)
    with pytest.raises(GraphError) as info:
        convert(prepared)
    message = str(info.value)
    assert message.startswith("convert: 3 observer(s) never saw data: %activation_post_process_0 (observes "
                              "%flatten at ")
    assert "%activation_post_process_2 (observes %head at " in message and "mlp.py" in message
    assert "hint: run calibrate(prepared, data) with representative inputs before convert" in message
    assert str(prepared.graph) == before


def test_one_uncalibrated_observer_is_enough_to_refuse(mlp, rng):
    prepared = prepare(mlp)
    calibrate(prepared, [fxkit.from_numpy(rng.standard_normal((4, 8)).astype(np.float32))], progress=False)
    prepared.activation_post_process_1.min_val._data[...] = np.inf  # as if it had seen nothing
    with pytest.raises(GraphError, match=r"convert: 1 observer\(s\) never saw data: %activation_post_process_1 "
                                         r"\(observes %relu at "):
        convert(prepared)


def test_qconfig_naming_a_missing_module_is_refused(mlp):
    mapping = QConfigMapping().set_global(default_qconfig).set_module_name("layers.3", None)
    with pytest.raises(GraphError, match=r"prepare: the qconfig mapping names module 'layers.3', which the model "
                                         r"does not have; did you mean layers.0"):
        prepare(mlp, mapping)
    with pytest.raises(GraphError, match="prepare_qat: the qconfig mapping names module 'haed'.*did you mean head"):
        prepare_qat(mlp, {"": default_qat_qconfig, "module_name": [("haed", None)]})


def test_unsupported_dtypes_and_schemes_are_refused_when_configured():
    with pytest.raises(DTypeError, match=r"MinMaxObserver: dtype fxkit.float16 is not supported for quantized "
                                         r"values; use fxkit.int8 or fxkit.uint8"):
        QConfig(activation=MinMaxObserver.with_args(dtype=fxkit.float16), weight=MinMaxObserver)
    with pytest.raises(DTypeError, match=r"PerChannelMinMaxObserver: dtype 'int4' is not supported"):
        PerChannelMinMaxObserver.with_args(dtype="int4")
    with pytest.raises(DTypeError, match="QConfig: activations are quantized per tensor, but the activation observer "
                                         "uses per_channel_symmetric"):
        QConfig(activation=PerChannelMinMaxObserver, weight=MinMaxObserver)
    with pytest.raises(DTypeError, match=r"QConfig: the weight factory .* built a Linear, not an observer"):
        QConfig(activation=MinMaxObserver, weight=lambda: fxkit.nn.Linear(2, 2))
    with pytest.raises(DTypeError, match="QConfigMapping.set_object_type: expected an fxkit.nn module class or an op"):
        QConfigMapping().set_object_type("Linear", default_qconfig)
    with pytest.raises(DTypeError, match="prepare: qconfig_map must be None, a QConfig, a QConfigMapping or a dict, "
                                         "got list"):
        prepare(fxkit.models.MLP(8, (4,), 2).eval(), [default_qconfig])


def test_wrong_mode_or_qconfig_kind_is_refused(mlp):
    with pytest.raises(GraphError, match=r"prepare: the model is in training mode; post-training quantization "
                                         r"observes an eval-mode model \(call model.eval\(\) first\)"):
        prepare(mlp.train())
    with pytest.raises(GraphError, match="prepare: .* builds fake quantizers, which are for quantization-aware "
                                         "training; use prepare_qat"):
        prepare(mlp.eval(), default_qat_qconfig)
    with pytest.raises(GraphError, match="prepare_qat: .* builds observers, which do not train; use a qconfig with "
                                         "FakeQuantize"):
        prepare_qat(mlp, default_qconfig)
    with pytest.raises(TypeError, match="FakeQuantize: observer must build an observer"):
        FakeQuantize(observer=fxkit.nn.ReLU)


def test_calibration_batches_must_fit_the_model(mlp, rng):
    prepared = prepare(mlp)
    x = fxkit.from_numpy(rng.standard_normal((4, 8)).astype(np.float32))
    y = fxkit.tensor([0, 1, 2, 3])
    with pytest.raises(GraphError, match=r"calibrate: batch 0 holds 2 items, but the model takes 1 argument\(s\) "
                                         r"\(x\); pass only the inputs, e.g. \(images for images, labels in loader\)"):
        calibrate(prepared, [(x, y)], progress=False)
    with pytest.raises(GraphError, match="calibrate: batch 0 is a ndarray; expected a Tensor or a tuple of Tensors"):
        calibrate(prepared, [x.numpy()], progress=False)
