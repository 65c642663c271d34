"""The trained weights in Hugging Face's layout, written by every rank at once: nothing is gathered.

FSDP2 shards each parameter by rows (dim 0, ``torch.chunk`` pieces), and safetensors stores a tensor's rows one after
the other: a rank's shard is therefore one contiguous byte range of the tensor in the file. So the layout (which
tensor goes into which file, at which offset) is computed on every rank from the global shapes and dtypes alone, the
owner of each file creates it with its header at its full size, and then every rank writes its own rows into every
file with ``pwrite``. No rank holds more than its own shards plus one staging chunk (``chunk_bytes``, a copy from the
device; none on CPU), and each rank writes 1/W of the bytes. The files then are hashed in parallel: each file by the
rank that created it.

What comes out is what ``save_pretrained`` writes: ``model.safetensors``, or size-bounded
``model-0000i-of-0000N.safetensors`` files with ``model.safetensors.index.json``, for a full fine-tune (the tensors
in the dtype they are trained in); ``adapter_model.safetensors`` (PEFT's names, one file, as PEFT reads it) for LoRA.

The folder must be one that every rank sees (on several nodes a shared file system), as for the DCP shards beside it.
"""

import hashlib
import json
import os
import struct

import torch

from finetune_worker import distributed

INDEX = "model.safetensors.index.json"
ADAPTER = "adapter_model.safetensors"

# safetensors' dtype names (the format's spec)
_DTYPES = {
    torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL",
}


class Entry:
    """One tensor of the output: its name in the file, the model's tensor it comes from, where its bytes go."""

    def __init__(self, name, tensor):
        self.name = name
        self.tensor = tensor
        self.dtype = tensor.dtype
        self.shape = tuple(tensor.shape)
        self.nbytes = _numel(self.shape) * tensor.element_size()
        self.file = None
        self.begin = 0  # in the file's data section

    @property
    def header(self):
        return {"dtype": _DTYPES[self.dtype], "shape": list(self.shape),
                "data_offsets": [self.begin, self.begin + self.nbytes]}


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def entries(model, lora):
    """The output's tensors in the model's order: PEFT's adapter names for LoRA, the checkpoint's names (persistent
    buffers included, a tied head left out: it is the embedding) for a full fine-tune."""
    if lora:
        from peft.utils import get_peft_model_state_dict

        # PEFT's own renaming (drops the adapter's name, keeps only its tensors) over the parameter objects: no byte
        # is read, the values are the sharded parameters themselves
        named = dict(model.named_parameters())
        renamed = get_peft_model_state_dict(model, state_dict=named)
        return [Entry(name, tensor) for name, tensor in renamed.items()]
    found, seen = [], set()
    state = model.state_dict(keep_vars=True)
    tied = getattr(model.config, "tie_word_embeddings", False)
    for name, tensor in state.items():
        if id(tensor) in seen or (tied and name == "lm_head.weight"):
            continue
        seen.add(id(tensor))
        found.append(Entry(name, tensor))
    return found


def layout(found, lora, max_file_bytes):
    """Assigns each entry a file and an offset (greedy in order, a new file when the next tensor would pass
    ``max_file_bytes``; a larger tensor alone in its own); returns the file names in order."""
    groups = [[]]
    size = 0
    for entry in found:
        if not lora and groups[-1] and size + entry.nbytes > max_file_bytes:
            groups.append([])
            size = 0
        groups[-1].append(entry)
        size += entry.nbytes
    if lora:
        names = [ADAPTER]
    elif len(groups) == 1:
        names = ["model.safetensors"]
    else:
        names = ["model-%05d-of-%05d.safetensors" % (i + 1, len(groups)) for i in range(len(groups))]
    for name, group in zip(names, groups):
        offset = 0
        for entry in group:
            entry.file = name
            entry.begin = offset
            offset += entry.nbytes
    return names


def header_bytes(found, file):
    """The file's header: u64 length, then the JSON, padded with spaces to 8 bytes (as safetensors writes it)."""
    header = {e.name: e.header for e in found if e.file == file}
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def _local_rows(tensor, rank):
    """This rank's rows (a view of its shard) and the first row's index, or (None, 0) when another rank writes the
    tensor (a replicated tensor, e.g. a buffer, is written by rank 0)."""
    from torch.distributed.tensor import DTensor

    if isinstance(tensor, DTensor):
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        local = tensor.to_local()
        _, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh, tensor.placements)
        return local, (offset[0] if offset else 0)
    if rank != 0:
        return None, 0
    return tensor.detach(), 0


def write(model, lora, world, folder, max_file_bytes, chunk_bytes):
    """Writes the weights into ``folder`` (a collective: every rank calls it) and returns ``(names, digests)``: the
    files written, and the SHA-256 of each file this rank created (by name)."""
    found = entries(model, lora)
    names = layout(found, lora, max_file_bytes)
    mine = [name for i, name in enumerate(names) if i % world.size == world.rank]
    starts = {}
    for name in names:
        starts[name] = len(header_bytes(found, name))
    for name in mine:
        head = header_bytes(found, name)
        size = len(head) + sum(e.nbytes for e in found if e.file == name)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(head)
            f.truncate(size)  # the data section, filled by every rank below
    distributed.barrier()
    descriptors = {}
    try:
        for entry in found:
            rows, first = _local_rows(entry.tensor, world.rank)
            if rows is None or rows.numel() == 0:
                continue
            if entry.file not in descriptors:
                descriptors[entry.file] = os.open(os.path.join(folder, entry.file), os.O_WRONLY)
            row_bytes = entry.nbytes // entry.shape[0] if entry.shape and entry.shape[0] else entry.nbytes
            _pwrite(descriptors[entry.file], rows, starts[entry.file] + entry.begin + first * row_bytes, chunk_bytes)
        for fd in descriptors.values():
            os.fsync(fd)
    finally:
        for fd in descriptors.values():
            os.close(fd)
    distributed.barrier()
    digests = {name: sha256(os.path.join(folder, name)) for name in mine}
    if lora or len(names) == 1:
        return names, digests
    if world.rank == 0:
        index = {"metadata": {"total_size": sum(e.nbytes for e in found)},
                 "weight_map": {e.name: e.file for e in found}}
        with open(os.path.join(folder, INDEX), "w") as f:
            json.dump(index, f, indent=2, sort_keys=True)
            f.write("\n")
    return names + [INDEX], digests


def _pwrite(fd, rows, offset, chunk_bytes):
    """The rows' bytes at ``offset``, at most ``chunk_bytes`` copied to the host at a time (a CPU tensor is written
    from its own memory)."""
    flat = rows.contiguous().reshape(-1)
    per_chunk = max(1, chunk_bytes // flat.element_size())
    for start in range(0, flat.numel(), per_chunk):
        piece = flat[start:start + per_chunk]
        data = piece.cpu().view(torch.uint8).numpy() if piece.dtype != torch.uint8 else piece.cpu().numpy()
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += os.pwrite(fd, view[done:], offset + start * flat.element_size() + done)


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
