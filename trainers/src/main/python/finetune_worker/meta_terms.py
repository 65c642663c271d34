"""What a rank of a planned run holds in the memory plan's tensor terms, computed by the worker itself without the
weights, without a GPU and without the other ranks: the plan's promise for a 70B model on 8 GPUs, checked here.

``python finetune_worker/__main__.py meta-terms PLAN.json RESULT.json [RANK ...]`` reads the ``plan.json`` the
launcher writes (the model folder needs its ``config.json`` only) and, for each rank asked (by default the first and
the last), stands in for that rank of the plan's world size:

1. a process group of the plan's world size in which this process is that rank: torch's ``fake`` backend, whose
   collectives do nothing (torchtitan estimates memory the same way), so ``fully_shard`` shards for that rank;
2. the model as a run builds it: :func:`loading.on_meta` (the architecture and PEFT's LoRA, each parameter in the
   regime's dtype) and :func:`loading.shard` in the same regime, where :func:`loading.is_sharded` says a run shards;
   the parameters stay on the meta device (sizes, no storage), so nothing is read or allocated;
3. a gradient for every trainable parameter, of its shape, dtype and sharding, and one step of the run's optimizer
   (:func:`optimizers.build`), so that its state exists as after a run's first step;
4. the bytes per term counted by :func:`memory.tensor_terms`, the function a run reports with.

Where this differs from a run, and why the bytes do not: no backward runs, so the gradients are laid out as FSDP2's
reduce-scatter leaves them (:func:`_gradients`: one buffer of padded shards per unit, each gradient a view into it);
and ``adamw_torch_fused`` steps with torch's single-tensor AdamW, since the fused kernel refuses meta tensors: both
keep the same ``exp_avg`` and ``exp_avg_sq`` beside each parameter (their 0-dim step counters are not counted).
FSDP2 pads every rank's weights and gradients to the first rank's rows; the moments, made ``zeros_like`` each shard,
are smaller on the last rank of an uneven split.
QLoRA's base is quantized by bitsandbytes from real weights on a GPU, bitsandbytes' optimizers make their state there,
and an offloaded run's shards live in host memory: none of them is what this computes, and each is refused.
"""

import json

import torch
import torch.distributed as dist

from finetune_worker import distributed, loading, memory, optimizers, precision
from finetune_worker import plan as plans


def refusal(plan):
    """Why the plan's terms cannot be computed on the meta device, or None."""
    adapter = plan.model.adapter
    if adapter is not None and adapter.quantized:
        return ("QLoRA: bitsandbytes quantizes the real weights on a GPU; plan the LoRA-equivalent run "
                "(adapter: lora without load_in_4bit) for the adapter, gradient and optimizer terms")
    if plan.optimizer.name in optimizers.BITSANDBYTES:
        return "optimizer %s: bitsandbytes keeps its own state, made on a GPU" % plan.optimizer.name
    if plan.parallel.offload_params:
        return "offload_params: the shards live in host memory, and the plan's device terms are then 0"
    return None


def rank_terms(plan, rank):
    """Bytes per plan term of rank ``rank`` of ``plan.parallel.world_size`` after the first optimizer step."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    why = refusal(plan)
    if why is not None:
        raise ValueError("meta-terms cannot count this plan: " + why)
    size = plan.parallel.world_size
    if not 0 <= rank < size:
        raise ValueError("rank %d is not one of the plan's %d" % (rank, size))
    regime = precision.of(plan.model.precision)
    # the mesh's device: the fake backend serves the CPU; the parameters stay on the meta device all the same
    device = torch.device("cpu")
    world = distributed.World(rank, size, rank, device, "meta")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=size)
    try:
        model, lora, _ = loading.on_meta(plan, regime, device=device)
        if loading.is_sharded(world, regime, lora):
            loading.shard(model, world, regime, plan)
        _gradients(model)
        optimizer = optimizers.build(model, plan.optimizer, regime, device)
        for group in optimizer.param_groups:
            if group.get("fused"):
                group["fused"] = False  # same state, and the fused kernel refuses meta tensors
        optimizer.step()
        return memory.tensor_terms(model, optimizer, lora)
    finally:
        dist.destroy_process_group()


def _gradients(model):
    """A gradient for every trainable parameter, laid out as after a run's backward: FSDP2's reduce-scatter leaves each
    unit's gradients in one buffer of their padded shards, in the unit's parameter dtype, each a view into it
    (``foreach_reduce``'s post-reduce step, done here with the unit's own sizes); an unsharded parameter's gradient is
    a tensor of its own, as autograd makes it."""
    from torch.distributed.fsdp import FSDPModule

    done = set()
    for module in model.modules():
        group = module._get_fsdp_state()._fsdp_param_group if isinstance(module, FSDPModule) else None
        shards = [p for p in group.fsdp_params if p.sharded_param.requires_grad] if group is not None else []
        if not shards:
            continue
        # _sharded_param_data: this rank's flat shard, padded to the same rows on every rank; FSDP2 casts the reduced
        # buffer to the trainable parameters' dtype, one per unit
        buffer = torch.zeros(sum(p._sharded_param_data.numel() for p in shards),
                             dtype=shards[0].sharded_param.dtype, device="meta")
        offset = 0
        for shard in shards:
            view = torch.as_strided(buffer, size=shard.sharded_size, stride=shard.contiguous_sharded_stride,
                                    storage_offset=offset)
            shard.sharded_param.grad = shard.to_sharded_dtensor(view)
            done.add(id(shard.sharded_param))
            offset += shard._sharded_param_data.numel()
    for parameter in model.parameters():
        if parameter.requires_grad and id(parameter) not in done:
            parameter.grad = torch.zeros_like(parameter)


def main(plan_path, result_path, ranks=None):
    plan = plans.load(plan_path)
    size = plan.parallel.world_size
    if not ranks:
        ranks = sorted({0, size - 1})
    result = {"world_size": size, "precision": plan.model.precision,
              "ranks": [{"rank": r, "tensors": rank_terms(plan, r)} for r in ranks]}
    with open(result_path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    return 0
