"""What TRL trains in a conversation with Qwen2.5's template: apply_chat_template with TRL's generation-tagged
copy of it (trl/chat_templates/qwen2_5_training.jinja) and return_assistant_tokens_mask, the masks TRL's SFTTrainer
uses for assistant_only_loss.

usage: chat_mask_trl.py MODEL_DIR MESSAGES_JSON OUT_JSON TOKENIZER_OUT

The tokenizer is MODEL_DIR's with Qwen's <|im_start|> and <|im_end|> added as special tokens and <|im_end|> as
EOS, as Qwen2.5-Instruct's has them; it is saved to TOKENIZER_OUT for the test to load the same one.
"""
import json
import os
import sys
import warnings

import trl
from transformers import AutoTokenizer
from transformers.utils import logging as hf_logging

warnings.filterwarnings("ignore")
hf_logging.set_verbosity_error()

model_dir, messages_path, out_path, tokenizer_out = sys.argv[1:5]
tokenizer = AutoTokenizer.from_pretrained(model_dir)
tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "eos_token": "<|im_end|>"})
template = os.path.join(os.path.dirname(trl.__file__), "chat_templates", "qwen2_5_training.jinja")
tokenizer.chat_template = open(template).read()
tokenizer.save_pretrained(tokenizer_out)
out = tokenizer.apply_chat_template(json.load(open(messages_path)), tokenize=True, return_dict=True,
                                    return_assistant_tokens_mask=True)
json.dump({"input_ids": list(out["input_ids"]), "assistant_masks": list(out["assistant_masks"]),
           "newline": tokenizer("\n", add_special_tokens=False)["input_ids"]}, open(out_path, "w"))
