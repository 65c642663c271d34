"""Checkpoints the Hugging Face stack opens, with the sharded state for an exact resume beside them.

``checkpoint-N/`` holds what the HF Trainer saves (PEFT's adapter files or a model folder, the tokenizer,
``trainer_state.json``: see hf_files), and what only we read: ``dcp/``, the model and optimizer shards of
``torch.distributed.checkpoint`` (reshardable, so a checkpoint saved by W ranks loads on any other number), and
``worker_state.json`` (data position, resume key). ``checksums.sha256`` covers every file (``sha256sum -c`` reads it);
the launcher verifies it before a resume trusts a byte.

Every rank writes its shards into ``.tmp-checkpoint-N``; after a barrier rank 0 adds the HF files, the state and the
checksums and renames the folder to ``checkpoint-N``. A folder named ``checkpoint-N`` is therefore always complete,
and a crash leaves at most a temporary folder that the next start removes.

Nothing random needs saving: data order and learning rates come from the Java side's schedule, and dropout is
reseeded from (seed, step, micro batch, rank) at every micro batch.
"""

import hashlib
import json
import os
import re
import shutil

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from finetune_worker import distributed, hf_files, safe_dcp

STATE_FILE = "worker_state.json"
CHECKSUMS = "checksums.sha256"
_NAME = re.compile(r"^checkpoint-(\d+)$")


def _options(lora):
    # A LoRA run's frozen base weights come from base_model again on resume; saving them would cost a model copy.
    return StateDictOptions(ignore_frozen_params=lora)


def complete(output_dir):
    """Complete checkpoints, oldest first, as (step, folder)."""
    found = []
    if os.path.isdir(output_dir):
        for name in os.listdir(output_dir):
            match = _NAME.match(name)
            folder = os.path.join(output_dir, name)
            if match and os.path.isfile(os.path.join(folder, STATE_FILE)):
                found.append((int(match.group(1)), folder))
    return sorted(found)


def remove_leftovers(output_dir, world):
    if world.rank == 0 and os.path.isdir(output_dir):
        for name in os.listdir(output_dir):
            if name.startswith(".tmp-checkpoint-"):
                shutil.rmtree(os.path.join(output_dir, name), ignore_errors=True)
    distributed.barrier()


def save(output_dir, step, model, optimizer, state, lora, keep, world, plan, trainer_state):
    """``trainer_state``: epoch, tokens_seen, flos and history for hf_files.write_trainer_state."""
    final = os.path.join(output_dir, "checkpoint-%d" % step)
    temporary = os.path.join(output_dir, ".tmp-checkpoint-%d" % step)
    if world.rank == 0:
        shutil.rmtree(temporary, ignore_errors=True)
        os.makedirs(temporary)
    distributed.barrier()
    model_state, optimizer_state = get_state_dict(model, optimizer, options=_options(lora))
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=os.path.join(temporary, "dcp"))
    hf_files.save_weights(model, plan, lora, world, temporary)
    distributed.barrier()
    if world.rank == 0:
        hf_files.copy_tokenizer(plan, temporary)
        hf_files.write_trainer_state(temporary, plan, step, **trainer_state)
        with open(os.path.join(temporary, STATE_FILE), "w") as f:
            json.dump(state, f, indent=2, sort_keys=True)
        _write_checksums(temporary)
        for path in _files(temporary):
            _fsync(path)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(temporary, final)
        _fsync(output_dir)
        if keep and keep > 0:
            for _, old in complete(output_dir)[:-keep]:
                shutil.rmtree(old, ignore_errors=True)
    distributed.barrier()
    return final


def load(folder, model, optimizer, lora):
    """Loads weights and optimizer moments in place (resharding as needed) and returns the saved state. The
    launcher verified the folder's checksums and its DCP metadata before it started the ranks; the metadata is read
    safely here too."""
    with open(os.path.join(folder, STATE_FILE)) as f:
        state = json.load(f)
    options = _options(lora)
    model_state, optimizer_state = get_state_dict(model, optimizer, options=options)
    if lora:
        # the frozen base weights are not in a LoRA checkpoint: they are already loaded from base_model
        options = StateDictOptions(ignore_frozen_params=True, strict=False)
    loaded = {"model": model_state, "optimizer": optimizer_state}
    # never DCP's own reader and planner: they unpickle what the folder holds (safe_dcp)
    path = os.path.join(folder, "dcp")
    dcp.load(loaded, checkpoint_id=path, storage_reader=safe_dcp.SafeReader(path), planner=safe_dcp.SafePlanner())
    set_state_dict(model, optimizer, model_state_dict=loaded["model"], optim_state_dict=loaded["optimizer"],
                   options=options)
    return state


def _files(folder):
    """Every file under ``folder`` as a path relative to it, sorted."""
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            found.append(os.path.relpath(os.path.join(root, name), folder))
    return [os.path.join(folder, p) for p in sorted(found)]


def _write_checksums(folder):
    lines = []
    for path in _files(folder):
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        lines.append("%s  %s\n" % (digest.hexdigest(), os.path.relpath(path, folder)))
    with open(os.path.join(folder, CHECKSUMS), "w") as f:
        f.write("".join(lines))


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
