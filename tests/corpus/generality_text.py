"""Hugging Face transformers models beyond the corpus, for the generality sweep of `fxkit.from_torch`.

Tiny random configs (2 layers, hidden 64, vocabulary 1000, 16 tokens or a
32x32 image), built from Config objects only (nothing is downloaded), with no
key/value cache so that outputs are the model's tensors. ``GENERALITY`` lists
them by name; ``build_generality(name)`` returns a `CorpusModel`.
tests/interop/test_generality_text.py imports each with a symbolic batch and
compares it to PyTorch eager at two batch sizes.
"""
import functools

import torch

from tests.corpus.entry import CorpusModel, image_inputs, make_nondegenerate, token_inputs
from tests.corpus.text import FFN, HEADS, HIDDEN, LAYERS, LENGTH, VOCAB

_MASKED = ("input_ids", "attention_mask")
_SEQ2SEQ = ("input_ids", "attention_mask", "decoder_input_ids")
_IMAGE = ("pixel_values",)
SAMPLES = 400  # raw audio samples for Wav2Vec2 (a few conv frames)
MELS = 16


def _bert_like():
    return {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
            "intermediate_size": FFN, "max_position_embeddings": 64, "vocab_size": VOCAB}


def _decoder(kv_heads=2, **extra):
    return {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
            "num_key_value_heads": kv_heads, "intermediate_size": FFN, "max_position_embeddings": 64,
            "use_cache": False, "vocab_size": VOCAB, **extra}


def _seq2seq():
    return {"d_model": HIDDEN, "encoder_layers": LAYERS, "decoder_layers": LAYERS, "encoder_attention_heads": HEADS,
            "decoder_attention_heads": HEADS, "encoder_ffn_dim": FFN, "decoder_ffn_dim": FFN,
            "max_position_embeddings": 64, "use_cache": False, "vocab_size": VOCAB, "pad_token_id": 1,
            "decoder_start_token_id": 2, "eos_token_id": 2, "bos_token_id": 0}


def _vit_like():
    return {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
            "intermediate_size": FFN, "image_size": 32, "patch_size": 8}


# name: (transformers class, config class, config keywords, input names or an input kind)
SPECS = {
    "RobertaModel": ("RobertaModel", "RobertaConfig", dict(_bert_like(), max_position_embeddings=66), _MASKED),
    "AlbertModel": ("AlbertModel", "AlbertConfig", dict(_bert_like(), embedding_size=32), _MASKED),
    "ElectraModel": ("ElectraModel", "ElectraConfig", dict(_bert_like(), embedding_size=32), _MASKED),
    "MobileBertModel": ("MobileBertModel", "MobileBertConfig", dict(
        _bert_like(), embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32,
        num_feedforward_networks=2), _MASKED),
    "DebertaV2Model": ("DebertaV2Model", "DebertaV2Config", dict(
        _bert_like(), relative_attention=True, position_buckets=8, max_relative_positions=16,
        pos_att_type=["p2c", "c2p"]), _MASKED),
    "BertForSequenceClassification": ("BertForSequenceClassification", "BertConfig",
                                      dict(_bert_like(), num_labels=3), _MASKED),
    "DistilBertForSequenceClassification": ("DistilBertForSequenceClassification", "DistilBertConfig", dict(
        dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=FFN, max_position_embeddings=64, vocab_size=VOCAB,
        num_labels=3), _MASKED),
    "GPTNeoForCausalLM": ("GPTNeoForCausalLM", "GPTNeoConfig", dict(
        hidden_size=HIDDEN, num_layers=LAYERS, num_heads=HEADS, attention_types=[[["global", "local"], 1]],
        window_size=4, intermediate_size=FFN, max_position_embeddings=64, use_cache=False, vocab_size=VOCAB,
        bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1), _MASKED),
    "GPTJForCausalLM": ("GPTJForCausalLM", "GPTJConfig", dict(
        n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, rotary_dim=8, n_inner=FFN, n_positions=64, use_cache=False,
        vocab_size=VOCAB, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1), _MASKED),
    "OPTForCausalLM": ("OPTForCausalLM", "OPTConfig", dict(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, ffn_dim=FFN,
        word_embed_proj_dim=HIDDEN, max_position_embeddings=64, use_cache=False, vocab_size=VOCAB,
        pad_token_id=1, bos_token_id=2, eos_token_id=2), _MASKED),
    "BloomForCausalLM": ("BloomForCausalLM", "BloomConfig", dict(
        hidden_size=HIDDEN, n_layer=LAYERS, n_head=HEADS, use_cache=False, vocab_size=VOCAB), _MASKED),
    "MistralForCausalLM": ("MistralForCausalLM", "MistralConfig", _decoder(sliding_window=None), _MASKED),
    "Qwen2ForCausalLM": ("Qwen2ForCausalLM", "Qwen2Config", _decoder(), _MASKED),
    "Qwen3ForCausalLM": ("Qwen3ForCausalLM", "Qwen3Config", _decoder(head_dim=HIDDEN // HEADS), _MASKED),
    "PhiForCausalLM": ("PhiForCausalLM", "PhiConfig", _decoder(partial_rotary_factor=0.5), _MASKED),
    "Phi3ForCausalLM": ("Phi3ForCausalLM", "Phi3Config", _decoder(pad_token_id=0), _MASKED),
    "GemmaForCausalLM": ("GemmaForCausalLM", "GemmaConfig", _decoder(head_dim=HIDDEN // HEADS), _MASKED),
    "Gemma2ForCausalLM": ("Gemma2ForCausalLM", "Gemma2Config", _decoder(head_dim=HIDDEN // HEADS,
                                                                        sliding_window=8), _MASKED),
    "Gemma3ForCausalLM": ("Gemma3ForCausalLM", "Gemma3TextConfig", _decoder(head_dim=HIDDEN // HEADS,
                                                                            sliding_window=8), _MASKED),
    "FalconForCausalLM": ("FalconForCausalLM", "FalconConfig", dict(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, use_cache=False,
        vocab_size=VOCAB, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1), _MASKED),
    "MptForCausalLM": ("MptForCausalLM", "MptConfig", dict(
        d_model=HIDDEN, n_layers=LAYERS, n_heads=HEADS, expansion_ratio=2, max_seq_len=64, use_cache=False,
        vocab_size=VOCAB), _MASKED),
    "BartForConditionalGeneration": ("BartForConditionalGeneration", "BartConfig", _seq2seq(), _SEQ2SEQ),
    "MarianMTModel": ("MarianMTModel", "MarianConfig", _seq2seq(), _SEQ2SEQ),
    "WhisperModel": ("WhisperModel", "WhisperConfig", dict(
        d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN, num_mel_bins=MELS,
        max_source_positions=LENGTH, max_target_positions=64, use_cache=False, vocab_size=VOCAB,
        pad_token_id=1, decoder_start_token_id=2, eos_token_id=2, bos_token_id=0), "audio_features"),
    "CLIPTextModel": ("CLIPTextModel", "CLIPTextConfig", dict(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FFN,
        max_position_embeddings=64, vocab_size=VOCAB, eos_token_id=VOCAB - 1), _MASKED),
    "CLIPModel": ("CLIPModel", "CLIPConfig", dict(
        text_config=dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                         intermediate_size=FFN, max_position_embeddings=64, vocab_size=VOCAB,
                         eos_token_id=VOCAB - 1),
        vision_config=_vit_like(), projection_dim=32), ("input_ids", "pixel_values", "attention_mask")),
    "DeiTModel": ("DeiTModel", "DeiTConfig", _vit_like(), _IMAGE),
    "BeitModel": ("BeitModel", "BeitConfig", dict(_vit_like(), use_relative_position_bias=True), _IMAGE),
    "SwinModel": ("SwinModel", "SwinConfig", dict(
        image_size=32, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4), _IMAGE),
    "ConvNextModel": ("ConvNextModel", "ConvNextConfig", dict(
        hidden_sizes=[16, 32], depths=[1, 1], num_stages=2, image_size=32), _IMAGE),
    "SegformerModel": ("SegformerModel", "SegformerConfig", dict(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], patch_sizes=[7, 3],
        strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=32), _IMAGE),
    "Wav2Vec2Model": ("Wav2Vec2Model", "Wav2Vec2Config", dict(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FFN,
        conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4), "audio_samples"),
}

GENERALITY = tuple(SPECS)


def _audio_features(batch, seed):
    """Whisper's log-mel features: (batch, mels, 2 * max_source_positions), and decoder tokens."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, MELS, 2 * LENGTH, generator=generator),
            torch.randint(0, VOCAB, (batch, 8), generator=generator))


def _audio_samples(batch, seed):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, SAMPLES, generator=generator),)


def _clip_inputs(batch, seed):
    ids, mask = token_inputs(VOCAB, LENGTH, _MASKED)(batch, seed)
    return ids, image_inputs(3, 32)(batch, seed)[0], mask


_INPUTS = {"audio_features": (_audio_features, ("input_features", "decoder_input_ids")),
           "audio_samples": (_audio_samples, ("input_values",))}


@functools.lru_cache(maxsize=None)
def build_generality(name):
    """transformers.<name>(tiny config) with random weights, eval mode, as a `CorpusModel`."""
    from tests.corpus.torchvision_import import import_torchvision

    import_torchvision()  # NOTE: transformers may import torchvision; it must come in through the shim first
    import transformers

    if name not in SPECS:
        raise KeyError(f"unknown generality model {name!r}; known: {', '.join(GENERALITY)}")
    model_class, config_class, keywords, inputs = SPECS[name]
    config = getattr(transformers, config_class)(**keywords)
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config)
    if inputs in _INPUTS:
        make_inputs, input_names = _INPUTS[inputs]
    elif inputs == _IMAGE:
        make_inputs, input_names = image_inputs(3, 32), _IMAGE
    elif "pixel_values" in inputs:
        make_inputs, input_names = _clip_inputs, inputs
    else:
        make_inputs, input_names = token_inputs(VOCAB, LENGTH, inputs), inputs
    make_nondegenerate(model, make_inputs, input_names)
    return CorpusModel(f"transformers/{name}", model, make_inputs, (0,) * len(input_names), input_names)
