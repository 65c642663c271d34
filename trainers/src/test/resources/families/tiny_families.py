"""Tiny random models of every family finetune knows, built by transformers itself.

usage: tiny_families.py OUT_DIR [--weights TOKENIZER_DIR] [--wide] [VARIANT...]

For each variant (all when none is named) writes OUT_DIR/VARIANT/config.json as transformers saves it and, with
--weights, the random weights (model.safetensors) and the tokenizer files copied from TOKENIZER_DIR. OUT_DIR/expected.json
holds, per variant, what transformers counts: num_parameters() and every named parameter with its shape, for the plan
to be checked against (FamilyShapesTest). --wide makes every width 8 times wider and the vocabulary 32000: tens of
millions of parameters, so that a measured peak tells the plan's per-family terms from the runtime's fixed cost.
"""
import json
import os
import shutil
import sys
import warnings

import torch

warnings.filterwarnings("ignore")

from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

# Small widths, a few layers, every structural switch of the family turned on somewhere: biases, tied and untied
# heads, head_dim wider than hidden/heads, sliding windows shorter than a test sequence, dense layers among MoE ones.
BASE = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=512, max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0)
VARIANTS = {
    "llama": ("llama", dict(tie_word_embeddings=False)),
    "llama-biases-tied": ("llama", dict(attention_bias=True, mlp_bias=True, tie_word_embeddings=True)),
    "llama3-scaled": ("llama", dict(rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                                                         low_freq_factor=1.0, high_freq_factor=4.0,
                                                         original_max_position_embeddings=64))),
    "mistral": ("mistral", dict(sliding_window=4)),
    "mixtral": ("mixtral", dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=None,
                                output_router_logits=True, router_aux_loss_coef=0.02)),
    "qwen2": ("qwen2", dict(tie_word_embeddings=True)),
    "qwen3": ("qwen3", dict(head_dim=16, tie_word_embeddings=False)),
    "qwen2_moe": ("qwen2_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                                    shared_expert_intermediate_size=40, num_hidden_layers=3, mlp_only_layers=[1],
                                    output_router_logits=True)),
    "qwen3_moe": ("qwen3_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, head_dim=8,
                                    output_router_logits=True)),
    "qwen3_moe-dense-layer": ("qwen3_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                                                num_hidden_layers=3, decoder_sparse_step=1, mlp_only_layers=[0])),
    "gemma2": ("gemma2", dict(head_dim=16, sliding_window=4, query_pre_attn_scalar=16)),
    "gemma3": ("gemma3_text", dict(head_dim=16, sliding_window=4, query_pre_attn_scalar=16, num_hidden_layers=3)),
    "phi3": ("phi3", dict(sliding_window=None)),
    "olmo": ("olmo", dict(attention_bias=True)),
    "olmo2": ("olmo2", dict()),
    "olmo3": ("olmo3", dict(sliding_window=4, num_hidden_layers=4)),
    "granite": ("granite", dict(attention_bias=True, mlp_bias=True, embedding_multiplier=12.0,
                                residual_multiplier=0.22, attention_multiplier=0.015625, logits_scaling=8.0)),
}


WIDER = ("hidden_size", "intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size", "head_dim",
         "query_pre_attn_scalar")


def build(name, wide=False):
    model_type, extra = VARIANTS[name]
    kwargs = dict(BASE)
    kwargs.update(extra)
    if wide:
        kwargs.update({k: 8 * kwargs[k] for k in WIDER if kwargs.get(k)})
        kwargs.update(vocab_size=32000, num_attention_heads=8, num_key_value_heads=4)
    config = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(sum(map(ord, name)))
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # transformers' init gives tiny std 0.02 weights; wider ones make logits that tell a wrong layer from a right one
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0.0, 0.15)
    return model


def main(argv):
    out = argv[0]
    tokenizer = None
    rest = argv[1:]
    if rest[:1] == ["--weights"]:
        tokenizer = rest[1]
        rest = rest[2:]
    wide = rest[:1] == ["--wide"]
    rest = rest[1:] if wide else rest
    names = rest or list(VARIANTS)
    expected = {}
    for name in names:
        model = build(name, wide)
        folder = os.path.join(out, name)
        if tokenizer:
            model.save_pretrained(folder, safe_serialization=True)
            for file in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
                if os.path.exists(os.path.join(tokenizer, file)):
                    shutil.copy(os.path.join(tokenizer, file), folder)
        else:
            model.config.save_pretrained(folder)
        expected[name] = {
            "model_type": model.config.model_type,
            "num_parameters": model.num_parameters(),
            "parameters": {n: list(p.shape) for n, p in model.named_parameters()},
            "no_split_modules": sorted(model._no_split_modules or []),
        }
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
