"""TRL's GRPO advantages and _compute_loss for fixed completions and rewards: the reference numbers
GrpoTrlParityTest compares ours with.

usage: grpo_trl.py MODEL_DIR ADAPTER_DIR INPUT_JSON OUT_JSON

INPUT_JSON: {"prompts": [text, ...], "num_generations": G, "completions": [[ids], ...] (G per prompt, prompt-major),
"rewards": [float, ...] (one per completion), "old_offsets": [[float per completion token], ...],
"cases": [{"name", "loss_type", "beta", "epsilon", "epsilon_high", "delta", "scale_rewards",
"mask_truncated_completions", "use_bias_correction_kl", "max_completion_length"}]}.

ADAPTER_DIR receives a seeded random PEFT LoRA adapter (r 4, alpha 8, all linear layers), as in dpo_trl.py. For each
case a GRPOTrainer with a fresh LoRA of that shape gets those weights (the reference is the adapter disabled),
its generation is replaced by the fixed completions, _generate_and_score_completions gives the advantages and the
logged metrics, and _compute_loss the loss, in eval mode (no accumulation scaling). The sampling log-probabilities
are the policy's own plus old_offsets, so the clipping is exercised; they are written out for the test to use.
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
from trl import GRPOConfig, GRPOTrainer

warnings.filterwarnings("ignore")
hf_logging.set_verbosity_error()
logging.disable(logging.WARNING)

model_dir, adapter_dir, input_path, out_path = sys.argv[1:5]
spec = json.load(open(input_path))
tokenizer = AutoTokenizer.from_pretrained(model_dir)
def lora():
    return LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")


torch.manual_seed(4321)
seeded = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), lora())
with torch.no_grad():
    for name, param in seeded.named_parameters():
        if "lora_B" in name:
            param.normal_(0.0, 0.05)
seeded.save_pretrained(adapter_dir)
weights = load_file(f"{adapter_dir}/adapter_model.safetensors")
prompts, G, completions, rewards = spec["prompts"], spec["num_generations"], spec["completions"], spec["rewards"]
n = len(completions)


def fixed_reward(completions, **kwargs):
    assert len(completions) == n
    return list(rewards)


results = {}
for case in spec["cases"]:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = GRPOConfig(output_dir=f"{adapter_dir}/../grpo-{case['name']}", per_device_train_batch_size=n,
                      per_device_eval_batch_size=n, num_generations=G,
                      max_completion_length=case["max_completion_length"], loss_type=case["loss_type"],
                      beta=case["beta"], epsilon=case["epsilon"], epsilon_high=case.get("epsilon_high"),
                      delta=case.get("delta"), scale_rewards=case["scale_rewards"],
                      mask_truncated_completions=case["mask_truncated_completions"],
                      use_bias_correction_kl=case["use_bias_correction_kl"], report_to=[], use_cpu=True,
                      bf16=False, disable_tqdm=True)
    trainer = GRPOTrainer(model=model, reward_funcs=[fixed_reward], args=args,
                          train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
                          processing_class=tokenizer,
                          peft_config=lora())
    loaded = set_peft_model_state_dict(trainer.model, weights)
    assert not loaded.unexpected_keys, loaded.unexpected_keys
    trainer.model.eval()
    trainer._generate_single_turn = lambda prompt_ids, images, fields, has_tool_images=False: (
        [list(c) for c in completions], None)
    with torch.no_grad():
        out = trainer._generate_and_score_completions([{"prompt": p} for p in prompts for _ in range(G)])
        prompt_lengths = {int(m.sum()) for m in out["prompt_mask"]}
        assert len(prompt_lengths) == 1, f"prompts of different token lengths {prompt_lengths}: TRL pads them left"
        input_ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        attention = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, input_ids, attention,
                                                                  out["completion_ids"].size(1))
        offsets = torch.zeros_like(logps)
        for i, row in enumerate(spec["old_offsets"]):
            offsets[i, : len(row)] = torch.tensor(row)
        out["old_per_token_logps"] = (logps + offsets) * out["completion_mask"]
        loss = trainer._compute_loss(trainer.model, out)
    metrics = {k: sum(v) / len(v) for k, v in trainer._metrics["eval"].items() if len(v) > 0}
    results[case["name"]] = {
        "loss": loss.item(),
        "advantages": out["advantages"].tolist(),
        "old": [row[: len(c)] for row, c in zip(out["old_per_token_logps"].tolist(), completions)],
        "prompt_ids": out["prompt_ids"].tolist(),
        "metrics": metrics,
    }
json.dump(results, open(out_path, "w"), indent=1)
