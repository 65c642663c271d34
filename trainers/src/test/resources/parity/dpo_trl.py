"""TRL's DPOTrainer.evaluate() on given pairs and a given LoRA adapter: the reference numbers DpoTrlParityTest
compares ours with.

usage: dpo_trl.py MODEL_DIR PAIRS_JSONL ADAPTER_DIR CASES_JSON OUT_JSON

Writes a random (seeded) LoRA adapter to ADAPTER_DIR with PEFT, so policy and reference differ, then for each case
({"name", "loss_type": [...], "loss_weights": [...] | null, "beta", "label_smoothing"}) builds a DPOTrainer with a
fresh LoRA of the same shape (reference = adapter disabled, as for a new adapter), puts the saved weights in it,
and records evaluate() with every pair in one batch.
"""
import json
import logging
import sys
import warnings

import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging
from trl import DPOConfig, DPOTrainer

warnings.filterwarnings("ignore")
hf_logging.set_verbosity_error()
logging.disable(logging.WARNING)

model_dir, pairs_path, adapter_dir, cases_path, out_path = sys.argv[1:6]
rows = [json.loads(line) for line in open(pairs_path) if line.strip()]
cases = json.load(open(cases_path))
tokenizer = AutoTokenizer.from_pretrained(model_dir)


def lora():
    return LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")


torch.manual_seed(1234)
seeded = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), lora())
with torch.no_grad():
    for name, param in seeded.named_parameters():
        if "lora_B" in name:
            param.normal_(0.0, 0.05)
seeded.save_pretrained(adapter_dir)
weights = load_file(f"{adapter_dir}/adapter_model.safetensors")

results = {}
for case in cases:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = DPOConfig(output_dir=f"{adapter_dir}/../trl-{case['name']}", per_device_eval_batch_size=len(rows),
                     report_to=[], use_cpu=True, beta=case["beta"], loss_type=case["loss_type"],
                     loss_weights=case.get("loss_weights"), label_smoothing=case.get("label_smoothing", 0.0),
                     disable_tqdm=True, bf16=False)  # TRL defaults to bf16 autocast; we compare float32
    trainer = DPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows),
                         eval_dataset=Dataset.from_list(rows), processing_class=tokenizer, peft_config=lora())
    result = set_peft_model_state_dict(trainer.model, weights)
    assert not result.unexpected_keys, result.unexpected_keys
    metrics = trainer.evaluate()
    results[case["name"]] = {k[len("eval_"):]: v for k, v in metrics.items() if k.startswith("eval_")}

json.dump(results, open(out_path, "w"), indent=1)
