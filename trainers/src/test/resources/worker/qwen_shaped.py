"""A random model of Qwen2.5-0.5B's shape (transformers' Qwen2 with its config: hidden 896, intermediate 4864, 14
query and 2 key/value heads, vocabulary 151,936, tied embeddings), saved in bf16 as the published checkpoint is, with
the story model's tokenizer (its ids are a subset of the vocabulary): what the world-size-1 worker's memory is
measured on against the plan.

usage: qwen_shaped.py OUT_DIR TOKENIZER_DIR [LAYERS]: LAYERS (default 24, the real model's) lets the suite keep every
width and the vocabulary, whose logits and embedding are the terms that matter, at a fraction of the step time."""
import shutil
import sys
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

out, tokenizer = Path(sys.argv[1]), Path(sys.argv[2])
layers = int(sys.argv[3]) if len(sys.argv) > 3 else 24
config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=layers,
                     num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rms_norm_eps=1e-6,
                     rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False, bos_token_id=1,
                     eos_token_id=2, torch_dtype="bfloat16")
torch.manual_seed(0)
model = Qwen2ForCausalLM(config).to(torch.bfloat16)
model.save_pretrained(out, safe_serialization=True)
for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
    shutil.copy(tokenizer / name, out / name)
print(sum(p.numel() for p in model.parameters()))
