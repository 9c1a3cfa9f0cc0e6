"""Train the seed talk's LeNet-style ``Net``, adapted to 8x8 images, on handwritten digits.

The training loop of the talk — ``zero_grad``, ``backward``, ``step`` over a
DataLoader, then a scheduler step each epoch — on fxkit's runtime, with
scikit-learn's bundled ``load_digits`` (1,797 images, no download): the first
three quarters train, the last quarter (written by other people) is held out as
the test split. The training images pass through a map-style Dataset that moves
each by up to one pixel every time it is read, so the network learns digits,
not their position. SGD with momentum and an exponentially decaying learning
rate; a rich progress bar; the test accuracy at the end. The trained model is
traced and saved with ``fxkit.save`` (data-only: generated code, JSON graph,
npz weights), loaded back and checked to give the same predictions.

    python recipes/train_digits.py [--epochs 30] [--out DIR]
"""
import argparse
import os
import tempfile
import time

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sklearn.datasets import load_digits
from threadpoolctl import threadpool_limits

import fxkit
import fxkit.models
from fxkit.nn import functional as F
from fxkit.optim import SGD
from fxkit.optim.lr_scheduler import ExponentialLR
from fxkit.utils.data import DataLoader, Dataset, TensorDataset


class ShiftedDigits(Dataset):
    """Training digits, each read moved by up to one pixel in each direction (zeros fill in).

    Args:
        images: (N, 1, 8, 8) float32 array.
        labels: (N,) int array.
        seed: seed of the shifts.
    """

    def __init__(self, images, labels, seed):
        self.padded = np.pad(images, ((0, 0), (0, 0), (1, 1), (1, 1)))
        self.labels = labels
        self.rng = np.random.default_rng(seed)

    def __getitem__(self, index):
        dy, dx = self.rng.integers(0, 3, size=2)
        return fxkit.from_numpy(self.padded[index, :, dy:dy + 8, dx:dx + 8]), int(self.labels[index])

    def __len__(self):
        return len(self.labels)


def digits_splits(seed):
    """The shifted training set and the test TensorDataset: images scaled to [0, 1] as
    (N, 1, 8, 8) float32, int64 labels; the last quarter of the data is the test split."""
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    labels = digits.target.astype(np.int64)
    cut = len(labels) - len(labels) // 4
    train = ShiftedDigits(images[:cut], labels[:cut], seed)
    test = TensorDataset(fxkit.from_numpy(images[cut:]), fxkit.from_numpy(labels[cut:]))
    return train, test


def accuracy(model, loader):
    """Fraction of samples whose most likely class is the label."""
    correct = total = 0
    with fxkit.no_grad():
        for images, labels in loader:
            predicted = model(images).argmax(dim=1)
            correct += int((predicted == labels).sum())
            total += len(labels)
    return correct / total


def train(model, loader, epochs, lr, console):
    """The seed talk's training loop: SGD with momentum, the learning rate decayed by 5% an epoch."""
    optimizer = SGD(model.parameters(), lr=lr, momentum=0.9)
    scheduler = ExponentialLR(optimizer, gamma=0.95)
    model.train()
    columns = (TextColumn("epoch {task.fields[epoch]:>2}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("loss {task.fields[loss]:.4f}"), TextColumn("lr {task.fields[lr]:.4f}"),
               TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("train", total=epochs * len(loader), epoch=1, loss=float("nan"), lr=lr)
        for epoch in range(epochs):
            for images, labels in loader:
                output = model(images)
                loss = F.nll_loss(output, labels)

                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                progress.update(task, advance=1, epoch=epoch + 1, loss=loss.item(),
                                lr=scheduler.get_last_lr()[0])
            scheduler.step()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None,
                        help="where to save the trained model (default: a new temporary directory)")
    args = parser.parse_args()
    console = Console()

    fxkit.manual_seed(args.seed)
    train_set, test_set = digits_splits(args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, drop_last=True)
    test_loader = DataLoader(test_set, batch_size=256)
    model = fxkit.models.DigitsNet()
    console.print(model)
    console.print(f"{len(train_set)} training and {len(test_set)} test images, {args.epochs} epochs")

    start = time.perf_counter()
    # NOTE: this network's matrix products are small (a few thousand rows by a few hundred columns):
    # BLAS threads would spend more time waking and synchronising than multiplying (4x slower on 2 busy cores).
    with threadpool_limits(limits=1, user_api="blas"):
        train(model, train_loader, args.epochs, args.lr, console)
    seconds = time.perf_counter() - start
    model.eval()
    test_accuracy = accuracy(model, test_loader)
    console.print(f"test accuracy: {test_accuracy:.2%} ({len(test_set)} held-out images), "
                  f"trained in {seconds:.1f} s")

    # NOTE: without --out the saved copy only proves the round trip; it goes in a folder removed at the end
    with tempfile.TemporaryDirectory(prefix="fxkit-digits-") as scratch:
        out = args.out or os.path.join(scratch, "digits_net")
        fxkit.save(fxkit.symbolic_trace(model), out)
        reloaded = fxkit.load(out)
        images = test_set.tensors[0]
        with fxkit.no_grad():
            same = np.array_equal(reloaded(images).argmax(dim=1).numpy(), model(images).argmax(dim=1).numpy())
    if not same:
        raise SystemExit(f"the model reloaded from {out} predicts differently from the trained one")
    console.print(f"saved to {out} (reloaded: same predictions)" if args.out else
                  "saved and reloaded: same predictions (pass --out DIR to keep the file)")


if __name__ == "__main__":
    main()
