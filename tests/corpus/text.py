"""Hugging Face transformers models of the corpus, as tiny configs (2 layers, hidden 64).

Configs ask for no key/value cache, so that outputs are the model's tensors
only (a ``ModelOutput``, flattened by ``entry.flatten_outputs``; transformers 5
breaks ``return_dict=False`` in GPT-2, Llama and T5); token inputs are 16 long, and
attention masks pad the end of the second item so that masking matters.
"""
import torch

from tests.corpus.entry import CorpusModel, image_inputs, make_nondegenerate, token_inputs

VOCAB = 1000
LENGTH = 16
HIDDEN = 64
LAYERS = 2
HEADS = 4
FFN = 128


def _configs(transformers):
    common = {"vocab_size": VOCAB}
    return {
        "BertModel": (transformers.BertConfig(
            hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FFN,
            max_position_embeddings=64, **common), ("input_ids", "attention_mask")),
        "DistilBertModel": (transformers.DistilBertConfig(
            dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=FFN, max_position_embeddings=64, **common),
            ("input_ids", "attention_mask")),
        "GPT2LMHeadModel": (transformers.GPT2Config(
            n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=64, use_cache=False,
            bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1, **common),
            ("input_ids", "attention_mask")),
        "LlamaForCausalLM": (transformers.LlamaConfig(
            hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=2,
            intermediate_size=FFN, max_position_embeddings=64, use_cache=False, **common),
            ("input_ids", "attention_mask")),
        "T5ForConditionalGeneration": (transformers.T5Config(
            d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=FFN, num_layers=LAYERS, num_decoder_layers=LAYERS,
            num_heads=HEADS, use_cache=False, **common), ("input_ids", "attention_mask", "decoder_input_ids")),
        "ViTModel": (transformers.ViTConfig(
            hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FFN,
            image_size=32, patch_size=8), None),
    }


ARCHS = ("BertModel", "DistilBertModel", "GPT2LMHeadModel", "LlamaForCausalLM", "T5ForConditionalGeneration",
         "ViTModel")


def build_transformers(arch):
    """transformers.<arch>(tiny config) with random weights, eval mode."""
    from tests.corpus.torchvision_import import import_torchvision

    import_torchvision()  # NOTE: transformers may import torchvision; it must come in through the shim first
    import transformers

    config, input_names = _configs(transformers)[arch]
    torch.manual_seed(0)
    model = getattr(transformers, arch)(config)
    if input_names is None:
        make_inputs, input_names = image_inputs(3, 32), ("pixel_values",)
    else:
        make_inputs = token_inputs(VOCAB, LENGTH, input_names)
    make_nondegenerate(model, make_inputs, input_names)
    return CorpusModel(f"transformers/{arch}", model, make_inputs, (0,) * len(input_names), input_names)
