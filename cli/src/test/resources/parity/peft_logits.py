"""PEFT's view of adapters: writes one, or loads ours, and reports the last-position logits of a prompt.

usage:
  peft_logits.py write MODEL_DIR ADAPTER_DIR LAYERS [EXCLUDE [R ALPHA [TARGETS]]]
                                                      writes a seeded LoRA adapter (r 4, alpha 8 unless given) on
                                                      q_proj and v_proj (or TARGETS, e.g. all-linear) of the given
                                                      layers only (layers_to_transform), "all" for every one,
                                                      leaving out the comma-separated module names EXCLUDE
                                                      (exclude_modules, "-" for none)
  peft_logits.py logits ADAPTER_DIR PROMPT_IDS OUT_JSON
                                                      PeftModel.from_pretrained(base, ADAPTER_DIR) and the logits
                                                      after the comma-separated PROMPT_IDS, twice: from the forward
                                                      over the whole prompt (last_logits) and with logits_to_keep=1
                                                      as transformers' generate() asks for them (generate_logits);
                                                      reports any missing or unexpected adapter key
  peft_logits.py model MODEL_DIR PROMPT_IDS OUT_JSON  the same for a full model folder, loaded with
                                                      AutoModelForCausalLM.from_pretrained
"""
import json
import logging
import sys
import warnings

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

warnings.filterwarnings("ignore")
hf_logging.set_verbosity_error()
logging.disable(logging.WARNING)

if sys.argv[1] == "write":
    model_dir, adapter_dir, layers = sys.argv[2:5]
    exclude = sys.argv[5] if len(sys.argv) > 5 else "-"
    rank, alpha = (int(sys.argv[6]), int(sys.argv[7])) if len(sys.argv) > 7 else (4, 8)
    targets = sys.argv[8] if len(sys.argv) > 8 else ["q_proj", "v_proj"]
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=targets,
                        layers_to_transform=None if layers == "all" else [int(x) for x in layers.split(",")],
                        exclude_modules=None if exclude == "-" else exclude.split(","), task_type="CAUSAL_LM")
    torch.manual_seed(7)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.2)
    model.save_pretrained(adapter_dir)
elif sys.argv[1] == "model":
    model_dir, prompt_ids, out_path = sys.argv[2:5]
    model, info = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, output_loading_info=True)
    model.eval()
    ids = torch.tensor([[int(x) for x in prompt_ids.split(",")]])
    with torch.no_grad():
        logits = model(ids).logits[0, -1].tolist()
        generated = model(ids, logits_to_keep=1).logits[0, -1].tolist()
    json.dump({"last_logits": logits, "generate_logits": generated, "missing": list(info["missing_keys"]),
               "unexpected": list(info["unexpected_keys"])}, open(out_path, "w"))
else:
    adapter_dir, prompt_ids, out_path = sys.argv[2:5]
    config = json.load(open(f"{adapter_dir}/adapter_config.json"))
    base = AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"], dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter_dir)
    # PEFT warns rather than fails on missing/unexpected keys; load again to see them
    from peft.utils import load_peft_weights, set_peft_model_state_dict
    result = set_peft_model_state_dict(model, load_peft_weights(adapter_dir))
    missing = [k for k in result.missing_keys if "lora_" in k]
    model.eval()
    ids = torch.tensor([[int(x) for x in prompt_ids.split(",")]])
    with torch.no_grad():
        logits = model(ids).logits[0, -1].tolist()
        generated = model(ids, logits_to_keep=1).logits[0, -1].tolist()
    json.dump({"last_logits": logits, "generate_logits": generated, "missing": missing,
               "unexpected": list(result.unexpected_keys)},
              open(out_path, "w"))
