"""The Hugging Face Trainer continuing one of our checkpoints: Trainer.train(resume_from_checkpoint=...) for one
more step, which ends with the Trainer's own save (where a missing stateful_callbacks entry raised KeyError).

    python hf_trainer_resume.py BASE_MODEL CHECKPOINT OUT_DIR

Prints one JSON line: the step the Trainer resumed at and the global_step of the checkpoint it saved.
"""
import json
import os
import sys

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

base, checkpoint, out = sys.argv[1:4]
with open(os.path.join(checkpoint, "trainer_state.json")) as f:
    step = json.load(f)["global_step"]
model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
if os.path.isfile(os.path.join(checkpoint, "adapter_config.json")):
    model = PeftModel.from_pretrained(model, checkpoint, is_trainable=True)
torch.manual_seed(0)
rows = [{"input_ids": ids, "labels": ids} for ids in torch.randint(3, 500, (4 * (step + 2), 16))]
args = TrainingArguments(output_dir=out, max_steps=step + 1, save_steps=1, save_strategy="steps",
                         per_device_train_batch_size=1, report_to=[], use_cpu=True, logging_steps=1)
Trainer(model=model, args=args, train_dataset=rows).train(resume_from_checkpoint=checkpoint)
with open(os.path.join(out, "checkpoint-%d" % (step + 1), "trainer_state.json")) as f:
    saved = json.load(f)
print(json.dumps({"resumed_at": step, "saved_step": saved["global_step"],
                  "stateful_callbacks": sorted(saved["stateful_callbacks"])}))
