"""The Hugging Face stack's view of our files: writes PEFT adapters, or loads ours, reports the last-position logits
of a prompt, and reads trainer states, for a list of jobs in one process (each process pays seconds to import
torch, transformers and PEFT).

usage: peft_logits.py JOBS_JSON OUT_JSON

JOBS_JSON is a list of jobs; OUT_JSON gets a list of their results, in the same order:
  {"job": "write", "model": MODEL_DIR, "adapter": ADAPTER_DIR, "layers": "all" | "1,3",
   "exclude": "a,b" | "-", "r": 4, "alpha": 8, "targets": "all-linear" | null}
        writes a seeded LoRA adapter (r 4, alpha 8 unless given) on q_proj and v_proj (or targets) of the given
        layers only (layers_to_transform), leaving out the module names in exclude (exclude_modules); result {}
  {"job": "logits", "dir": ADAPTER_DIR, "prompt": "1,403,..."}
        PeftModel.from_pretrained(base, ADAPTER_DIR) and the logits after the prompt's ids, twice: from the forward
        over the whole prompt (last_logits) and with logits_to_keep=1 as transformers' generate() asks for them
        (generate_logits); reports any missing or unexpected adapter key
  {"job": "model", "dir": MODEL_DIR, "prompt": "1,403,..."}
        the same for a full model folder, loaded with AutoModelForCausalLM.from_pretrained
  {"job": "state", "dir": CHECKPOINT_DIR}
        trainer_state.json read with transformers' own TrainerState.load_from_json: its global_step and the number
        of log_history entries
"""
import json
import logging
import sys
import warnings

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.utils import load_peft_weights, set_peft_model_state_dict
from transformers import AutoModelForCausalLM, TrainerState
from transformers.utils import logging as hf_logging

warnings.filterwarnings("ignore")
hf_logging.set_verbosity_error()
logging.disable(logging.WARNING)


def write(job):
    layers = job.get("layers", "all")
    exclude = job.get("exclude", "-")
    config = LoraConfig(r=job.get("r", 4), lora_alpha=job.get("alpha", 8), lora_dropout=0.0,
                        target_modules=job.get("targets") or ["q_proj", "v_proj"],
                        layers_to_transform=None if layers == "all" else [int(x) for x in layers.split(",")],
                        exclude_modules=None if exclude == "-" else exclude.split(","), task_type="CAUSAL_LM")
    # seeded per adapter, so an adapter's values do not depend on which jobs ran before it
    torch.manual_seed(7)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(job["model"], dtype=torch.float32), config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.2)
    model.save_pretrained(job["adapter"])
    return {}


def last_logits(model, prompt):
    model.eval()
    ids = torch.tensor([[int(x) for x in prompt.split(",")]])
    with torch.no_grad():
        logits = model(ids).logits[0, -1].tolist()
        generated = model(ids, logits_to_keep=1).logits[0, -1].tolist()
    return {"last_logits": logits, "generate_logits": generated}


def model_logits(job):
    model, info = AutoModelForCausalLM.from_pretrained(job["dir"], dtype=torch.float32, output_loading_info=True)
    result = last_logits(model, job["prompt"])
    result.update(missing=list(info["missing_keys"]), unexpected=list(info["unexpected_keys"]))
    return result


def adapter_logits(job):
    adapter_dir = job["dir"]
    config = json.load(open(f"{adapter_dir}/adapter_config.json"))
    base = AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"], dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter_dir)
    # PEFT warns rather than fails on missing/unexpected keys; load again to see them
    loaded = set_peft_model_state_dict(model, load_peft_weights(adapter_dir))
    result = last_logits(model, job["prompt"])
    result.update(missing=[k for k in loaded.missing_keys if "lora_" in k], unexpected=list(loaded.unexpected_keys))
    return result


def trainer_state(job):
    state = TrainerState.load_from_json(f"{job['dir']}/trainer_state.json")
    return {"global_step": state.global_step, "log_history": len(state.log_history)}


JOBS = {"write": write, "logits": adapter_logits, "model": model_logits, "state": trainer_state}

if __name__ == "__main__":
    jobs = json.load(open(sys.argv[1]))
    json.dump([JOBS[job["job"]](job) for job in jobs], open(sys.argv[2], "w"))
