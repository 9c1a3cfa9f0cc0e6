"""Static int8 on the corpus resnet18 and mobilenet_v2 (issue 14): what each post-training
technique does to top-1 agreement with float and to the logits' signal-to-noise ratio.

    python benchmarks/quantization_corpus.py                 # both models, every configuration
    python benchmarks/quantization_corpus.py --model torchvision/resnet18

The setup is tests/interop/test_imported_quantization.py's: torchvision models with random
weights made non-degenerate (tests/corpus/entry.py), imported with `fxkit.from_torch`,
calibrated on 64 random images (seeds 100..) and evaluated on 64 others (seeds 500..).

Rows, each adding to the one before unless it says otherwise:
- min/max: `per_channel_qconfig` (per-channel symmetric weights, min/max activation ranges);
- histogram: `per_channel_histogram_qconfig` (MSE-optimal activation ranges);
- + round_weights: GPTQ weight rounding (what tests/interop/test_imported_quantization.py runs);
- + correct_bias: empirical bias correction;
- round_weights + float_outputs: the round_weights row converted with ``float_outputs=True``
  (layers read only by float ops, the residual convolutions and the classifier, write float);
- equalize + round_weights: cross-layer equalization before calibration (`equalize`,
  ReLU6 pairs skipped), then the round_weights row;
- first conv float (mixed precision): the round_weights row with the first convolution float.

Two float rows bound what any int8 model can reach: the float model on its input rounded to
the calibrated int8 grid of the first observer (nothing else quantized), and with Gaussian
noise of 40 dB on its input.

Random weights leave the logits close together and amplify noise. Above the tables the script
prints the median gap between the two largest float logits and the spread of the logits
across images (resnet18: 0.074 against 0.28): argmax agreement swings by several points
between configurations whose SQNR differs by a fraction of a dB; read the SQNR column for the
trend.
"""
import argparse
import os
import sys
import tempfile

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import fxkit  # noqa: E402
import fxkit.backends  # noqa: E402,F401  (registers the numba integer engine)
from fxkit.runtime.ops.quantized_ops import use_quantized_engine  # noqa: E402
from fxkit.runtime.quantized import quantize_affine  # noqa: E402
from fxkit.transforms.quantize import (QConfigMapping, calibrate, convert, correct_bias, equalize,  # noqa: E402
                                       per_channel_histogram_qconfig, per_channel_qconfig, prepare, round_weights)
from fxkit.transforms.quantize.patterns import is_observer_call  # noqa: E402

IMAGES, BATCH = 64, 16
FIRST_CONV = {"torchvision/resnet18": "conv1", "torchvision/mobilenet_v2": "features.0.0"}


def _images(entry, seed):
    return [fxkit.from_numpy(entry.make_inputs(BATCH, seed + i)[0].numpy()) for i in range(IMAGES // BATCH)]


def _scores(expected, actual):
    """``(top-1 agreement, logits SQNR in dB)`` of two lists of logit batches."""
    e, a = (np.concatenate(v).astype(np.float64) for v in (expected, actual))
    return float(np.mean(e.argmax(-1) == a.argmax(-1))), float(10 * np.log10((e ** 2).sum() / ((e - a) ** 2).sum()))


def _quantized(gm, calibration, qconfig, steps=(), float_layers=(), equalized=False, float_outputs=False):
    mapping = QConfigMapping().set_global(qconfig)
    for name in float_layers:
        mapping.set_module_name(name, None)
    prepared = prepare(gm, mapping)
    if equalized:
        equalize(prepared, relu6="skip")
    calibrate(prepared, calibration, progress=False)
    for step in steps:
        step(prepared, calibration)
    return convert(prepared, report=False, float_outputs=float_outputs)


def _input_on_int8_grid(gm, calibration, evaluation):
    """The float model's logits on its input rounded to the first observer's calibrated int8 grid."""
    prepared = calibrate(prepare(gm, per_channel_histogram_qconfig), calibration, progress=False)
    first = next(n for n in prepared.graph.nodes if is_observer_call(prepared, n))
    observer = prepared.get_submodule(first.target)
    scale, zero_point = observer.calculate_qparams()
    rows = []
    for x in evaluation:
        q = quantize_affine(x, float(scale), int(zero_point), observer.dtype).numpy().astype(np.float32)
        rows.append(gm(fxkit.from_numpy((q - np.float32(zero_point)) * np.float32(scale))).numpy())
    return rows


def margins(expected):
    """``(median gap between the two largest logits, std of the logits' deviation from their
    per-class mean across images)`` of the float logits."""
    logits = np.concatenate(expected).astype(np.float64)
    top = np.sort(logits, -1)
    return float(np.median(top[:, -1] - top[:, -2])), float((logits - logits.mean(0)).std())


def _file_ratio(gm, quantized):
    with tempfile.TemporaryDirectory() as folder:
        fxkit.save(gm, os.path.join(folder, "f.zip"))
        fxkit.save(quantized, os.path.join(folder, "q.zip"))
        return os.path.getsize(os.path.join(folder, "q.zip")) / os.path.getsize(os.path.join(folder, "f.zip"))


def model_rows(name):
    from tests.interop.test_from_torch_corpus import imported

    entry, gm = imported(name)
    calibration = [(x,) for x in _images(entry, 100)]
    evaluation = _images(entry, 500)
    expected = [gm(x).numpy() for x in evaluation]
    histogram, gptq = per_channel_histogram_qconfig, (round_weights,)
    configs = [("min/max", per_channel_qconfig, (), {}),
               ("histogram", histogram, (), {}),
               ("+ round_weights", histogram, gptq, {}),
               ("+ correct_bias", histogram, (round_weights, correct_bias), {}),
               ("round_weights + float_outputs", histogram, gptq, {"float_outputs": True}),
               ("equalize + round_weights", histogram, gptq, {"equalized": True}),
               ("first conv float (mixed precision)", histogram, gptq, {"float_layers": (FIRST_CONV[name],)})]
    rows = []
    for label, qconfig, steps, options in configs:
        quantized = _quantized(gm, calibration, qconfig, steps, **options)
        with use_quantized_engine("numba"):
            actual = [quantized(x).numpy() for x in evaluation]
        rows.append((label, *_scores(expected, actual), f"{_file_ratio(gm, quantized):.3f}"))
    rows.append(("float, input on the int8 grid", *_scores(expected, _input_on_int8_grid(gm, calibration, evaluation)),
                 "-"))
    rng = np.random.default_rng(0)
    noisy = []
    for x in evaluation:
        data = x.numpy()
        noise = rng.standard_normal(data.shape).astype(np.float32) * data.std() * np.float32(10 ** (-40 / 20))
        noisy.append(gm(fxkit.from_numpy(data + noise)).numpy())
    rows.append(("float, 40 dB input noise", *_scores(expected, noisy), "-"))
    return margins(expected), rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(FIRST_CONV), action="append")
    args = parser.parse_args()
    console = Console(width=max(Console().width, 120))
    for name in args.model or sorted(FIRST_CONV, reverse=True):
        (gap, spread), rows = model_rows(name)
        console.print(f"{name}: float logits' median top-2 gap {gap:.4f}, spread across images {spread:.4f} "
                      f"(ratio {gap / spread:.3f})")
        table = Table("configuration", "top-1 agreement", "logits SQNR (dB)", "int8 / float file",
                      title=f"{name}: int8 vs float, {IMAGES} calibration + {IMAGES} evaluation images")
        for label, agreement, sqnr, ratio in rows:
            table.add_row(label, f"{agreement:.3f}", f"{sqnr:.1f}", ratio)
        console.print(table)


if __name__ == "__main__":
    main()
