"""The onnxruntime delegate backend against a bare onnxruntime session, and int8 against float32, in one run.

    python benchmarks/delegate.py                # full run (median of 15)
    python benchmarks/delegate.py --quick        # median of 9, no MobileNetV2
    python benchmarks/delegate.py --threads 2    # session threads (default 1: steadier on a busy machine)

Figures (issue 18):
- overhead: ``fxkit.compile(model, backend="onnxruntime")`` / a bare ``InferenceSession``
  opened on the very ONNX model the backend built (same session options), at batch 1 and 8,
  for ResNet-18 (the zoo's), MobileNetV2 and a BERT encoder (target <= 1.05x), and the zoo's
  MLP, where the fixed cost of a call shows (tens of microseconds per session run);
- int8: float32 / int8 through the delegate for a statically quantized ResNet-18 and BERT, and a
  dynamically quantized BERT (``quantize_dynamic``: int8 weights, activations quantized per call,
  exported as DynamicQuantizeLinear + MatMulInteger) (target >= 1.5x faster).

MobileNetV2 and the BERT encoder are written here with ``fxkit.nn``; its attention is one
``nn.MultiheadAttention`` layer, whose projections ``quantize_dynamic`` leaves in float (as PyTorch's
does). ``hf_bert`` is transformers' BertModel (hidden 256, 4 layers, random weights) brought in with
``fxkit.from_torch``, whose every projection is an ``nn.Linear``: the dynamic-int8 row users of Hugging
Face models get (skipped when transformers is not installed).

Both sides of each pair run interleaved (A B A B ...) so load from other processes hits both.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import fxkit  # noqa: E402
import fxkit.models  # noqa: E402
from fxkit import nn  # noqa: E402
import fxkit.nn.functional as F  # noqa: E402

IMAGE = (3, 64, 64)
SEQ, VOCAB, HIDDEN, LAYERS = 64, 1000, 256, 4


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, 3x3 depthwise, 1x1 project (ReLU6 between), residual when shapes allow."""

    def __init__(self, inp, out, stride, expand):
        super().__init__()
        hidden = inp * expand
        self.residual = stride == 1 and inp == out
        layers = []
        if expand != 1:
            layers += [nn.Conv2d(inp, hidden, 1, bias=False), nn.BatchNorm2d(hidden)]
        self.expand = nn.Sequential(*layers)
        self.depthwise = nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False)
        self.bn = nn.BatchNorm2d(hidden)
        self.project = nn.Conv2d(hidden, out, 1, bias=False)
        self.bn_out = nn.BatchNorm2d(out)

    def forward(self, x):
        h = self.expand(x)
        if len(self.expand):
            h = h.clamp(0.0, 6.0)
        h = self.bn(self.depthwise(h)).clamp(0.0, 6.0)
        h = self.bn_out(self.project(h))
        return x + h if self.residual else h


class MobileNetV2(nn.Module):
    """torchvision's MobileNetV2 layout (width 1.0), in fxkit.nn."""

    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]

    def __init__(self, num_classes=1000):
        super().__init__()
        blocks = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32)]
        self.stem = nn.Sequential(*blocks)
        inp, layers = 32, []
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(inp, c, s if i == 0 else 1, t))
                inp = c
        self.features = nn.Sequential(*layers)
        self.head = nn.Conv2d(inp, 1280, 1, bias=False)
        self.head_bn = nn.BatchNorm2d(1280)
        self.classifier = nn.Linear(1280, num_classes)

    def forward(self, x):
        x = self.stem(x).clamp(0.0, 6.0)
        x = self.features(x)
        x = self.head_bn(self.head(x)).clamp(0.0, 6.0)
        return self.classifier(F.adaptive_avg_pool2d(x, 1).flatten(1))


class BertEncoder(nn.Module):
    """A BERT-base-shaped encoder, smaller: token and position embeddings, LayerNorm, transformer blocks."""

    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, HIDDEN)
        self.positions = nn.Embedding(SEQ, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN)
        self.blocks = nn.Sequential(*[fxkit.models.TransformerBlock(HIDDEN, 4) for _ in range(LAYERS)])
        self.register_buffer("position_ids", fxkit.arange(SEQ))

    def forward(self, input_ids):
        return self.blocks(self.norm(self.tokens(input_ids) + self.positions(self.position_ids)))


def build(name):
    """``(model, make_inputs(batch))`` in eval mode with fixed random weights."""
    fxkit.manual_seed(0)
    rng = np.random.default_rng(0)
    if name == "mlp":  # tiny: the fixed cost per call shows
        model, _ = fxkit.models.get("mlp")
        return model, lambda n: (fxkit.from_numpy(rng.standard_normal((n, 784)).astype(np.float32)),)
    if name == "bert":
        return BertEncoder().eval(), lambda n: (fxkit.from_numpy(rng.integers(0, VOCAB, (n, SEQ))),)
    if name == "hf_bert":
        return hugging_face_bert(), lambda n: (fxkit.from_numpy(rng.integers(0, VOCAB, (n, SEQ))),)
    model = fxkit.models.resnet18() if name == "resnet18" else MobileNetV2()
    return model.eval(), lambda n: (fxkit.from_numpy(rng.standard_normal((n, *IMAGE)).astype(np.float32)),)


def hugging_face_bert():
    """transformers' BertModel with random weights, imported by from_torch with a symbolic batch."""
    import torch

    from tests.corpus.torchvision_import import import_torchvision

    import_torchvision()  # NOTE: transformers may import torchvision: through the corpus's shim
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=4,
                                     intermediate_size=4 * HIDDEN, max_position_embeddings=SEQ, vocab_size=VOCAB)
    ids = torch.randint(0, VOCAB, (2, SEQ))
    batch = torch.export.Dim("N", min=1, max=64)
    return fxkit.from_torch(transformers.BertModel(config).eval(), (ids,), dynamic_shapes={"input_ids": {0: batch}})


def _first(output):
    """The first tensor of a model's output (a Hugging Face model returns a dict)."""
    return next(iter(output.values())) if isinstance(output, dict) else output


def quantized(model, make_inputs, mode):
    """Static int8 post-training quantization calibrated on 4 random batches, or dynamic int8 linears."""
    from fxkit.transforms.quantize import calibrate, convert, prepare, quantize_dynamic

    gm = model if isinstance(model, fxkit.GraphModule) else fxkit.symbolic_trace(model)
    if mode == "dynamic":
        return quantize_dynamic(gm)
    prepared = prepare(gm)
    calibrate(prepared, [make_inputs(4) for _ in range(4)], progress=False)
    return convert(prepared, report=False)


def interleaved(fns, repeats):
    """Median seconds of each function, run in turn ``repeats`` times (after one warm-up each)."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, record in zip(fns, times):
            start = time.perf_counter()
            fn()
            record.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def bare_session(compiled, threads):
    """A plain InferenceSession on the ONNX model the backend built, with the same options."""
    import onnxruntime as ort

    (runner,) = compiled.backend.runners.values()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    session = ort.InferenceSession(runner.model_bytes, sess_options=options, providers=["CPUExecutionProvider"])
    return session, session.get_inputs()[0].name


def overhead(names, batches, repeats, threads):
    print(f"\n## delegate overhead: fxkit onnxruntime backend / bare InferenceSession (median of {repeats}, "
          f"{threads} thread(s))")
    print(f"{'model':<12} {'batch':>5} {'bare ms':>9} {'fxkit ms':>9} {'ratio':>7}")
    for name in names:
        model, make_inputs = build(name)
        compiled = fxkit.compile(model, backend="onnxruntime", example_inputs=make_inputs(batches[0]),
                                 threads=threads)
        session, input_name = bare_session(compiled, threads)
        for n in batches:
            inputs = make_inputs(n)
            compiled(*inputs)  # compiles this size (same session: the partition is batch-free)
            feed = {input_name: inputs[0].numpy()}
            bare, ours = interleaved([lambda: session.run(None, feed), lambda: compiled(*inputs)], repeats)
            print(f"{name:<12} {n:>5} {bare * 1e3:>9.3f} {ours * 1e3:>9.3f} {ours / bare:>6.3f}x")
        assert len(compiled.backend.runners) == 1, "one session serves every batch size"


def int8(names, batch, repeats, threads):
    print(f"\n## int8 through the delegate: float32 / int8 time (batch {batch}, median of {repeats})")
    print(f"{'model':<20} {'f32 ms':>9} {'int8 ms':>9} {'speed-up':>9} {'max |int8-f32| / max|f32|':>27}")
    for name, mode in names:
        model, make_inputs = build(name)
        inputs = make_inputs(batch)
        fp32 = fxkit.compile(model, backend="onnxruntime", example_inputs=inputs, threads=threads)
        q = fxkit.compile(quantized(model, make_inputs, mode), backend="onnxruntime", example_inputs=inputs,
                          threads=threads)
        a, b = _first(fp32(*inputs)).numpy(), _first(q(*inputs)).numpy()
        error = float(np.abs(a - b).max() / np.abs(a).max())
        t32, t8 = interleaved([lambda: fp32(*inputs), lambda: q(*inputs)], repeats)
        print(f"{name + ' ' + mode:<20} {t32 * 1e3:>9.3f} {t8 * 1e3:>9.3f} {t32 / t8:>8.2f}x {error:>27.4f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="median of 9, no MobileNetV2")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of every session (default 1)")
    args = parser.parse_args()
    repeats = 9 if args.quick else 15
    names = ["mlp", "resnet18", "bert"] if args.quick else ["mlp", "resnet18", "mobilenet_v2", "bert"]
    overhead(names, (1, 8), repeats, args.threads)
    rows = [("resnet18", "static"), ("bert", "static"), ("bert", "dynamic")]
    try:
        import transformers  # noqa: F401
        rows.append(("hf_bert", "dynamic"))
    except ImportError:
        print("\n(transformers is not installed: no hf_bert row)")
    int8(rows, 8, repeats, args.threads)


if __name__ == "__main__":
    main()
