"""Checkpoints the Hugging Face stack opens, with the sharded state for an exact resume beside them.

``checkpoint-N/`` holds what the HF Trainer saves (PEFT's adapter files or a model folder, the tokenizer,
``trainer_state.json``: see hf_files), and what only we read: ``dcp/``, the model and optimizer shards of
``torch.distributed.checkpoint`` (reshardable, so a checkpoint saved by W ranks loads on any other number), and
``worker_state.json`` (data position, resume key). ``checksums.sha256`` covers every file (``sha256sum -c`` reads it);
the launcher verifies it before a resume trusts a byte.

Every rank writes its DCP shards and its rows of the HF weight files (hf_layout) into ``.tmp-checkpoint-N`` and
hashes what it wrote; rank 0 then adds the tokenizer, the state and the checksums and renames the folder to
``checkpoint-N``. A folder named ``checkpoint-N`` is therefore always complete,
and a crash leaves at most a temporary folder that the next start removes.

Nothing random needs saving: data order and learning rates come from the Java side's schedule, and dropout is
reseeded from (seed, step, micro batch, rank) at every micro batch.
"""

import json
import os
import re
import shutil
import signal

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from finetune_worker import distributed, hf_files, hf_layout, safe_dcp

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
    """``trainer_state``: epoch, tokens_seen, flos and history for hf_files.write_trainer_state.

    Nothing is gathered and every rank hashes what it wrote: its own DCP shard files and the weight files it created
    (hf_layout); rank 0 hashes only the small files it writes itself. ``save_only_model``: the weights and the HF
    files, no DCP state (such a checkpoint cannot be resumed, as with HF's Trainer); ``checkpoint_weights`` false
    (``fsdp_config.state_dict_type: SHARDED_STATE_DICT``): the DCP shards without the HF weights."""
    final = os.path.join(output_dir, "checkpoint-%d" % step)
    temporary = os.path.join(output_dir, ".tmp-checkpoint-%d" % step)
    if world.rank == 0:
        shutil.rmtree(temporary, ignore_errors=True)
        os.makedirs(temporary)
    distributed.barrier()
    output = plan.output
    digests = {}
    if not output.save_only_model:
        model_state, optimizer_state = get_state_dict(model, optimizer, options=_options(lora))
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=os.path.join(temporary, "dcp"))
        del model_state, optimizer_state
        # DCP's FileSystemWriter names each rank's files __<rank>_<n>.distcp and fsyncs them
        shards = os.path.join(temporary, "dcp")
        for name in sorted(os.listdir(shards)):
            if name.startswith("__%d_" % world.rank) and name.endswith(".distcp"):
                digests["dcp/" + name] = hf_layout.sha256(os.path.join(shards, name))
    if output.save_only_model or output.checkpoint_weights:
        _, written = hf_files.save_weights(model, plan, lora, world, temporary)
        digests.update(written)
    # Failure drill for the tests: this rank dies halfway through the save, its files written, the folder not yet
    # renamed (the previous checkpoint must stay the one a resume finds).
    if os.environ.get("FINETUNE_WORKER_KILL_IN_SAVE") == "%d:%d" % (world.rank, step):
        os.kill(os.getpid(), signal.SIGKILL)
    everyone = distributed.gather_objects(digests)
    if world.rank == 0:
        hf_files.copy_tokenizer(plan, temporary)
        hf_files.write_trainer_state(temporary, plan, step, **trainer_state)
        if output.save_only_model:
            state = dict(state, model_only=True)
        with open(os.path.join(temporary, STATE_FILE), "w") as f:
            json.dump(state, f, indent=2, sort_keys=True)
        hashed = {}
        for part in everyone:
            hashed.update(part)
        _write_checksums(temporary, hashed)
        for path in _files(temporary):
            if os.path.relpath(path, temporary) not in hashed:
                _fsync(path)  # the other ranks fsynced what they wrote
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
    if state.get("model_only"):
        raise ValueError("%s was saved with save_only_model: it holds no optimizer state to resume from"
                         % folder)
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


def _write_checksums(folder, hashed):
    """``checksums.sha256`` over every file of ``folder``: the digests the ranks computed (``hashed``, by relative
    path), the rest hashed here."""
    lines = []
    for path in _files(folder):
        name = os.path.relpath(path, folder)
        digest = hashed.get(name) or hf_layout.sha256(path)
        lines.append("%s  %s\n" % (digest, name))
    with open(os.path.join(folder, CHECKSUMS), "w") as f:
        f.write("".join(lines))


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
