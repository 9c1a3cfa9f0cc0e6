"""Issue 19's transformer-style models: ``fxkit.compile(backend="numba")`` against PyTorch eager and numpy.

    python benchmarks/transformer_models.py                          # all five, batch 1 and 8, 2 threads
    python benchmarks/transformer_models.py --models vit_b_16 --batches 8 --repeats 15
    python benchmarks/transformer_models.py --profile BertModel      # per-statement time of the compiled module

Models: the corpus's torchvision vit_b_16 and convnext_tiny (64x64) and transformers' BertModel and
LlamaForCausalLM (tiny configs), imported by ``fxkit.from_torch`` with a symbolic batch, and
`fxkit.models.TransformerBlock` (embed 128, 4 heads, sequence 64) beside
``tests.models.torch_reference.TransformerBlock`` holding the same weights.

Each round times every contender once, one after the other (the contenders take turns, so
both see the same load), a round being a rest, untimed warm-up calls, then calls for at least
``--min-seconds``, averaged (`interleaved`); each
keeps the median of ``--repeats`` rounds (>= 9 for issue 19). Every contender gets
``--threads`` threads (PyTorch's intra-op pool, BLAS through threadpoolctl, numba). The
contenders are PyTorch eager, the numba compilation and the numpy one; the table prints the
ratios numba / PyTorch and numba / numpy (issue 19: both <= 1.0x) and the max relative error of
the numba compilation against PyTorch; the load average is printed with it: the machine may be
shared.
"""
import argparse
import ast
import os
import re
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import fxkit  # noqa: E402
import fxkit.models  # noqa: E402,F401  (TransformerBlock)
from interleaved import interleaved_rounds, median_wall  # noqa: E402  (benchmarks/interleaved.py)

MODELS = ("vit_b_16", "convnext_tiny", "TransformerBlock", "BertModel", "LlamaForCausalLM")
CORPUS = {"vit_b_16": "torchvision/vit_b_16", "convnext_tiny": "torchvision/convnext_tiny",
          "BertModel": "transformers/BertModel", "LlamaForCausalLM": "transformers/LlamaForCausalLM"}
BLOCK_SHAPE = (64, 128)
"""TransformerBlock's (sequence, embed) per batch item."""


def limit_threads(n):
    """Give PyTorch, BLAS and numba ``n`` threads each; returns the BLAS limit (keep it alive)."""
    import numba
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(n)
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    return threadpool_limits(n)


def flat(value):
    """Outputs as a flat tuple of float64 numpy arrays (fxkit Tensors or torch tensors)."""
    if isinstance(value, dict):
        value = tuple(value.values())
    if isinstance(value, (tuple, list)):
        return tuple(a for item in value for a in flat(item))
    if value is None:
        return ()
    if hasattr(value, "detach"):
        value = value.detach()
    return (np.asarray(value.numpy(), np.float64),)


def max_error(actual, expected):
    return max(float(np.max(np.abs(a - e)) / max(float(np.max(np.abs(e))), 1e-30))
               for a, e in zip(flat(actual), flat(expected)))


def corpus_pair(name, batch, backend="numba"):
    """``(torch call, fxkit compiled call, compiled module)`` of a corpus model at ``batch``."""
    import torch

    from tests.interop.test_from_torch_corpus import imported

    entry, gm = imported(CORPUS[name])
    inputs = entry.make_inputs(batch, 1)
    ours = [fxkit.from_numpy(np.ascontiguousarray(x.numpy())) for x in inputs]
    compiled = fxkit.compile(gm, backend=backend, example_inputs=ours)
    kwargs = entry.kwargs(inputs)

    def torch_call():
        with torch.no_grad():
            return entry.model(**kwargs)

    return torch_call, lambda: compiled(*ours), compiled


def block_pair(batch, backend="numba"):
    """``(torch call, fxkit compiled call, compiled module)`` of the transformer block, equal weights."""
    import torch

    from tests.models.torch_reference import TransformerBlock as TorchBlock

    torch.manual_seed(0)
    reference = TorchBlock().eval()
    with torch.no_grad():  # torch zero-initialises these biases: make them matter
        for key, p in reference.named_parameters():
            if key.endswith("bias"):
                p.copy_(torch.rand(p.shape) * 0.2 - 0.1)
    model = fxkit.models.TransformerBlock().eval()
    model.load_state_dict({k: v.detach().numpy() for k, v in reference.state_dict().items()})
    x = np.random.default_rng(1).standard_normal((batch, *BLOCK_SHAPE)).astype(np.float32)
    xt, ours = torch.from_numpy(x), fxkit.from_numpy(x)
    compiled = fxkit.compile(model, backend=backend, example_inputs=[ours])

    def torch_call():
        with torch.no_grad():
            return reference(xt)

    return torch_call, lambda: compiled(ours), compiled


def pair(name, batch, backend="numba"):
    return block_pair(batch, backend) if name == "TransformerBlock" else corpus_pair(name, batch, backend)


def interleaved_medians(fns, repeats, min_seconds):
    """Median seconds per call of each of ``fns``, over ``repeats`` rounds taken in turn (`interleaved`)."""
    medians = median_wall(interleaved_rounds(dict(enumerate(fns)), repeats, min_seconds))
    return [medians[i] for i in range(len(fns))]


def timed_forward(lowered):
    """``(forward, statements, seconds)``: ``lowered``'s generated forward again, each statement between
    two clock reads (``seconds[i]``: the times of ``statements[i]``, one per call).

    A tracing profiler (``sys.settrace``) runs the Python inside every op under its hook and its
    figures grew many times over; these clock reads cost well under a microsecond a statement.
    """
    tree = ast.parse(lowered.code)
    function = tree.body[0]
    statements, body = [], []
    for statement in function.body:
        if isinstance(statement, ast.Return) or (isinstance(statement, ast.Assign) and
                                                 isinstance(statement.value, ast.Constant)):
            body.append(statement)  # the result, or references dropped (``x = None``)
            continue
        body += ast.parse("_start = _clock()").body + [statement]
        body += ast.parse(f"_seconds[{len(statements)}].append(_clock() - _start)").body
        statements.append(ast.unparse(statement))
    function.body = body
    seconds = [[] for _ in statements]
    namespace = dict(lowered.fn.__globals__, _clock=time.perf_counter, _seconds=seconds)
    exec(compile(ast.fix_missing_locations(tree), lowered.filename, "exec"), namespace)
    return namespace[function.name], statements, seconds


def profile(name, batch, calls):
    """Time of each statement of the compiled module (one statement per graph node), top 25, and the
    total by callee (``linear_3_packed`` counts as ``linear_packed``, a fused kernel by the node it
    makes: ``fused -> gelu``); minimum over ``calls`` calls, so a busy machine's stalls drop out."""
    _, ours_call, compiled = pair(name, batch)
    ours_call()
    entry = compiled._last
    forward, statements, seconds = timed_forward(entry.lowered)
    compiled._last = entry._replace(lowered=entry.lowered._replace(fn=forward))
    start = time.perf_counter()
    for _ in range(calls):
        ours_call()
    per_call = (time.perf_counter() - start) / calls
    least = [min(s) for s in seconds]
    print(f"{name} batch {batch}: {per_call * 1e3:.2f} ms per call (mean), statements' minima add up to "
          f"{sum(least) * 1e3:.2f} ms; load average {os.getloadavg()[0]:.2f}")
    kinds = {}
    for text, t in zip(statements, least):
        result, _, call = text.partition(" = ")
        callee = re.sub(r"_\d+", "", call.split("(")[0])
        kind = f"fused -> {re.sub(r'_[0-9]+', '', result)}" if callee == "fused" else callee
        kinds[kind] = kinds.get(kind, 0.0) + t
    for kind, t in sorted(kinds.items(), key=lambda kv: -kv[1])[:12]:
        print(f"{t * 1e3:8.3f} ms  {100 * t / sum(least):5.1f}%  {kind}")
    print("statements:")
    for t, text in sorted(zip(least, statements), reverse=True)[:25]:
        print(f"{t * 1e3:8.3f} ms  {100 * t / sum(least):5.1f}%  {text[:110]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
    parser.add_argument("--batches", nargs="*", type=int, default=[1, 8])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9,
                        help="rounds per contender (median kept; >= 9); calls timed with --profile")
    parser.add_argument("--min-seconds", type=float, default=0.05, help="least time of one round")
    parser.add_argument("--profile", choices=MODELS, help="per-statement time of one compiled model instead")
    args = parser.parse_args()
    limits = limit_threads(args.threads)  # noqa: F841  (kept alive: the BLAS limit lasts as long as it)
    if args.profile:
        for batch in args.batches:
            profile(args.profile, batch, args.repeats)
        return
    print(f"fxkit.compile(numba) / PyTorch eager, median of {args.repeats} interleaved rounds, "
          f"{args.threads} threads each; load average before: {os.getloadavg()[0]:.2f}", flush=True)
    print(f"{'model':<18}{'batch':>6}{'torch ms':>10}{'numba ms':>10}{'numpy ms':>10}{'numba/torch':>13}"
          f"{'numba/numpy':>13}{'target':>8}{'max rel err':>13}")
    for name in args.models:
        for batch in args.batches:
            torch_call, ours_call, _ = pair(name, batch)
            numpy_call = pair(name, batch, backend="numpy")[1]
            error = max_error(ours_call(), torch_call())
            torch_s, ours_s, numpy_s = interleaved_medians([torch_call, ours_call, numpy_call], args.repeats,
                                                           args.min_seconds)
            print(f"{name:<18}{batch:>6}{torch_s * 1e3:>10.2f}{ours_s * 1e3:>10.2f}{numpy_s * 1e3:>10.2f}"
                  f"{ours_s / torch_s:>12.2f}x{ours_s / numpy_s:>12.2f}x{'<= 1.0x':>8}{error:>13.1e}", flush=True)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
