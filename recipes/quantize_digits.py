"""Quantize the digits models to int8 after training, and compare them with float32.

Two models classify scikit-learn's 8x8 digits (the last quarter, written by
people the models never saw, is the test split): an MLP whose weights come from
scikit-learn's ``MLPClassifier``, and the LeNet-style ``DigitsNet`` trained here
with fxkit autograd (or loaded from ``recipes/train_digits.py --out DIR``).
Each goes through post-training quantization, ``prepare`` (observers after each
activation) -> ``calibrate`` (training batches) -> ``convert`` (int8 weights,
int32 accumulation, fixed-point requantization), with one scale per weight
tensor and with one per output channel. The table gives test accuracy and the
size of the ``fxkit.save`` file; then the converted CNN's graph is printed and
its predictions are checked to be identical on the numba integer engine.

    python recipes/quantize_digits.py [--epochs 8] [--load DIR]
"""
import argparse
import os
import tempfile
import warnings

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from sklearn.datasets import load_digits
from sklearn.neural_network import MLPClassifier

import fxkit
import fxkit.backends  # noqa: F401  (registers the numba integer engine)
from fxkit.models import MLP, DigitsNet
from fxkit.nn import functional as F
from fxkit.runtime.ops.quantized_ops import use_quantized_engine
from fxkit.transforms.quantize import calibrate, convert, default_qconfig, per_channel_qconfig, prepare

IMAGE = (-1, 1, 8, 8)


def digits_split():
    """``(train_x, train_y, test_x, test_y)``: images in [0, 1] as (N, 64) float32, int64 labels."""
    digits = load_digits()
    images = (digits.data / 16.0).astype(np.float32)
    labels = digits.target.astype(np.int64)
    cut = len(labels) - len(labels) // 4
    return images[:cut], labels[:cut], images[cut:], labels[cut:]


def mlp_from_sklearn(train_x, train_y):
    """An fxkit MLP 64-256-10 carrying the weights of a trained ``MLPClassifier``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 100 iterations end before scikit-learn's tolerance is met
        clf = MLPClassifier(hidden_layer_sizes=(256,), max_iter=100, random_state=0).fit(train_x, train_y)
    model = MLP(64, (256,), 10)
    state = {"layers.0.weight": clf.coefs_[0].T, "layers.0.bias": clf.intercepts_[0],
             "head.weight": clf.coefs_[1].T, "head.bias": clf.intercepts_[1]}
    model.load_state_dict({k: fxkit.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in state.items()})
    return model.eval()


def train_digits_net(train_x, train_y, epochs, console):
    """DigitsNet trained with SGD and momentum (batches of 32), as recipes/train_digits.py does."""
    fxkit.manual_seed(0)
    model = DigitsNet()
    optimizer = fxkit.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rng = np.random.default_rng(0)
    images = train_x.reshape(IMAGE)
    steps = (len(images) + 31) // 32
    columns = (TextColumn("training DigitsNet"), BarColumn(), MofNCompleteColumn(),
               TextColumn("loss {task.fields[loss]:.4f}"))
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("train", total=epochs * steps, loss=float("nan"))
        for _ in range(epochs):
            order = rng.permutation(len(images))
            for i in range(0, len(images), 32):
                batch = order[i:i + 32]
                loss = F.nll_loss(model(fxkit.from_numpy(images[batch])), fxkit.from_numpy(train_y[batch]))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                progress.update(task, advance=1, loss=loss.item())
    return model.eval()


def accuracy(model, x, y, shape):
    with fxkit.no_grad():
        predicted = model(fxkit.from_numpy(x.reshape(shape))).argmax(dim=1).numpy()
    return 100.0 * float((predicted == y).mean())


def saved_size(gm, folder, name):
    path = os.path.join(folder, f"{name}.zip")
    fxkit.save(gm, path)
    return os.path.getsize(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8, help="DigitsNet training epochs")
    parser.add_argument("--load", default=None, help="a DigitsNet saved by recipes/train_digits.py --out DIR")
    args = parser.parse_args()
    console = Console()
    train_x, train_y, test_x, test_y = digits_split()
    models = {"MLP (sklearn weights)": (mlp_from_sklearn(train_x, train_y), (-1, 64))}
    net = fxkit.load(args.load) if args.load else train_digits_net(train_x, train_y, args.epochs, console)
    models["DigitsNet (CNN)"] = (net, IMAGE)

    table = Table("model", "fp32", "int8 per-tensor", "int8 per-channel", "fp32 file", "int8 file (ratio)",
                  title="post-training quantization, test accuracy on unseen writers")
    # NOTE: a TemporaryDirectory is removed when it is collected or the interpreter exits, even on an error
    scratch = tempfile.TemporaryDirectory(prefix="fxkit-quantize-")
    folder = scratch.name
    converted = None
    for name, (model, shape) in models.items():
        batches = [fxkit.from_numpy(train_x[i:i + 64].reshape(shape)) for i in range(0, len(train_x), 64)]
        results = {}
        for label, qconfig in (("per-tensor", default_qconfig), ("per-channel", per_channel_qconfig)):
            prepared = prepare(model, qconfig)
            calibrate(prepared, batches, progress=label == "per-tensor", console=console)
            results[label] = convert(prepared, report=label == "per-channel", console=console)
        fp32_size = saved_size(fxkit.symbolic_trace(model) if not isinstance(model, fxkit.GraphModule) else model,
                               folder, "fp32")
        int8_size = saved_size(results["per-channel"], folder, "int8")
        table.add_row(name, f"{accuracy(model, test_x, test_y, shape):.2f}%",
                      f"{accuracy(results['per-tensor'], test_x, test_y, shape):.2f}%",
                      f"{accuracy(results['per-channel'], test_x, test_y, shape):.2f}%",
                      f"{fp32_size / 1024:.1f} KiB", f"{int8_size / 1024:.1f} KiB ({int8_size / fp32_size:.3f}x)")
        converted = (results["per-channel"], shape)
    console.print(table)
    scratch.cleanup()

    gm, shape = converted
    console.print("\nThe converted DigitsNet (per-channel weights):")
    print(gm.graph)
    x = fxkit.from_numpy(test_x.reshape(shape))
    reference = gm(x).numpy()
    with use_quantized_engine("numba"):
        same = np.array_equal(gm(x).numpy(), reference)
    if not same:
        raise SystemExit("the numba integer engine computed different values from the reference engine")
    console.print("numba integer engine: bit-identical outputs to the numpy reference engine")


if __name__ == "__main__":
    main()
