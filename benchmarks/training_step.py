"""One training step of the digits Net: fxkit eager, fxkit's gradient graph (plain and
compiled), and PyTorch eager, in one run; plus the peak memory of a step.

    python benchmarks/training_step.py              # batch 32, like recipes/train_digits.py
    python benchmarks/training_step.py --quick      # fewer repeats
    python benchmarks/training_step.py --threads 2  # BLAS threads (default 1)

A step is forward, loss (``nll_loss``), gradients and an SGD update with momentum,
on ``fxkit.models`` "digits_net" in training mode (dropout active), 1x8x8 inputs:

- fxkit eager: ``loss.backward()`` then ``optimizer.step()``;
- fxkit graph-grad: ``fxkit.transforms.grad`` of the model with its loss, one graph
  computing the loss and every parameter's gradient, run as a GraphModule and
  compiled by ``fxkit.compile`` (numpy and numba backends); its gradients are
  handed to the same optimizer;
- PyTorch eager: the same network and step, in a child process of its own.

Peak memory is tracemalloc's peak over one step after a warm-up step (parameters,
optimizer state and compiled code already exist), so it counts what the step
itself allocates: activations kept for backward, gradients and temporaries.

Every process runs with OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=MKL_NUM_THREADS=1 (or
``--threads``) and PyTorch with ``torch.set_num_threads`` the same: the machine the
figures come from is shared, and single-threaded runs compare the frameworks'
own costs rather than their thread pools.
"""
import argparse
import json
import os
import subprocess
import sys
import timeit
import tracemalloc


def _threads_from_argv():
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
    return "1"


# NOTE: before numpy is imported, so its BLAS reads them.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = _threads_from_argv()

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

LR, MOMENTUM = 0.05, 0.9


def _calls_per_round(fn, round_time):
    """How many calls of ``fn`` take about ``round_time`` seconds (after a warm-up call)."""
    fn()
    number = 1
    while True:
        t = timeit.timeit(fn, number=number)
        if t >= round_time / 4:
            return max(1, int(number * round_time / max(t, 1e-9)))
        number *= 4


def seconds_per_call(fns, min_time=0.5, rounds=9):
    """``{name: seconds per call}``: the best of ``rounds`` rounds, the functions taking
    turns round by round, so load from other processes on a shared machine hits
    them alike and the best round of each is the least disturbed one."""
    numbers = {name: _calls_per_round(fn, min_time / rounds) for name, fn in fns.items()}
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            best[name] = min(best[name], timeit.timeit(fn, number=numbers[name]) / numbers[name])
    return best


def peak_bytes(fn):
    """tracemalloc's peak over one call of ``fn`` (after a warm-up call)."""
    fn()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _batch(batch_size):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((batch_size, 1, 8, 8)).astype(np.float32),
            rng.integers(0, 10, batch_size).astype(np.int64))


def _with_loss(net):
    from fxkit import nn
    from fxkit.nn import functional as F

    class Loss(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x, target):
            return F.nll_loss(self.net(x), target)

    return Loss()


def fxkit_steps(batch_size):
    """``{variant: step function}`` for fxkit, each on its own copy of the same model."""
    import fxkit
    import fxkit.models
    from fxkit.nn import functional as F
    from fxkit.optim import SGD
    from fxkit.transforms import grad

    a, b = _batch(batch_size)
    x, y = fxkit.from_numpy(a), fxkit.from_numpy(b)
    steps = {}

    fxkit.manual_seed(0)
    eager_net = fxkit.models.get("digits_net")[0].train()
    eager_opt = SGD(eager_net.parameters(), lr=LR, momentum=MOMENTUM)

    def eager_step():
        eager_opt.zero_grad()
        F.nll_loss(eager_net(x), y).backward()
        eager_opt.step()

    steps["fxkit eager"] = eager_step

    def graph_step(backend):
        fxkit.manual_seed(0)
        net = fxkit.models.get("digits_net")[0].train()
        gm = grad(_with_loss(net), example_inputs=[x, y])
        run = gm if backend is None else fxkit.compile(gm, backend=backend, example_inputs=[x, y])
        opt = SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
        params = [(p, "net." + name) for name, p in net.named_parameters()]

        def step():
            _, grads = run(x, y)
            for p, name in params:
                p.grad = grads[name]
            opt.step()

        return step

    steps["fxkit graph-grad (GraphModule)"] = graph_step(None)
    steps["fxkit graph-grad compiled numpy"] = graph_step("numpy")
    steps["fxkit graph-grad compiled numba"] = graph_step("numba")
    return steps


def check_gradients(batch_size):
    """Largest relative difference between graph-grad's gradients and eager autograd's
    (same weights, same dropout draw)."""
    import fxkit
    import fxkit.models
    from fxkit.nn import functional as F
    from fxkit.transforms import grad

    a, b = _batch(batch_size)
    x, y = fxkit.from_numpy(a), fxkit.from_numpy(b)
    net = fxkit.models.get("digits_net")[0].train()
    compiled = fxkit.compile(grad(_with_loss(net), example_inputs=[x, y]), backend="numpy", example_inputs=[x, y])
    fxkit.manual_seed(1)
    _, grads = compiled(x, y)
    fxkit.manual_seed(1)
    F.nll_loss(net(x), y).backward()
    return max(np.linalg.norm(grads["net." + n].numpy() - p.grad.numpy()) / np.linalg.norm(p.grad.numpy())
               for n, p in net.named_parameters())


def torch_step(batch_size, threads, quick):
    """PyTorch eager: seconds per step (its tensors live in PyTorch's own allocator,
    which tracemalloc does not see, so no peak is taken)."""
    import torch
    import torch.nn.functional as TF

    torch.set_num_threads(threads)
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(1, 32, kernel_size=3, padding=1)
            self.conv2 = torch.nn.Conv2d(32, 64, kernel_size=3, padding=1)
            self.fc1 = torch.nn.Linear(256, 128)
            self.fc2 = torch.nn.Linear(128, 10)

        def forward(self, x):
            x = torch.relu(TF.max_pool2d(self.conv1(x), 2))
            x = torch.relu(TF.max_pool2d(self.conv2(x), 2))
            x = torch.relu(self.fc1(x.view(-1, 256)))
            x = TF.dropout(x, 0.5, training=self.training)
            return TF.log_softmax(self.fc2(x), dim=1)

    a, b = _batch(batch_size)
    x, y = torch.from_numpy(a), torch.from_numpy(b)
    net = Net().train()
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)

    def step():
        opt.zero_grad()
        TF.nll_loss(net(x), y).backward()
        opt.step()

    return seconds_per_call({"step": step}, 0.2 if quick else 1.0)["step"]


def _torch_in_child(batch_size, threads, quick):
    cmd = [sys.executable, os.path.abspath(__file__), "--peer-torch", "--batch-size", str(batch_size),
           "--threads", str(threads)] + (["--quick"] if quick else [])
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ))
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()[-1:] or ["(no output)"]
        return None, tail[0]
    return json.loads(out.stdout.strip().splitlines()[-1]), None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="BLAS / PyTorch threads (default 1)")
    parser.add_argument("--quick", action="store_true", help="fewer and shorter repeats")
    parser.add_argument("--peer-torch", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer_torch:
        print(json.dumps(torch_step(args.batch_size, args.threads, args.quick)))
        return

    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 110))
    error = check_gradients(args.batch_size)
    steps = fxkit_steps(args.batch_size)
    times = seconds_per_call(steps, 0.2 if args.quick else 1.0)
    results = {name: (times[name], peak_bytes(fn)) for name, fn in steps.items()}
    torch_res, note = _torch_in_child(args.batch_size, args.threads, args.quick)
    if torch_res:
        results["PyTorch eager"] = (torch_res, None)

    table = Table(title=f"digits Net training step (batch {args.batch_size}, 1x8x8, SGD momentum; "
                        f"{args.threads} BLAS thread{'s' if args.threads > 1 else ''})")
    for col in ("variant", "ms / step", "/ PyTorch eager", "/ fxkit eager", "peak bytes of a step"):
        table.add_column(col, justify="left" if col == "variant" else "right", no_wrap=True)
    eager = results["fxkit eager"][0]
    for name, (seconds, peak) in results.items():
        ratio = f"{seconds / torch_res:.2f}x" if torch_res else "-"
        shown = f"{peak:,}" if peak is not None else "n/a (own allocator)"
        table.add_row(name, f"{seconds * 1e3:.3f}", ratio, f"{seconds / eager:.2f}x", shown)
    console.print(table)
    console.print(f"graph-grad vs eager autograd gradients: largest relative difference {error:.2e}")
    if not torch_res:
        console.print(f"PyTorch eager: not measured ({note})")


if __name__ == "__main__":
    main()
