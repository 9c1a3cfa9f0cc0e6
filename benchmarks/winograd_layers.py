"""3x3 convs one layer at a time: Winograd F(2x2) and F(4x4) against the im2col rules and PyTorch, interleaved.

    python benchmarks/winograd_layers.py                     # ResNet and VGG 3x3 shapes, batch 1 and 8
    python benchmarks/winograd_layers.py --batches 8 --repeats 15

Each row is one 3x3, stride-1, padding-1 conv of ResNet-18/50 (64 channels at
56x56 ... 512 at 7x7) or VGG-11 (3->64 at 224 ... 512 at 14). Contenders, all
on 2 threads in this one process, each in turn per round (a rest, a warm-up,
timed calls: benchmarks/interleaved.py): the numba backend's im2col rule as
`fxkit.backends.conv_lowering.lower_conv2d` picks it without Winograd
(channel-major when the output has fewer pixels than channels, else
channels-last im2col), the Winograd call with F(2x2, 3x3) and with F(4x4,
3x3), and PyTorch's ``conv2d``. Figures are medians in ms and ratios to
PyTorch, with each Winograd result's largest error relative to a float64
PyTorch reference (and PyTorch float32's, for scale), and the load average.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convnets import THREADS, measure  # noqa: E402  (sets the thread counts before numpy loads)

import numpy as np  # noqa: E402

import fxkit  # noqa: E402
from fxkit.backends import conv_lowering, winograd_conv  # noqa: E402
from fxkit.runtime.meta import TensorMeta  # noqa: E402

LAYERS = [  # (name, in channels, out channels, map size)
    ("resnet layer1", 64, 64, 56), ("resnet layer2", 128, 128, 28), ("resnet layer3", 256, 256, 14),
    ("resnet layer4", 512, 512, 7), ("vgg11 conv1", 3, 64, 224), ("vgg11 conv2", 64, 128, 112),
    ("vgg11 conv3", 128, 256, 56), ("vgg11 conv4", 256, 256, 56), ("vgg11 conv5", 256, 512, 28),
    ("vgg11 conv6", 512, 512, 28), ("vgg11 conv7", 512, 512, 14),
]


def im2col_call(meta, batch, channels, out_channels, size):
    """The conv call `lower_conv2d` makes for this shape when Winograd is left out."""
    pads, unit = ((1, 1), (1, 1)), (1, 1)
    pixels = batch * size * size
    if pixels < out_channels:
        return "channel-major", conv_lowering.ChannelMajorConv("c", meta, pads, unit, unit)
    return "im2col", conv_lowering.Im2colConv("c", meta, pads, unit, unit)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--layers", nargs="+", help="substrings of the layer names to run")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(int(THREADS))
    rng = np.random.default_rng(0)
    print(f"{THREADS} threads each; median of {args.repeats}; ratios to PyTorch conv2d")
    print(f"{'layer':<14} {'batch':>5} {'C->OC@HW':>14} {'torch ms':>9} {'rule':>13} {'ratio':>6} "
          f"{'F2':>6} {'F4':>6}  {'F2/rule':>7} {'F4/rule':>7}  err torch   F2      F4     load")
    for batch in args.batches:
        for name, channels, out_channels, size in LAYERS:
            if args.layers and not any(s in name for s in args.layers):
                continue
            x = rng.standard_normal((batch, channels, size, size)).astype(np.float32)
            weight = (rng.standard_normal((out_channels, channels, 3, 3)) / np.sqrt(9 * channels)).astype(np.float32)
            bias = rng.standard_normal(out_channels).astype(np.float32)
            meta = TensorMeta((batch, out_channels, size, size), fxkit.float32)
            rule, im2col = im2col_call(meta, batch, channels, out_channels, size)
            pads = ((1, 1), (1, 1))
            f2 = winograd_conv.WinogradConv("c", meta, pads, winograd_conv.F2)
            f4 = winograd_conv.WinogradConv("c", meta, pads, winograd_conv.F4)
            t_x, t_w, t_b = (torch.from_numpy(v) for v in (x, weight, bias))
            calls = {"rule": lambda: im2col(x, weight, bias), "F2": lambda: f2(x, weight, bias),
                     "F4": lambda: f4(x, weight, bias),
                     "torch": lambda: torch.nn.functional.conv2d(t_x, t_w, t_b, padding=1)}
            reference = torch.nn.functional.conv2d(t_x.double(), t_w.double(), t_b.double(), padding=1).numpy()
            scale = np.abs(reference).max()
            errors = [np.abs(np.asarray(calls[k]()) - reference).max() / scale for k in ("torch", "F2", "F4")]
            ms = {k: v * 1e3 for k, v in measure(calls, args.repeats).items()}
            load = os.getloadavg()[0]
            shape = f"{channels}->{out_channels}@{size}"
            print(f"{name:<14} {batch:>5} {shape:>14} {ms['torch']:>9.1f} {rule:>13} {ms['rule'] / ms['torch']:>5.2f}x "
                  f"{ms['F2'] / ms['torch']:>5.2f}x {ms['F4'] / ms['torch']:>5.2f}x  {ms['F2'] / ms['rule']:>6.2f}x "
                  f"{ms['F4'] / ms['rule']:>6.2f}x  " + " ".join(f"{e:.1e}" for e in errors) + f"  {load:>4.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
