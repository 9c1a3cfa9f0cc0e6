"""Corpus models as ONNX files, made by torch's own exporter at opset 17 with a symbolic batch.

torch 2.13's default exporter (``dynamo=True``) needs onnxscript, which the
project's environment does not install, so the corpus uses the TorchScript
exporter (``dynamo=False``), the one most ONNX files in the wild come from.
Exports are cached per process, and on disk under ``$FXKIT_ONNX_CACHE`` when
it is set (to skip re-exporting across runs of the tests or the benchmark).
"""
import functools
import io
import os
import warnings

import torch

OPSET = 17


@functools.lru_cache(maxsize=None)
def export_onnx(name):
    """The ONNX ``ModelProto`` torch.onnx.export (TorchScript, opset 17) makes of corpus model ``name``.

    Raises whatever the exporter raises for a model it cannot export.
    """
    import onnx

    from tests.corpus import build

    cache = os.environ.get("FXKIT_ONNX_CACHE")
    path = os.path.join(cache, name.replace("/", "__") + ".onnx") if cache else None
    if path and os.path.exists(path):
        return onnx.load(path)
    entry = build(name)
    names = list(entry.input_names)
    axes = {n: {d: "batch"} for n, d in zip(names, entry.batch_dims)}
    buffer = io.BytesIO()
    fastpath = torch.backends.mha.get_fastpath_enabled()
    try:
        # NOTE: nn.MultiheadAttention's fast path (vit_b_16) is an ATen op the exporter lacks.
        torch.backends.mha.set_fastpath_enabled(False)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(entry.keyword_call(), entry.example_inputs, buffer, input_names=names,
                              dynamic_axes=axes, opset_version=OPSET, dynamo=False, do_constant_folding=True)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    proto = onnx.load_from_string(buffer.getvalue())
    if path:
        os.makedirs(cache, exist_ok=True)
        onnx.save(proto, path)
    return proto
