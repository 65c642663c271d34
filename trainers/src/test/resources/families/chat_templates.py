"""transformers' apply_chat_template with the real chat templates of the families' models, token by token.

usage: chat_templates.py OUT_DIR TOKENIZER_DIR

The real templates are the model repositories' own, as TRL ships them for identity checks (trl/chat_templates: the
original Gemma, Gemma 3, Phi-3, Phi-3.5, Llama 3 and Qwen2.5/Qwen3 templates). For each, TOKENIZER_DIR's tokenizer
(stories260K's) gets the family's turn markers as special tokens and its BOS/EOS, and is saved with the real template
to OUT_DIR/NAME, where NAME is Axolotl's chat_template name; OUT_DIR/expected.json holds, per name, the token ids of
every conversation below, with and without the generation prompt ("ERROR" where the template refuses it).
"""
import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import trl  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()

# Axolotl's name -> (TRL's copy of the model's template, the family's special tokens, BOS, EOS)
FAMILIES = {
    "gemma": ("gemma.jinja", ["<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>"),
    "gemma3": ("gemma3.jinja", ["<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>"),
    "phi_3": ("phi3.jinja", ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"], "<s>", "<|endoftext|>"),
    "phi_35": ("phi3_5.jinja", ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"], "<s>", "<|endoftext|>"),
    "llama3": ("llama3.jinja", ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"], "<|begin_of_text|>",
               "<|eot_id|>"),
    "qwen_25": ("qwen2_5.jinja", ["<|im_start|>", "<|im_end|>"], None, "<|im_end|>"),
    "qwen3": ("qwen3.jinja", ["<|im_start|>", "<|im_end|>", "<think>", "</think>"], None, "<|im_end|>"),
}

CONVERSATIONS = [
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"},
     {"role": "assistant", "content": "Goodbye."}],
    [{"role": "user", "content": " Spaces around \n"}, {"role": "assistant", "content": "\nNew line first, then é"}],
    [{"role": "user", "content": "One question"}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "Why?"},
     {"role": "assistant", "content": "<think>\nBecause.\n</think>\n\nIt is so."}],
]


def main(out, tokenizer_dir):
    expected = {}
    for name, (template, specials, bos, eos) in FAMILIES.items():
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        extra = {"additional_special_tokens": specials, "eos_token": eos}
        if bos is not None:
            extra["bos_token"] = bos
        tokenizer.add_special_tokens(extra)
        with open(os.path.join(os.path.dirname(trl.__file__), "chat_templates", template)) as f:
            tokenizer.chat_template = f.read()
        folder = os.path.join(out, name)
        tokenizer.save_pretrained(folder)
        renders = []
        for conversation in CONVERSATIONS:
            for generation_prompt in (False, True):
                try:
                    ids = tokenizer.apply_chat_template(conversation, tokenize=True,
                                                        add_generation_prompt=generation_prompt, return_dict=False)
                    renders.append(list(ids))
                except Exception:  # a refusal is a verdict to compare, not a crash
                    renders.append("ERROR")
        expected[name] = renders
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
