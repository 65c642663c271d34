"""The process group and the few collectives the loop needs beyond FSDP's own."""

import datetime
import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int
    device: torch.device
    host: str


def start(timeout_seconds=1800, host_collectives=False):
    """Joins the process group torchrun set up (gloo on CPU, NCCL on CUDA); a plain ``python`` start is rank 0 of 1.
    ``timeout_seconds`` (ddp_timeout): a collective that waits longer for a rank (stopped, hung, cut off) fails, so
    the run ends naming it instead of holding every other rank for ever. ``host_collectives`` (offload_params on
    CUDA): the sharded gradients then live in host memory, and NCCL reduces only CUDA tensors, so the gradient norm's
    reductions go over gloo beside NCCL, as FSDP2's CPUOffloadPolicy requires."""
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    rank = int(os.environ["RANK"])
    size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available() and os.environ.get("FINETUNE_DEVICE", "auto") != "cpu":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "cuda:nccl,cpu:gloo" if host_collectives else "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend=backend, device_id=device if device.type == "cuda" else None,
                            timeout=datetime.timedelta(seconds=timeout_seconds))
    return World(rank, size, local_rank, device, socket.gethostname())


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def finish():
    """Every rank past its last collective before any tears the group down: a rank destroying its gloo pairs
    while a peer still uses them can abort the peer at exit (seen once: SIGABRT after the last step)."""
    if dist.is_initialized():
        dist.barrier()


def stop():
    if dist.is_initialized():
        dist.destroy_process_group()


def sum_all(values, device):
    """Element-wise sum over ranks of a list of numbers or 0-dim tensors (still on the device: read here, once),
    in float64 (counts and loss sums stay exact)."""
    tensor = torch.stack([v.detach().to(device=device, dtype=torch.float64).reshape(())
                          if isinstance(v, torch.Tensor) else torch.full((), float(v), dtype=torch.float64, device=device)
                          for v in values]) if values else torch.zeros(0, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def max_all(value, device):
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.item()


def gather_objects(value):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def map_batches(batches, world, function):
    """``function`` of every batch, computed once: rank r takes batches r, r + W, ... Ranks with a shorter share
    repeat their last batch so that every rank runs the same number of forward passes (each all-gathers)."""
    mine = list(range(world.rank, len(batches), world.size))
    rounds = (len(batches) + world.size - 1) // world.size
    values = {}
    for turn in range(rounds):
        if turn < len(mine):
            values[mine[turn]] = function(batches[mine[turn]])
        elif batches:
            function(batches[mine[-1] if mine else 0])
    merged = {}
    for part in gather_objects(values):
        merged.update(part)
    return [merged[i] for i in range(len(batches))]


def barrier():
    dist.barrier()


def fsdp_modules(model):
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]
