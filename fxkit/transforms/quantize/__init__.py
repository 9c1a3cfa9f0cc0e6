"""Quantization as graph passes: `prepare` -> `calibrate` -> `convert`, and `prepare_qat`.

Post-training quantization of a float model to int8::

    from fxkit.transforms.quantize import prepare, calibrate, convert
    prepared = prepare(fxkit.symbolic_trace(model.eval()))   # observers after activations
    calibrate(prepared, batches)                            # they record value ranges
    quantized = convert(prepared)                           # int8 weights, integer kernels

Quantization-aware training trains `prepare_qat`'s fake-quantized model with
fxkit autograd before the same `convert`. `QConfig` and `QConfigMapping` say
which observers watch which layers (`default_qconfig`: int8 everywhere;
`per_channel_histogram_qconfig`: the most accurate for convolutional networks).
`round_weights` (GPTQ) and `correct_bias`, between `calibrate` and `convert`,
make the int8 layers' outputs move less; `equalize` (cross-layer equalization)
goes between `prepare` and `calibrate`; ``convert(float_outputs=True)`` leaves
outputs only float ops read unrounded (docs/transforms/quantize.md).
"""
from fxkit.transforms.quantize.bias_correction import correct_bias
from fxkit.transforms.quantize.calibrate import calibrate
from fxkit.transforms.quantize.convert import ConversionReport, FloatNode, QParams, convert
from fxkit.transforms.quantize.dynamic import quantize_dynamic
from fxkit.transforms.quantize.equalize import EqualizedPair, equalize
from fxkit.transforms.quantize.fake_quantize import FakeQuantize, fake_quantize
from fxkit.transforms.quantize.observers import (HistogramObserver, MinMaxObserver, MovingAverageMinMaxObserver,
                                                 ObserverBase, PerChannelMinMaxObserver)
from fxkit.transforms.quantize.prepare import prepare
from fxkit.transforms.quantize.qat import enable_fake_quant, enable_observer, prepare_qat
from fxkit.transforms.quantize.qconfig import (QConfig, QConfigMapping, default_qat_qconfig, default_qconfig,
                                               per_channel_histogram_qconfig, per_channel_qat_qconfig,
                                               per_channel_qconfig, x86_per_channel_qconfig, x86_qconfig)
from fxkit.transforms.quantize.round_weights import round_weights

__all__ = ["ConversionReport", "EqualizedPair", "FakeQuantize", "FloatNode", "HistogramObserver", "MinMaxObserver",
           "MovingAverageMinMaxObserver", "ObserverBase", "PerChannelMinMaxObserver", "QConfig", "QConfigMapping",
           "QParams", "calibrate", "convert", "correct_bias", "default_qat_qconfig", "default_qconfig",
           "enable_fake_quant", "enable_observer", "equalize", "fake_quantize", "per_channel_histogram_qconfig",
           "per_channel_qat_qconfig", "per_channel_qconfig", "prepare", "prepare_qat", "quantize_dynamic",
           "round_weights", "x86_per_channel_qconfig", "x86_qconfig"]
