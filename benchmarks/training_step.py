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

Issue 19's ratios (``--ratios``, ``--model digits_net`` or ``resnet18``): the fxkit variants and
PyTorch eager in ONE process, taking turns step by step, each keeping the median of >= 9 steps,
every contender on ``--ratio-threads`` threads (BLAS, numba and ``torch.set_num_threads``); wall
and process CPU time are both printed, with the load average. resnet18 is fxkit.models' (batch 8,
3x64x64, cross entropy over 1000 classes) against the same architecture written in PyTorch below.

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

    a, b = _batch(batch_size)
    x, y = torch.from_numpy(a), torch.from_numpy(b)
    net = _torch_digits_net(torch).train()
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


def _torch_digits_net(torch):
    """The digits Net (`fxkit.models` "digits_net") written in PyTorch, for the PyTorch eager steps."""
    import torch.nn.functional as TF

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

    return Net()


def _torch_resnet18(torch):
    """torchvision's ResNet-18 (BasicBlock, [2, 2, 2, 2]) written out, so torchvision is not needed."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else None)

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return torch.relu(out + (x if self.down is None else self.down(x)))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers)


def ratio_steps(model, threads):
    """``{variant: step}`` of issue 19's table: fxkit eager, graph-grad compiled (numpy, numba)
    and PyTorch eager, one SGD-momentum step each, all in this process on ``threads`` threads."""
    import numba
    import torch

    import fxkit
    import fxkit.models
    from fxkit.nn import functional as F
    from fxkit.optim import SGD
    from fxkit.transforms import grad

    torch.set_num_threads(threads)
    numba.set_num_threads(threads)
    rng = np.random.default_rng(0)
    if model == "digits_net":
        a, b = _batch(32)
        loss_f, loss_t = F.nll_loss, torch.nn.functional.nll_loss
        make_f = lambda: fxkit.models.get("digits_net")[0].train()  # noqa: E731
    else:
        a = rng.standard_normal((8, 3, 64, 64)).astype(np.float32)
        b = rng.integers(0, 1000, 8).astype(np.int64)
        loss_f, loss_t = F.cross_entropy, torch.nn.functional.cross_entropy
        make_f = lambda: fxkit.models.get("resnet18")[0].train()  # noqa: E731
    x, y = fxkit.from_numpy(a), fxkit.from_numpy(b)
    steps = {}
    eager_net = make_f()
    eager_opt = SGD(eager_net.parameters(), lr=LR, momentum=MOMENTUM)

    def eager_step():
        eager_opt.zero_grad()
        loss_f(eager_net(x), y).backward()
        eager_opt.step()

    steps["fxkit eager"] = eager_step

    class WithLoss(fxkit.nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, x, target):
            return loss_f(self.net(x), target)

    for backend in ("numpy", "numba"):
        net = make_f()
        run = fxkit.compile(grad(WithLoss(net), example_inputs=[x, y]), backend=backend, example_inputs=[x, y])
        opt = SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
        params = [(p, "net." + name) for name, p in net.named_parameters()]

        def step(run=run, opt=opt, params=params):
            _, grads = run(x, y)
            for p, name in params:
                p.grad = grads[name]
            opt.step()

        steps[f"fxkit graph-grad compiled {backend}"] = step

    if model == "digits_net":
        torch_net = _torch_digits_net(torch).train()
    else:
        torch_net = _torch_resnet18(torch).train()
    xt, yt = torch.from_numpy(a), torch.from_numpy(b)
    torch_opt = torch.optim.SGD(torch_net.parameters(), lr=LR, momentum=MOMENTUM)

    def torch_step():
        torch_opt.zero_grad()
        loss_t(torch_net(xt), yt).backward()
        torch_opt.step()

    steps["PyTorch eager"] = torch_step
    return steps


def ratio_table(console, model, threads, rounds):
    """Issue 19's training-step ratios to PyTorch eager (target <= 1.2), interleaved in one process."""
    from interleaved import interleaved_rounds  # benchmarks/interleaved.py: rest, warm-up, timed steps
    from rich.table import Table
    from threadpoolctl import threadpool_limits

    with threadpool_limits(threads):
        steps = ratio_steps(model, threads)
        kept = interleaved_rounds(steps, rounds)
    medians = {name: np.median(np.array(v), axis=0) for name, v in kept.items()}
    torch_wall, torch_cpu = medians["PyTorch eager"]
    table = Table("variant", "wall ms / step", "/ PyTorch eager (wall)", "/ PyTorch eager (CPU time)",
                  title=f"{model} training step, median of {rounds} interleaved rounds in one process, "
                        f"{threads} thread(s) each (target <= 1.2x)")
    for name, (wall, cpu) in medians.items():
        table.add_row(name, f"{wall * 1e3:.2f}", f"{wall / torch_wall:.2f}x", f"{cpu / torch_cpu:.2f}x")
    console.print(table)
    console.print("load average (1, 5, 15 min): " + ", ".join(f"{v:.1f}" for v in os.getloadavg()))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="BLAS / PyTorch threads (default 1)")
    parser.add_argument("--quick", action="store_true", help="fewer and shorter repeats")
    parser.add_argument("--peer-torch", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ratios", action="store_true", help="only issue 19's interleaved ratio table")
    parser.add_argument("--model", choices=("digits_net", "resnet18"), default="digits_net")
    parser.add_argument("--ratio-threads", type=int, default=2, help="threads of every contender in --ratios")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved steps per contender in --ratios")
    args = parser.parse_args()
    if args.peer_torch:
        print(json.dumps(torch_step(args.batch_size, args.threads, args.quick)))
        return

    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 110))
    if args.ratios:
        ratio_table(console, args.model, args.ratio_threads, max(9, args.rounds))
        return
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
