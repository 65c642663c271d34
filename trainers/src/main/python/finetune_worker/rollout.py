"""Sampling GRPO's completions with the model under FSDP2: ``Generator.java``'s loop (a KV cache, left-padded prompts,
stop at EOS or after ``max_completion_length``) over :class:`sampler.Sampler`.

It takes one of two ways (:meth:`Rollout.mode`; both sample the same tokens):

* ``gathered`` (on CPU, and on GPUs with room for it): every sharded module is unsharded once per rollout round (one
  all-gather per decoder layer and one for the root) and kept whole until the round ends, so generating costs no
  collective per token and ranks that generate different lengths need no lockstep. The price is memory: each rank
  holds the full parameters in the compute dtype plus the KV cache while it samples.
* ``per-token`` (where the whole model does not fit beside the rest): the modules all-gather in every forward, as in
  training, so every generated token costs one all-gather per decoder layer and one for the root, plus a one-number
  all-reduce that keeps the ranks in lockstep until the last one's rows are done (what ``synced_gpus`` does in
  transformers' ``generate``).
"""

import contextlib
import os

import torch

from finetune_worker import distributed
from finetune_worker.sampler import JavaRandom, Sampler


@contextlib.contextmanager
def gathered(model, reshard_after_forward):
    """Every sharded module whole for the duration (one all-gather each, on every rank in the same order), then
    sharded again with the training settings restored: the root keeps its parameters after forward, the layers
    follow ``reshard_after_forward``."""
    from finetune_worker import vocab_parallel

    modules = distributed.fsdp_modules(model)
    for module in modules:
        module.set_reshard_after_forward(False, recurse=False)
    try:
        for module in modules:
            module.unshard()
        # a frozen tied table kept in rows over the ranks, whole too
        with vocab_parallel.gathered(model):
            yield
    finally:
        for module in modules:
            module.reshard()
            module.set_reshard_after_forward(module is not model and reshard_after_forward, recurse=False)


def prompt_ids(batch):
    """The prompts of a GRPO micro batch as token id lists: each row's tokens up to its padding."""
    lengths = (batch.segments != 0).sum(dim=1).tolist()
    return [batch.ids[r, :lengths[r]].tolist() for r in range(batch.ids.shape[0])]


class Rollout:
    """Completions for prompts, sampled on every rank in the way all ranks agreed on."""

    def __init__(self, plan, eos_id, pad_id):
        self.max_new = plan.objective.grpo.max_completion_length
        self.eos_id = eos_id
        self.pad_id = pad_id
        self.sampler = Sampler(plan.objective.grpo)
        self.reshard_after_forward = plan.parallel.reshard_after_forward
        self.compute_dtype = plan.model.compute_dtype
        self._mode = None

    def _mask(self, allowed, device):
        if device.type != "cpu":
            return allowed
        mask = torch.zeros(allowed.shape, dtype=torch.float32, device=device)
        mask.masked_fill_(~allowed, torch.finfo(torch.float32).min)
        return mask

    def sample(self, model, prompts, seed, device, lockstep=False):
        """Completions of ``prompts`` (token id lists), ``Generator.java``'s loop: a KV cache, left-padded prompts,
        stop at EOS (kept) or after ``max_completion_length`` tokens. With ``lockstep`` (the sharded modules
        all-gather in every forward) a rank whose rows are done keeps running forwards until every rank's are."""
        from transformers import DynamicCache

        rows = len(prompts)
        width = max(len(p) for p in prompts)
        ids = torch.full((rows, width), self.pad_id, dtype=torch.long)
        valid = torch.zeros((rows, width), dtype=torch.bool)
        positions = torch.zeros((rows, width), dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, width - len(p):] = torch.tensor(p, dtype=torch.long)
            valid[r, width - len(p):] = True
            positions[r, width - len(p):] = torch.arange(len(p))
        ids, valid, positions = ids.to(device), valid.to(device), positions.to(device)
        causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
        allowed = causal.unsqueeze(0) & valid.unsqueeze(1)
        allowed |= torch.eye(width, dtype=torch.bool, device=device).unsqueeze(0)
        cache = DynamicCache()
        random = JavaRandom(seed)
        out = model(input_ids=ids, position_ids=positions, attention_mask=self._mask(allowed.unsqueeze(1), device),
                    past_key_values=cache, use_cache=True)
        logits = out.logits[:, -1, :].float()
        completions = [[] for _ in range(rows)]
        done = [False] * rows
        history = [list(p) for p in prompts]
        following = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device)
        chosen = self.sampler.choose(logits, random, history)
        for step in range(self.max_new):
            for r, token in enumerate(chosen):
                if done[r]:
                    continue
                completions[r].append(token)
                history[r].append(token)
                if token == self.eos_id or len(completions[r]) == self.max_new:
                    done[r] = True
            finished = all(done) or step + 1 == self.max_new
            if lockstep:
                finished = distributed.max_all(0.0 if finished else 1.0, device) == 0.0
            if finished:
                break
            valid = torch.cat([valid, torch.ones((rows, 1), dtype=torch.bool, device=device)], dim=1)
            out = model(input_ids=torch.tensor(chosen, dtype=torch.long, device=device).unsqueeze(1),
                        position_ids=(following + step).unsqueeze(1),
                        attention_mask=self._mask(valid[:, None, None, :], device),
                        past_key_values=cache, use_cache=True)
            logits = out.logits[:, -1, :].float()
            chosen = self.sampler.choose(logits, random, history)
        return completions

    def mode(self, model, world):
        """``gathered`` (each sharded module all-gathered once per rollout round) when every rank has room for the
        whole model in its compute dtype next to what it holds, else ``per-token`` (an all-gather per module and
        forward, the ranks in lockstep). Both sample the same tokens; ``FINETUNE_GRPO_ROLLOUT`` forces one."""
        if self._mode is not None:
            return self._mode
        forced = os.environ.get("FINETUNE_GRPO_ROLLOUT")
        if forced in ("gathered", "per-token"):
            self._mode = forced
        else:
            fits = 1.0
            if world.device.type == "cuda":
                # the gathered copy is in the compute dtype (train.build_model's choice), the shards stay fp32
                element = 2 if self.compute_dtype == "bfloat16" else 4
                needed = 1.2 * element * sum(p.numel() for p in model.parameters())
                fits = 1.0 if torch.cuda.mem_get_info(world.device)[0] > needed else 0.0
            # every rank must take the same way: a collective decides
            self._mode = "gathered" if -distributed.max_all(-fits, world.device) > 0 else "per-token"
        if world.rank == 0:
            print("grpo: sampling %s" % ("with the sharded modules gathered once per rollout round"
                                         if self._mode == "gathered" else
                                         "per-token: an all-gather per module and forward, the ranks in lockstep"),
                  flush=True)
        return self._mode

    def rollouts(self, model, batches, seeds, world):
        model.eval()
        with torch.no_grad():
            if self.mode(model, world) == "gathered":
                with gathered(model, self.reshard_after_forward):
                    return [self.sample(model, prompt_ids(b), s, world.device) for b, s in zip(batches, seeds)]
            # every rank runs as many rollouts (and forwards) as the busiest one; the extra ones are thrown away
            rounds = int(distributed.max_all(float(len(batches)), world.device))
            out = []
            for turn in range(rounds):
                if turn < len(batches):
                    out.append(self.sample(model, prompt_ids(batches[turn]), seeds[turn], world.device, True))
                else:
                    self.sample(model, [[self.pad_id]], 0, world.device, True)
            return out
