"""What a rank holds, in the memory plan's terms, counted from its own tensors; and its peaks.

The plan (recipes/.../plan/MemoryModel.java) promises per rank: ``weights`` (every parameter of a full fine-tune, the
frozen base of a LoRA run), ``adapter`` (LoRA's weights), ``gradients`` and ``optimizer_state``. After the first
optimizer step each rank counts the bytes of those tensors' storage (a shard's storage, padding included, counted
once however many views share it) and reports them beside the plan's figures; tensor bytes are exact, so the two
must agree to a rounding.

The peaks: on a GPU what PyTorch's allocator reserved, on CPU the process's peak resident set (``VmHWM``, which the
plan estimates for CPU ranks). The load peak is taken when the model is loaded, then the high-water mark is reset
(``/proc/self/clear_refs``; ``reset_peak_memory_stats`` on CUDA), so the step-1 peak is the training's own.
"""

import resource

import torch

TERMS = ("weights", "adapter", "gradients", "optimizer_state")


def _storage(tensor):
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    storage = local.untyped_storage()
    return storage.data_ptr(), storage.nbytes(), local.device.type


def _count(tensors, seen):
    total = 0
    for tensor in tensors:
        pointer, size, device = _storage(tensor)
        key = (device, pointer)
        if key in seen or size == 0:
            continue
        seen.add(key)
        total += size
    return total


def tensor_terms(model, optimizer, lora):
    """Bytes of this rank's tensors per plan term. Call between backward and ``zero_grad`` for the gradients."""
    seen = set()
    parameters = []
    ids = set()
    for parameter in model.parameters():
        if id(parameter) not in ids:
            ids.add(id(parameter))
            parameters.append(parameter)
    trainable = [p for p in parameters if p.requires_grad]
    frozen = [p for p in parameters if not p.requires_grad]
    terms = {}
    if lora:
        terms["weights"] = _count(frozen, seen)
        terms["adapter"] = _count(trainable, seen)
    else:
        terms["weights"] = _count(parameters, seen)
    terms["gradients"] = _count([p.grad for p in trainable if p.grad is not None], seen)
    state = []
    if optimizer is not None:
        for values in optimizer.state.values():
            # the step counters are 0-dim tensors: bytes the plan leaves out, as it leaves out every scalar
            state.extend(v for v in values.values() if torch.is_tensor(v) and v.dim() > 0)
    terms["optimizer_state"] = _count(state, seen)
    return terms


def peak_mb(device):
    """What the memory plan estimates per rank: on a GPU what PyTorch's allocator reserved at most (the plan's
    allocator slack included), on CPU the whole process's peak resident set (VmHWM)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_reserved(device) / 2**20
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    # ru_maxrss is the same high-water mark in KiB on Linux (it cannot be reset)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak(device):
    """Starts a new high-water mark, so the next peak is the next phase's own."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident set (Linux 4.0+)
    except OSError:
        pass


def peak_kind(device):
    return "max_memory_reserved" if device.type == "cuda" else "resident set, VmHWM"


def host_peak_mb():
    """This process's peak resident set on the host, whatever the device (what a node's RAM must hold per rank)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

