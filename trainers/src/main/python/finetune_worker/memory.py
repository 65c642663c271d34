"""What a rank holds, in the memory plan's terms, counted from its own tensors; and its peaks.

The plan (recipes/.../plan/MemoryModel.java) promises per rank: ``weights`` (every parameter of a full fine-tune, the
frozen base of a LoRA run), ``adapter`` (LoRA's weights), ``gradients`` and ``optimizer_state``. After the first
optimizer step each rank counts the bytes of those tensors' storage (a shard's storage, padding included, counted
once however many views share it) and reports them beside the plan's figures; tensor bytes are exact, so the two
must agree to a rounding. :mod:`meta_terms` counts the same way on the meta device, for a plan no machine here runs.

The peaks: on a GPU what PyTorch's allocator reserved, on CPU the process's peak resident set (``VmHWM``, which the
plan estimates for CPU ranks). The load peak is taken when the model is loaded, then the high-water mark is reset
(``/proc/self/clear_refs``; ``reset_peak_memory_stats`` on CUDA), so the step-1 peak is the training's own.
"""

import ctypes
import os
import resource

import torch

TERMS = ("weights", "adapter", "gradients", "optimizer_state")


# glibc's mallopt() parameter (malloc.h) and the value it starts a process with
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 << 10


def steady_heap():
    """Keeps glibc's mmap threshold at its starting 128 KiB, so that every tensor of 128 KiB or more gets pages of its
    own and gives them back when freed: the resident set then follows the live tensors, which is what the memory plan
    counts. Call before the model is loaded.

    glibc raises the threshold to the size of each mmapped block that is freed (up to 32 MiB): after the load frees
    its 17 MiB fp32 staging copies, every activation below that comes from the brk heap, whose holes between tensors
    kept for backward are neither reused well nor returned. Measured (VmHWM after step 1, CPU, fp32 LoRA): a
    Qwen2.5-0.5B-shaped model at sequence 512 peaked at 4,861 MiB with the adaptive threshold and 3,813 MiB with it
    fixed (plan 3,816 MiB), its forward grew the resident set by 2,286 MiB to keep 1,222 MiB of saved tensors, and the
    growth went on in step 2; a wide Gemma 2 over 2 ranks peaked at 681 and 806 MiB in steps 1 and 3, fixed at
    499 and 503 (plan 494). The price: the pages of a large tensor are faulted in afresh each time (about 2.5 times
    the page faults of a step), paid in CPU time instead of resident memory.

    Returns whether the threshold was set: not where the user set ``MALLOC_MMAP_THRESHOLD_`` (glibc read it at
    start, and it wins) or where the C library is not glibc."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1


def _storage(tensor):
    """``(key, bytes)`` of the storage behind ``tensor`` (a DTensor's local shard): the key is the same for every view
    of one storage. Real storages are told apart by their data pointer; a meta tensor's storage has none (every one
    is 0), so there the storage's own C++ object stands for it (``_cdata``, stable while a tensor holds it)."""
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    storage = local.untyped_storage()
    device = local.device.type
    return (device, storage._cdata if device == "meta" else storage.data_ptr()), storage.nbytes()


def _count(tensors, seen):
    total = 0
    for tensor in tensors:
        key, size = _storage(tensor)
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

