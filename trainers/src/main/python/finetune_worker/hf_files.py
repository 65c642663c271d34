"""What makes a folder one the Hugging Face stack opens: the trained weights gathered from the shards in PEFT's or
transformers' layout, the tokenizer, and ``trainer_state.json`` in the HF Trainer's schema.

The final output and every ``checkpoint-N`` get the same files, as the JVM trainer writes them
(trainers/.../train/checkpoint/CheckpointStore.java and HfTrainerState.java), so ``PeftModel.from_pretrained``,
``AutoModelForCausalLM.from_pretrained``, ``TrainerState.load_from_json``, ``finetune generate`` and
``finetune merge-lora`` read a worker's folder as they read the JVM trainer's.
"""

import json
import os
import re
import shutil

from finetune_worker import distributed

TRAINER_STATE = "trainer_state.json"
# the weight files save_weights may write (hf_layout's names)
_WEIGHTS = re.compile(r"^(model(-\d{5}-of-\d{5})?\.safetensors|model\.safetensors\.index\.json)$")


def save_weights(model, plan, lora, world, folder):
    """The trained weights in Hugging Face's layout, every rank writing its own rows into the files (a collective:
    see hf_layout; nothing is gathered), and on rank 0 their config. Returns ``(names, digests)``: the files written
    (the same on every rank) and the SHA-256 of the weight files this rank created, for the checksums."""
    from finetune_worker import hf_layout

    names, digests = hf_layout.write(model, lora, world, folder, plan.output.max_file_bytes,
                                     plan.output.save_chunk_bytes)
    if lora:
        if world.rank == 0:
            adapter = plan.model.adapter
            if adapter.initial:
                shutil.copy(os.path.join(adapter.initial, "adapter_config.json"), folder)
            else:
                # PEFT made this adapter itself (a family the JVM trainer does not run): its config says what it adapts
                model.peft_config["default"].save_pretrained(folder)
        return names + ["adapter_config.json"], digests
    if world.rank == 0:
        shutil.copy(os.path.join(plan.model.path, "config.json"), folder)
    return names + ["config.json"], digests


def copy_tokenizer(plan, folder):
    for path in plan.output.tokenizer_files:
        if os.path.isfile(path):
            shutil.copy(path, folder)


def history_entries(line):
    """A metrics line as HF's ``log_history`` holds it: training and evaluation values are separate entries."""
    train, evaluation = {}, {}
    for key, value in line.items():
        if key in ("step", "epoch"):
            continue
        (evaluation if key.startswith("eval_") else train)[key] = value
    entries = []
    for entry in (train, evaluation):
        if entry:
            entry["epoch"] = line.get("epoch", 0)
            entry["step"] = line.get("step", 0)
            entries.append(entry)
    return entries


def read_history(folder):
    """The ``log_history`` of a checkpoint's ``trainer_state.json`` (a resumed run continues it)."""
    path = os.path.join(folder, TRAINER_STATE)
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        return list(json.load(f).get("log_history", []))


def write_trainer_state(folder, plan, step, epoch, tokens_seen, flos, history):
    """Exactly the fields of transformers' ``TrainerState`` dataclass (an unknown one is a TypeError there)."""
    state = {
        "best_global_step": None,
        "best_metric": None,
        "best_model_checkpoint": None,
        "epoch": epoch,
        "eval_steps": plan.training.eval_steps,
        "global_step": step,
        "is_hyper_param_search": False,
        "is_local_process_zero": True,
        "is_world_process_zero": True,
        "log_history": history,
        "logging_steps": plan.training.logging_steps,
        "max_steps": plan.training.total_steps,
        "num_input_tokens_seen": tokens_seen,
        "num_train_epochs": plan.training.num_epochs,
        "save_steps": plan.training.save_steps,
        # a Trainer continuing from this checkpoint updates TrainerControl's entry at its first save (KeyError
        # without it); the JVM trainer writes the same (HfTrainerState.statefulCallbacks)
        "stateful_callbacks": {"TrainerControl": {"args": {flag: False for flag in (
            "should_training_stop", "should_epoch_stop", "should_save", "should_evaluate", "should_log")},
            "attributes": {}}},
        "total_flos": flos,
        "train_batch_size": plan.data.micro_batch_size,
        "trial_name": None,
        "trial_params": None,
    }
    with open(os.path.join(folder, TRAINER_STATE), "w") as f:
        json.dump(state, f, indent=2, sort_keys=True)
        f.write("\n")


def save_final(model, plan, lora, world):
    """The trained result into ``output_dir``, each file renamed into place from a staging folder."""
    out = plan.output.dir
    staging = os.path.join(out, ".worker-final")
    if world.rank == 0:
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
    distributed.barrier()
    files, _ = save_weights(model, plan, lora, world, staging)
    distributed.barrier()
    if world.rank == 0:
        # a run that ends with fewer weight files than an earlier one in this folder leaves no stale shard behind
        for name in os.listdir(out):
            if _WEIGHTS.match(name) and name not in files:
                os.remove(os.path.join(out, name))
        for name in files:
            os.replace(os.path.join(staging, name), os.path.join(out, name))
        os.rmdir(staging)
    distributed.barrier()
    return files
