"""Observers against ``torch.ao.quantization``'s on the same batches: the same scale (float32)
and zero point; the histogram observer's ranges by their quantization error."""
import warnings

import numpy as np
import pytest

import fxkit
from fxkit.errors import DTypeError, ShapeError
from fxkit.transforms.quantize import (HistogramObserver, MinMaxObserver, MovingAverageMinMaxObserver,
                                       PerChannelMinMaxObserver)


@pytest.fixture
def torch():
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield torch


def _batches(rng, shape=(32, 20), count=4):
    return [(rng.standard_normal(shape) * rng.uniform(0.5, 3) + rng.uniform(-1, 1)).astype(np.float32)
            for _ in range(count)]


def _run_both(ours, theirs, batches, torch):
    for batch in batches:
        ours(fxkit.from_numpy(batch))
        theirs(torch.from_numpy(batch))
    scale, zero_point = ours.calculate_qparams()
    t_scale, t_zero_point = theirs.calculate_qparams()
    np.testing.assert_array_equal(np.asarray(scale, np.float32), t_scale.numpy().reshape(np.shape(scale)))
    np.testing.assert_array_equal(np.asarray(zero_point), t_zero_point.numpy().reshape(np.shape(zero_point)))


SCHEMES = [("per_tensor_affine", "int8", False), ("per_tensor_symmetric", "int8", False),
           ("per_tensor_affine", "uint8", False), ("per_tensor_symmetric", "uint8", False),
           ("per_tensor_affine", "uint8", True), ("per_tensor_affine", "int8", True)]


@pytest.mark.parametrize("qscheme, dtype, reduce_range", SCHEMES)
def test_min_max_matches_torch(torch, rng, qscheme, dtype, reduce_range):
    from torch.ao.quantization.observer import MinMaxObserver as TorchMinMax

    ours = MinMaxObserver(dtype=getattr(fxkit, dtype), qscheme=qscheme, reduce_range=reduce_range)
    theirs = TorchMinMax(dtype=torch.qint8 if dtype == "int8" else torch.quint8, qscheme=getattr(torch, qscheme),
                         reduce_range=reduce_range)
    _run_both(ours, theirs, _batches(rng), torch)


@pytest.mark.parametrize("qscheme, dtype, reduce_range", SCHEMES[:3])
def test_moving_average_matches_torch(torch, rng, qscheme, dtype, reduce_range):
    from torch.ao.quantization.observer import MovingAverageMinMaxObserver as TorchMovingAverage

    ours = MovingAverageMinMaxObserver(averaging_constant=0.1, dtype=getattr(fxkit, dtype), qscheme=qscheme)
    theirs = TorchMovingAverage(averaging_constant=0.1, dtype=torch.qint8 if dtype == "int8" else torch.quint8,
                                qscheme=getattr(torch, qscheme))
    _run_both(ours, theirs, _batches(rng, count=6), torch)


@pytest.mark.parametrize("qscheme", ["per_channel_symmetric", "per_channel_affine"])
@pytest.mark.parametrize("ch_axis", [0, 1])
def test_per_channel_matches_torch(torch, rng, qscheme, ch_axis):
    from torch.ao.quantization.observer import PerChannelMinMaxObserver as TorchPerChannel

    ours = PerChannelMinMaxObserver(ch_axis=ch_axis, dtype=fxkit.int8, qscheme=qscheme)
    theirs = TorchPerChannel(ch_axis=ch_axis, dtype=torch.qint8, qscheme=getattr(torch, qscheme))
    _run_both(ours, theirs, _batches(rng, shape=(6, 5, 3, 3), count=3), torch)


def _quantization_mse(data, scale, zero_point, qmin=-128, qmax=127):
    q = np.clip(np.rint(data / scale + zero_point), qmin, qmax)
    return float(np.mean(((q - zero_point) * scale - data) ** 2))


def test_histogram_mse_error_is_no_worse_than_torchs(torch, rng):
    from torch.ao.quantization.observer import HistogramObserver as TorchHistogram

    batches = [rng.standard_t(2, 4000).astype(np.float32) for _ in range(3)]  # heavy tails
    data = np.concatenate(batches)
    ours = HistogramObserver(dtype=fxkit.int8, method="mse")
    theirs = TorchHistogram(dtype=torch.qint8)
    minmax = MinMaxObserver(dtype=fxkit.int8)
    for batch in batches:
        ours(fxkit.from_numpy(batch))
        theirs(torch.from_numpy(batch))
        minmax(fxkit.from_numpy(batch))
    ours_error = _quantization_mse(data, *ours.calculate_qparams())
    t_scale, t_zero_point = theirs.calculate_qparams()
    torch_error = _quantization_mse(data, float(t_scale), int(t_zero_point))
    assert ours_error <= 1.02 * torch_error, (ours_error, torch_error)
    assert ours_error <= _quantization_mse(data, *minmax.calculate_qparams())


def test_histogram_percentile_keeps_the_chosen_share(rng):
    data = rng.standard_normal(20000).astype(np.float32)
    observer = HistogramObserver(dtype=fxkit.int8, method="percentile", percentile=99.0)
    observer(fxkit.from_numpy(data[:10000]))
    observer(fxkit.from_numpy(data[10000:] * 1.5))  # widens the range: the histogram is re-binned
    low, high = observer.clipping_range()
    combined = np.concatenate([data[:10000], data[10000:] * 1.5])
    bin_width = (combined.max() - combined.min()) / observer.bins
    np.testing.assert_allclose([low, high], np.percentile(combined, [1, 99]), atol=3 * bin_width)


def test_calibrated_only_after_data_and_disabled_observers_record_nothing(rng):
    observer = MinMaxObserver()
    assert not observer.calibrated
    observer.enabled = False
    x = fxkit.from_numpy(rng.standard_normal(5).astype(np.float32))
    assert observer(x) is x
    assert not observer.calibrated
    observer.enabled = True
    observer(x)
    assert observer.calibrated


def test_observer_arguments_are_checked_when_configured():
    with pytest.raises(DTypeError, match=r"MinMaxObserver: dtype fxkit.int16 is not supported for quantized values; "
                                         r"use fxkit.int8 or fxkit.uint8"):
        MinMaxObserver.with_args(dtype=fxkit.int16)
    with pytest.raises(DTypeError, match="MinMaxObserver: qscheme 'per_channel_affine' is not supported; use one of "
                                         "per_tensor_affine, per_tensor_symmetric"):
        MinMaxObserver(qscheme="per_channel_affine")
    with pytest.raises(ShapeError, match="HistogramObserver: method must be 'mse' or 'percentile', got 'kl'"):
        HistogramObserver(method="kl")
    with pytest.raises(ShapeError, match=r"quant_min=-200, quant_max=100 must satisfy -128 <= quant_min < quant_max "
                                         r"<= 127 for int8"):
        MinMaxObserver(quant_min=-200, quant_max=100)
