"""transformers' rotary inverse frequencies, as the bits of each float32, one line per THETA:HEAD_DIM argument.

usage: rope_inv_freq.py THETA:HEAD_DIM...
"""
import sys

import torch

from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

for pair in sys.argv[1:]:
    theta, dim = pair.split(":")
    config = LlamaConfig(hidden_size=2 * int(dim), num_attention_heads=2, head_dim=int(dim), rope_theta=float(theta))
    frequencies = LlamaRotaryEmbedding(config).inv_freq
    print(" ".join(str(b) for b in frequencies.view(dtype=torch.int32).tolist()))
