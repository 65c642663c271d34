"""What makes a folder one the Hugging Face stack opens: the trained weights gathered from the shards in PEFT's or
transformers' layout, the tokenizer, and ``trainer_state.json`` in the HF Trainer's schema.

The final output and every ``checkpoint-N`` get the same files, as the JVM trainer writes them
(trainers/.../train/checkpoint/CheckpointStore.java and HfTrainerState.java), so ``PeftModel.from_pretrained``,
``AutoModelForCausalLM.from_pretrained``, ``TrainerState.load_from_json``, ``finetune generate`` and
``finetune merge-lora`` read a worker's folder as they read the JVM trainer's.
"""

import json
import os
import shutil

from finetune_worker import distributed

TRAINER_STATE = "trainer_state.json"


def save_weights(model, plan, lora, world, folder):
    """Gathers the full weights (a collective: every rank calls it) and, on rank 0, writes them with their config
    into ``folder``; returns the names written (empty on the other ranks)."""
    from safetensors.torch import save_file
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=lora)
    state = get_model_state_dict(model, options=options)
    if world.rank != 0:
        return []
    if lora:
        from peft.utils import get_peft_model_state_dict

        adapter = get_peft_model_state_dict(model, state_dict=state)
        save_file({k: v.contiguous() for k, v in adapter.items()}, os.path.join(folder, "adapter_model.safetensors"),
                  metadata={"format": "pt"})
        adapter = plan.model.adapter
        if adapter.initial:
            shutil.copy(os.path.join(adapter.initial, "adapter_config.json"), folder)
        else:
            # PEFT made this adapter itself (a family the JVM trainer does not run): its config says what it adapts
            model.peft_config["default"].save_pretrained(folder)
        return ["adapter_model.safetensors", "adapter_config.json"]
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    save_file({k: v.contiguous() for k, v in state.items()}, os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})
    shutil.copy(os.path.join(plan.model.path, "config.json"), folder)
    return ["model.safetensors", "config.json"]


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
    files = save_weights(model, plan, lora, world, staging)
    if world.rank == 0:
        for name in files:
            os.replace(os.path.join(staging, name), os.path.join(out, name))
        os.rmdir(staging)
    distributed.barrier()
    return files
