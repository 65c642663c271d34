"""A frozen, tied embedding table kept in rows over the ranks and never gathered whole (LoRA under FSDP2).

FSDP2 keeps a tied embedding/LM head in the root unit, which it all-gathers before the first forward and again when
backward starts, each time into a flat buffer and then copied out into the parameter: twice the table at once, the
second time beside every activation kept for backward. Measured on a Qwen2.5-0.5B-shaped LoRA run (4 layers, fp32,
2 CPU ranks): 151,936 x 896 fp32 is 519 MiB, and the step-1 peak of 2,003 MiB per rank was the 964 MiB resident
when backward began plus 1,040 MiB of that gather.
When the table is frozen (LoRA) no gradient is reduced for it, so FSDP is not needed for it at all: each rank keeps
rows ``[r * ceil(V / W), ...)`` of it as a ``Shard(0)`` DTensor that FSDP ignores, and the two uses exchange small
tensors instead of the table, as Megatron's vocabulary-parallel embedding and cross-entropy do:

* the lookup all-gathers the ranks' token ids, each rank fills the rows it owns and a sum over ranks (of one
  row and zeros: exact) gives every rank its embeddings;
* the SFT loss all-gathers the ranks' final hidden states, each rank computes the logits of its vocabulary rows
  one chunk of positions at a time (one device's chunk of positions: a rank's chunk of logits is 1 / W of it),
  and per-row maxima, sums of exponentials and target logits are reduced over ranks; the input gradient is each
  rank's part summed over ranks, for every rank's positions at once.

The other heads (DPO's and GRPO's log-probabilities, plain logits) gather the table for their call only
(:func:`full`). Every call is a collective, as FSDP's gathers are; where ranks run forwards on their own (GRPO's
sampling with the modules gathered once per round, :func:`rollout.gathered`), :func:`gathered` holds the whole table
for the duration instead and both uses read it without any exchange.
"""

import contextlib
import math
import types

import torch
import torch.distributed as dist


def applies(model, world):
    """Whether :func:`shard` keeps this model's table in rows: several ranks, an embedding that is a plain
    ``nn.Embedding`` tied to a head that :mod:`head_loss` computes, and no gradient for the table."""
    if world.size < 2:
        return False
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    embedding, head = base.get_input_embeddings(), base.get_output_embeddings()
    if type(embedding) is not torch.nn.Embedding or head is None:
        return False
    if getattr(head, "_finetune_plain_forward", None) is None:
        return False
    table = embedding.weight
    return head.weight is table and not table.requires_grad and embedding.max_norm is None


class _Table:
    """What the embedding and the head share: the process group, and the whole table while :func:`gathered` holds
    it."""

    def __init__(self, group):
        self.group = group
        self.whole = None


def shard(model, mesh):
    """Replaces the (meta) table by this rank's rows as a ``Shard(0)`` DTensor, tied to the head; returns it, for
    ``fully_shard``'s ``ignored_params``."""
    from torch.distributed.tensor import DTensor, Shard

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    embedding, head = base.get_input_embeddings(), base.get_output_embeddings()
    table = embedding.weight
    rows, first = _rows(table.shape[0], mesh.size(), mesh.get_local_rank())
    local = torch.empty((rows,) + tuple(table.shape[1:]), dtype=table.dtype, device="meta")
    sharded = torch.nn.Parameter(DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=table.shape,
                                                    stride=table.stride()), requires_grad=False)
    embedding._parameters["weight"] = sharded
    head._parameters["weight"] = sharded
    embedding._finetune_vocab = head._finetune_vocab = _Table(mesh.get_group())
    embedding.forward = types.MethodType(_lookup_forward, embedding)
    return sharded


@contextlib.contextmanager
def gathered(model):
    """The whole table on every rank for the duration (one all-gather, on every rank in the same order), so that the
    lookup and the head exchange nothing: ranks may then run different numbers of forwards. A no-op for a model
    whose table is not kept in rows."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    embedding = base.get_input_embeddings()
    table = getattr(embedding, "_finetune_vocab", None)
    if table is None:
        yield
        return
    table.whole = full(embedding.weight)
    try:
        yield
    finally:
        table.whole = None


def _rows(vocab, ranks, rank):
    """``(rows, first row)`` of rank's part: ``torch.chunk``'s split, as DTensor's ``Shard(0)``."""
    per = math.ceil(vocab / ranks)
    first = min(rank * per, vocab)
    return min(per, vocab - first), first


def _local(weight):
    """This rank's rows, their first index and the whole table's row count."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    _, offset = compute_local_shape_and_global_offset(weight.shape, weight.device_mesh, weight.placements)
    return weight.to_local(), offset[0], weight.shape[0]


def _gather_rows(tensor, group, fill=0):
    """Every rank's ``tensor`` (first dimension padded to the longest with ``fill``) stacked: ``([W * longest, ...],
    longest, this rank's length)``."""
    ranks = dist.get_world_size(group)
    size = torch.tensor([tensor.shape[0]], dtype=torch.int64, device=tensor.device)
    sizes = [torch.empty_like(size) for _ in range(ranks)]
    dist.all_gather(sizes, size, group=group)
    longest = int(max(s.item() for s in sizes))
    if tensor.shape[0] < longest:
        pad = tensor.new_full((longest - tensor.shape[0],) + tuple(tensor.shape[1:]), fill)
        tensor = torch.cat([tensor, pad])
    out = [torch.empty_like(tensor) for _ in range(ranks)]
    dist.all_gather(out, tensor.contiguous(), group=group)
    return torch.cat(out), longest


def _lookup_forward(self, ids):
    """The embedding of this rank's ``ids`` from rows spread over the ranks (no gradient: the table is frozen)."""
    table = self._finetune_vocab
    if table.whole is not None:
        return torch.nn.functional.embedding(ids, table.whole)
    group = table.group
    local, first, _ = _local(self.weight)
    flat = ids.reshape(-1)
    everyone, longest = _gather_rows(flat, group, fill=-1)
    inside = (everyone >= first) & (everyone < first + local.shape[0])
    rows = torch.zeros((everyone.shape[0], local.shape[1]), dtype=local.dtype, device=local.device)
    rows[inside] = local[everyone[inside] - first]
    dist.all_reduce(rows, group=group)
    mine = dist.get_rank(group) * longest
    # a tensor of its own, not a view of the exchange: gradient checkpointing sets requires_grad on it
    return rows[mine:mine + flat.shape[0]].reshape(tuple(ids.shape) + (local.shape[1],)).clone()


def full(weight):
    """The whole table, gathered for one call (the heads that are not the SFT loss)."""
    local, _, vocab = _local(weight)
    group = weight.device_mesh.get_group()
    ranks = dist.get_world_size(group)
    per = math.ceil(vocab / ranks)
    if local.shape[0] < per:
        local = torch.cat([local, local.new_zeros((per - local.shape[0],) + tuple(local.shape[1:]))])
    out = torch.empty((per * ranks,) + tuple(local.shape[1:]), dtype=local.dtype, device=local.device)
    dist.all_gather_single(out, local.contiguous(), group=group)
    return out[:vocab]


class _SftLoss(torch.autograd.Function):
    """``head_loss._SftLoss`` over vocabulary rows spread across ranks: every rank runs the same chunks of the
    ranks' gathered positions, so the reductions pair up."""

    @staticmethod
    def forward(ctx, hidden, targets, weights, table, rows):
        from finetune_worker.head_loss import _accumulation

        local, first, _ = _local(table)
        group = table.device_mesh.get_group()
        x = hidden.detach()
        need_x = ctx.needs_input_grad[0]
        acc = _accumulation(x)
        xs, longest = _gather_rows(x, group)
        ts, _ = _gather_rows(targets, group)
        ws, _ = _gather_rows(weights, group)
        own = dist.get_rank(group) * longest
        losses = torch.zeros(xs.shape[0], dtype=acc, device=x.device)
        dx = torch.empty_like(xs) if need_x else None
        count = local.shape[0]
        for start in range(0, xs.shape[0], rows):
            end = min(start + rows, xs.shape[0])
            wc = ws[start:end].to(acc)
            logits = torch.mm(xs[start:end], local.t()).to(acc)
            top = logits.amax(dim=1) if count else torch.full((end - start,), -math.inf, dtype=acc, device=x.device)
            dist.all_reduce(top, op=dist.ReduceOp.MAX, group=group)
            logits.sub_(top.unsqueeze(1))
            column = ts[start:end] - first
            owned = (column >= 0) & (column < count)
            column = column.clamp(0, max(count - 1, 0)).unsqueeze(1)
            target = torch.where(owned, logits.gather(1, column).squeeze(1), torch.zeros((), dtype=acc)) \
                if count else torch.zeros(end - start, dtype=acc, device=x.device)
            exps = logits.exp_()
            # the sum of exponentials and the target's logit over every rank's rows, in one exchange
            stats = torch.stack([exps.sum(dim=1), target])
            dist.all_reduce(stats, group=group)
            total, target = stats[0], stats[1]
            losses[start:end] = (total.log() - target) * wc
            if need_x:
                # weights * (softmax - onehot) on this rank's columns; the products summed over ranks
                factor = exps.mul_((wc / total).unsqueeze(1))
                factor.scatter_add_(1, column, -(wc * owned.to(acc)).unsqueeze(1))
                # summed over ranks in the accumulation dtype, as FSDP reduces gradients in float32
                part = torch.mm(factor.to(x.dtype), local).to(acc)
                dist.all_reduce(part, group=group)
                dx[start:end] = part
            logits = exps = factor = part = None
        ctx.dx = dx[own:own + x.shape[0]].clone() if need_x else None
        return losses[own:own + x.shape[0]].sum()

    @staticmethod
    def backward(ctx, grad):
        return ctx.dx * grad.to(ctx.dx.dtype), None, None, None, None


def sft_loss(hidden, table, targets):
    """:func:`head_loss.sft_loss` with the table in rows over the ranks: a collective, as FSDP's own gathers are."""
    from finetune_worker.head_loss import _flat, chunk_rows

    x, flat, valid = _flat(hidden, targets)
    # one device's chunk of positions, each rank over its rows of the vocabulary: the chunk's logits / ranks
    return _SftLoss.apply(x, flat, valid.float(), table, chunk_rows(table.shape[0]))
