"""GRPO on the worker: sample completions with the model under FSDP2, have the Java launcher score them, and take
the clipped policy-ratio loss with the KL pull to the reference.

What lives where (one implementation of each concept):

* Rewards, advantages and the reward/completion metrics are the launcher's (the recipe's reward functions, built-in,
  regex or commands, through ``RewardChannel.java``). Rank 0 gathers every rank's completions, sends one JSON line
  per round to the loopback port in ``FINETUNE_REWARD_PORT`` and hands each rank its answers.
* The sampler mirrors the JVM trainer's (``generation/Sampler.java``): repetition penalty, temperature, top-k, top-p,
  min-p, then inverse-CDF sampling with uniforms from Java's ``SplittableRandom`` seeded like the JVM's micro step, so
  on the same weights the worker samples the same completions as the single-device trainer, on any number of ranks.
* The per-token loss mirrors ``train/grpo/GrpoLoss.java`` (TRL's ``_compute_loss``): it is differentiable, so it has
  to exist in torch as well; the equivalence tests hold the two together.
* The reference (``beta`` > 0) is, as in TRL and the JVM trainer, the base model with the adapter switched off, or
  for an adapter continued from ``lora_model_dir`` a frozen copy of that adapter as it starts (:class:`Reference`).

Sampling under FSDP2 takes one of two ways (:meth:`Grpo.rollout_mode`; both sample the same tokens):

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
import json
import os
import socket

import torch
import torch.distributed as dist
import torch.nn.functional as F

from finetune_worker import data, distributed

_MASK = (1 << 64) - 1
_GOLDEN_GAMMA = 0x9E3779B97F4A7C15


def _mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


class JavaRandom:
    """``java.util.SplittableRandom(seed)``'s ``nextDouble`` stream: the JVM sampler's uniforms, bit for bit."""

    def __init__(self, seed):
        self.seed = int(seed) & _MASK

    def next_double(self):
        self.seed = (self.seed + _GOLDEN_GAMMA) & _MASK
        return (_mix64(self.seed) >> 11) * 2.0 ** -53


def java_derive(base, salt):
    """``train/Seeds.derive``: a non-negative int from a long and a salt."""
    z = (int(base) + _GOLDEN_GAMMA * (int(salt) + 1)) & _MASK
    return _mix64(z) >> 33


def micro_step_seed(seed, step, micro):
    """``Seeds.microStep``: micro batch ``micro`` (its index in the global window) of optimizer step ``step``."""
    return java_derive(java_derive(seed, step), micro)


class Sampler:
    """Picks the next token of every row from float32 logits ``[rows, vocab]`` as ``Sampler.java`` does."""

    def __init__(self, settings):
        self.temperature = float(settings["temperature"])
        self.top_k = int(settings.get("top_k", 0))
        self.top_p = float(settings.get("top_p", 1.0))
        self.min_p = float(settings.get("min_p", 0.0))
        self.penalty = float(settings.get("repetition_penalty", 1.0))

    def choose(self, logits, random, history):
        f32 = lambda v: torch.tensor(v, dtype=torch.float32, device=logits.device)  # noqa: E731
        if self.penalty != 1.0:
            seen = torch.zeros_like(logits)
            for r, tokens in enumerate(history):
                if tokens:
                    seen[r, torch.tensor(tokens, device=logits.device).clamp(0, logits.shape[1] - 1)] = 1.0
            positive = (logits > f32(0.0)).float()
            factor = positive * f32(1.0 / self.penalty) + (f32(1.0) - positive) * f32(self.penalty)
            logits = logits * (f32(1.0) + seen * (factor - f32(1.0)))
        if self.temperature == 0.0:
            return logits.argmax(-1).tolist()
        vocab = logits.shape[1]
        scaled = logits / f32(self.temperature)
        if 0 < self.top_k < vocab:
            kth = scaled.topk(self.top_k, dim=-1, largest=True, sorted=True).values[:, -1:]
            scaled = scaled - (scaled < kth).float() * f32(1e30)
        probabilities = scaled.softmax(-1)
        if self.top_p < 1.0:
            ascending = probabilities.sort(-1).values
            mass_above = f32(1.0) - ascending.cumsum(-1)
            dropped = (mass_above >= f32(self.top_p)).float()
            threshold = (ascending + dropped * f32(2.0)).min(-1, keepdim=True).values
            probabilities = probabilities * (probabilities >= threshold).float()
        if self.min_p > 0.0:
            floor = probabilities.max(-1, keepdim=True).values * f32(self.min_p)
            probabilities = probabilities * (probabilities >= floor).float()
        cdf = probabilities.cumsum(-1)
        total = cdf[:, -1:]
        uniforms = torch.tensor([1.0 - random.next_double() for _ in range(logits.shape[0])], dtype=torch.float32,
                                device=logits.device)
        chosen = (cdf < uniforms.unsqueeze(1) * total).long().sum(-1).clamp(max=vocab - 1)
        return chosen.tolist()


def _fsdp_modules(model):
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def gathered(model, reshard_after_forward):
    """Every sharded module whole for the duration (one all-gather each, on every rank in the same order), then
    sharded again with the training settings restored: the root keeps its parameters after forward, the layers
    follow ``reshard_after_forward``."""
    modules = _fsdp_modules(model)
    for module in modules:
        module.set_reshard_after_forward(False, recurse=False)
    try:
        for module in modules:
            module.unshard()
        yield
    finally:
        for module in modules:
            module.reshard()
            module.set_reshard_after_forward(module is not model and reshard_after_forward, recurse=False)


class Reference:
    """The model the KL term pulls towards, for the duration of a ``with``: the adapter switched off, or with
    ``frozen`` the starting adapter (``lora_model_dir``'s, TRL's "ref" adapter) swapped in for the trained one.

    The frozen copy is this rank's shards of the trainable parameters, taken before the first step (and before a
    resumed run loads its checkpoint): a LoRA adapter's worth of memory, no second set of modules under FSDP. The
    completions are sampled every step, so unlike DPO's reference nothing can be scored in advance. Every sharded
    module is resharded around the swap, so no forward reads weights gathered before it. Never dropout."""

    def __init__(self, frozen):
        self.frozen = frozen
        self.saved = None

    def prepare(self, model):
        if self.frozen:
            with torch.no_grad():
                self.saved = [(p, p.detach().clone()) for p in model.parameters() if p.requires_grad]

    @contextlib.contextmanager
    def of(self, model):
        training = model.training
        model.eval()
        try:
            if self.saved is None:
                with model.disable_adapter():
                    yield
                return
            with torch.no_grad():
                self._reshard(model)
                trained = [p.detach().clone() for p, _ in self.saved]
                for p, start in self.saved:
                    p.copy_(start)
            try:
                yield
            finally:
                with torch.no_grad():
                    self._reshard(model)
                    for (p, _), value in zip(self.saved, trained):
                        p.copy_(value)
        finally:
            model.train(training)

    @staticmethod
    def _reshard(model):
        for module in _fsdp_modules(model):
            module.reshard()


class RewardChannel:
    """Rank 0's connection to the launcher's reward channel (one JSON line out, one back)."""

    def __init__(self):
        self.stream = None

    def ask(self, request):
        if self.stream is None:
            port = os.environ.get("FINETUNE_REWARD_PORT")
            if not port:
                raise RuntimeError("FINETUNE_REWARD_PORT is not set: GRPO's rewards are scored by the finetune "
                                   "launcher, start the run with it")
            connection = socket.create_connection(("127.0.0.1", int(port)))
            self.stream = connection.makefile("rwb")
            self.stream.write((os.environ.get("FINETUNE_REWARD_TOKEN", "") + "\n").encode("utf-8"))
        self.stream.write((json.dumps(request) + "\n").encode("utf-8"))
        self.stream.flush()
        line = self.stream.readline()
        if not line:
            raise RuntimeError("the launcher closed the reward channel")
        return json.loads(line)


def _rows(prompts, completions, pad_id):
    """``CompletionRows.of``: prompt ++ completion per row, right-padded; targets are the completion tokens."""
    columns = max(1, max(len(p) + len(c) for p, c in zip(prompts, completions)))
    rows = len(prompts)
    ids = torch.full((rows, columns), pad_id, dtype=torch.long)
    positions = torch.zeros((rows, columns), dtype=torch.long)
    segments = torch.zeros((rows, columns), dtype=torch.long)
    targets = torch.full((rows, columns), -100, dtype=torch.long)
    completion_mask = torch.zeros((rows, columns), dtype=torch.float32)
    for r, (p, c) in enumerate(zip(prompts, completions)):
        length = len(p) + len(c)
        ids[r, :length] = torch.tensor(p + c, dtype=torch.long)
        positions[r, :length] = torch.arange(length)
        segments[r, :length] = 1
        if c:
            targets[r, len(p) - 1:length - 1] = torch.tensor(c, dtype=torch.long)
            completion_mask[r, len(p) - 1:length - 1] = 1.0
    return ids, positions, segments, targets, completion_mask


class Loss:
    """``train/grpo/GrpoLoss.java`` in torch (TRL's ``_compute_loss``), with the same settings, names and units."""

    def __init__(self, settings):
        self.loss_type = settings["loss_type"]
        self.epsilon_low = float(settings["epsilon"])
        self.epsilon_high = float(settings["epsilon_high"])
        self.delta = settings.get("delta")
        self.beta = float(settings["beta"])
        self.bias_corrected_kl = bool(settings["use_bias_correction_kl"])
        self.max_new = int(settings["max_completion_length"])

    def compute(self, logp, old, ref, advantages, mask):
        """``GrpoLoss.compute``: the batch's summed loss (per completion, or per token for ``dapo``), the
        completion-token count, and TRL's ``kl`` and ``clip_ratio/*``."""
        rows = logp.shape[0]
        lengths = mask.sum(dim=1)
        tokens = float(lengths.sum())
        if self.loss_type == "grpo":
            scale = 1.0 / lengths.clamp(min=1.0)
        elif self.loss_type == "bnpo":
            scale = torch.full((rows,), rows / max(1.0, tokens), dtype=torch.float32, device=logp.device)
        elif self.loss_type == "dr_grpo":
            scale = torch.full((rows,), 1.0 / self.max_new, dtype=torch.float32, device=logp.device)
        else:
            scale = torch.ones((rows,), dtype=torch.float32, device=logp.device)
        advantage = advantages.to(logp.device).unsqueeze(1)
        ratio = (logp - old).exp()
        clipped = ratio.clamp(min=1 - self.epsilon_low, max=1 + self.epsilon_high)
        unclipped = ratio if self.delta is None else ratio.clamp(max=float(self.delta))
        per_token = -torch.minimum(unclipped * advantage, clipped * advantage)
        kl = None
        if self.beta != 0:
            to_reference = ref - logp
            kl = to_reference.exp() - to_reference - 1
            if self.bias_corrected_kl:
                kl = kl * ratio
            per_token = per_token + self.beta * kl
        total = ((per_token * mask).sum(dim=1) * scale).sum()
        return total, tokens, self._metrics(unclipped.detach(), None if kl is None else kl.detach(), mask,
                                            advantages)

    def _metrics(self, ratio, kl, mask, advantages):
        counted = mask != 0
        count = max(1.0, float(counted.sum()))
        sign = advantages.to(ratio.device).unsqueeze(1)
        low = counted & (ratio < 1 - self.epsilon_low) & (sign < 0)
        high = counted & (ratio > 1 + self.epsilon_high) & (sign > 0)
        row_tokens = counted.sum(dim=1)
        has = row_tokens > 0
        metrics = {}
        if kl is not None:
            metrics["kl"] = float((kl * counted).double().sum()) / count
        metrics["clip_ratio/low_mean"] = float(low.sum()) / count
        metrics["clip_ratio/high_mean"] = float(high.sum()) / count
        metrics["clip_ratio/region_mean"] = float(low.sum() + high.sum()) / count
        if bool(has.any()):
            metrics["clip_ratio/low_min"] = float((low.sum(dim=1)[has].double() / row_tokens[has]).min())
            metrics["clip_ratio/high_max"] = float((high.sum(dim=1)[has].double() / row_tokens[has]).max())
        else:
            metrics["clip_ratio/low_min"] = 0.0
            metrics["clip_ratio/high_max"] = 0.0
        return metrics


class Grpo:
    """The objective: :meth:`start_step` samples and scores the step's micro batches of this rank, :meth:`loss`
    scores one of them in the order the loop runs them, :meth:`evaluate` rolls out and scores the held-out prompts."""

    name = "grpo"

    def __init__(self, settings, lora, plan):
        self.settings = settings
        self.lora = lora
        self.seed = int(plan["seed"])
        self.reshard_after_forward = bool(plan.get("reshard_after_forward", True))
        self.generations = int(settings["num_generations"])
        self.max_new = int(settings["max_completion_length"])
        self.loss_type = settings["loss_type"]
        self.beta = float(settings["beta"])
        self.objective = Loss(settings)
        self.mask_truncated = bool(settings["mask_truncated_completions"])
        special = data.load_metadata(plan["batches"])
        self.eos_id = int(special["eos_id"])
        self.pad_id = int(special["pad_id"])
        self.sampler = Sampler(settings)
        self.channel = RewardChannel()
        self.pending = []
        self.unit_scale = 1.0
        self._mode = None
        self.bf16 = plan.get("bf16", "auto")
        self.reference = Reference(lora and self.beta != 0 and settings.get("reference") == "initial")

    def prepare(self, model, train, evaluation, world):
        self.reference.prepare(model)
        return train, evaluation

    @staticmethod
    def samples(batch):
        """Completions, as ``GrpoBatch.samples``."""
        return batch.weight

    # -- sampling ---------------------------------------------------------------------------------------------

    def _prompts(self, batch):
        lengths = (batch.segments != 0).sum(dim=1).tolist()
        return [batch.ids[r, :lengths[r]].tolist() for r in range(batch.ids.shape[0])]

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

    def rollout_mode(self, model, world):
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
                element = 2 if self.bf16 != "false" and torch.cuda.is_bf16_supported() else 4
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

    def _rollouts(self, model, batches, seeds, world):
        model.eval()
        with torch.no_grad():
            if self.rollout_mode(model, world) == "gathered":
                with gathered(model, self.reshard_after_forward):
                    return [self.sample(model, self._prompts(b), s, world.device) for b, s in zip(batches, seeds)]
            # every rank runs as many rollouts (and forwards) as the busiest one; the extra ones are thrown away
            rounds = int(distributed.max_all(float(len(batches)), world.device))
            out = []
            for turn in range(rounds):
                if turn < len(batches):
                    out.append(self.sample(model, self._prompts(batches[turn]), seeds[turn], world.device, True))
                else:
                    self.sample(model, [[self.pad_id]], 0, world.device, True)
            return out

    def _score(self, split, batches, completions, world):
        """Every rank's completions to the launcher through rank 0; this rank's answers back, in order."""
        mine = [{"index": b.key[1], "completions": c} for b, c in zip(batches, completions)]
        parts = [None] * world.size if world.rank == 0 else None
        dist.gather_object(mine, parts, dst=0)
        answer = [None]
        if world.rank == 0:
            try:
                reply = self.channel.ask({"split": split, "batches": [item for part in parts for item in part]})
            except Exception as error:  # noqa: BLE001 - every rank stops with the same message
                reply = {"error": "%s: %s" % (type(error).__name__, error)}
            if "error" in reply:
                answer = [{"error": reply["error"]}]
            else:
                answers, at = [], 0
                for part in parts:
                    answers.append(reply["batches"][at:at + len(part)])
                    at += len(part)
                answer = [{"ranks": answers}]
        dist.broadcast_object_list(answer, src=0)
        if "error" in answer[0]:
            raise RuntimeError("reward channel: " + answer[0]["error"])
        return answer[0]["ranks"][world.rank]

    def _scored(self, batches, completions, answers):
        out = []
        for batch, completion, answer in zip(batches, completions, answers):
            prompts = self._prompts(batch)
            ids, positions, segments, targets, completion_mask = _rows(prompts, completion, self.pad_id)
            mask = completion_mask.clone()
            if self.mask_truncated:
                mask[torch.tensor(answer["truncated"], dtype=torch.bool)] = 0.0
            out.append({"ids": ids, "positions": positions, "segments": segments, "targets": targets,
                        "completion_mask": completion_mask, "mask": mask,
                        "advantages": torch.tensor(answer["advantages"], dtype=torch.float32),
                        "metrics": answer["metrics"], "weight": batch.weight})
        return out

    def start_step(self, model, batches, step, micro_indices, world):
        """Samples this rank's micro batches of the step (each seeded as the JVM seeds that micro batch of the
        global window), has them scored, and for ``dapo`` learns the window's completion tokens over all ranks."""
        seeds = [micro_step_seed(self.seed, step, m) for m in micro_indices]
        completions = self._rollouts(model, batches, seeds, world)
        answers = self._score("train", batches, completions, world)
        self.pending = self._scored(batches, completions, answers)
        self.unit_scale = 1.0
        if self.loss_type == "dapo":
            # The loss is a sum over the window's completion tokens: the loop divides by completions, so scale.
            totals = distributed.sum_all([sum(float(p["mask"].sum()) for p in self.pending),
                                          float(sum(p["weight"] for p in self.pending))], world.device)
            self.unit_scale = totals[1] / max(1.0, totals[0])

    # -- the loss ---------------------------------------------------------------------------------------------

    def _logits(self, model, item, device):
        segments = item["segments"].to(device)
        mask = data.attention_mask(segments, torch.float32)
        if device.type != "cpu":
            mask = mask == 0
        return model(input_ids=item["ids"].to(device), position_ids=item["positions"].to(device),
                     attention_mask=mask, use_cache=False).logits.float()

    @staticmethod
    def _token_log_probs(logits, targets, completion_mask):
        gathered_targets = targets.clamp(min=0).unsqueeze(-1)
        return logits.log_softmax(-1).gather(-1, gathered_targets).squeeze(-1) * completion_mask

    def _score_rows(self, model, item, device):
        targets = item["targets"].to(device)
        completion_mask = item["completion_mask"].to(device)
        mask = item["mask"].to(device)
        ref = None
        if self.beta != 0:
            with torch.no_grad():
                with self.reference.of(model):
                    ref = self._token_log_probs(self._logits(model, item, device), targets, completion_mask)
        logits = self._logits(model, item, device)
        logp = self._token_log_probs(logits, targets, completion_mask)
        total, tokens, metrics = self.objective.compute(logp, logp.detach(), ref, item["advantages"], mask)
        with torch.no_grad():
            logp_all = logits.detach().log_softmax(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
            per_row = (entropy * completion_mask).double().sum(dim=1)
            counted = mask.sum(dim=1)
            used = counted > 0
            metrics["entropy"] = float(per_row[used].sum() / counted[used].double().sum()) if bool(used.any()) else 0.0
        metrics.update(item["metrics"])
        return total, tokens, metrics

    def loss(self, model, batch):
        item = self.pending.pop(0)
        total, _, metrics = self._score_rows(model, item, batch.ids.device)
        return total * self.unit_scale, metrics

    def evaluate(self, model, batches, world):
        """The held-out prompts: every rank rolls out its share (seeded with the recipe's seed, as the JVM trainer's
        evaluation is), the launcher scores them, and the loss is summed in the objective's own units."""
        mine = data.rank_share(batches, world.rank, world.size)
        rounds = (len(batches) + world.size - 1) // world.size
        completions = self._rollouts(model, mine, [self.seed] * len(mine), world)
        items = self._scored(mine, completions, self._score("eval", mine, completions, world))
        model.eval()
        loss_sum, units, weight_sum, metric_sums = 0.0, 0.0, 0.0, {}
        with torch.no_grad():
            for turn in range(rounds):
                if turn < len(items):
                    total, tokens, metrics = self._score_rows(model, items[turn], world.device)
                    loss_sum += float(total)
                    units += tokens if self.loss_type == "dapo" else items[turn]["weight"]
                    weight_sum += items[turn]["weight"]
                    for name, value in metrics.items():
                        metric_sums[name] = metric_sums.get(name, 0.0) + value * items[turn]["weight"]
                else:
                    # Every rank runs the same forward passes as _score_rows, in its order (each all-gathers the
                    # sharded weights, and the reference's swap reshards them all)
                    prompts = batches[0]
                    if self.beta != 0:
                        with self.reference.of(model):
                            model(input_ids=prompts.ids.to(world.device),
                                  position_ids=prompts.positions.to(world.device),
                                  attention_mask=self._mask_for(prompts, world.device), use_cache=False)
                    model(input_ids=prompts.ids.to(world.device), position_ids=prompts.positions.to(world.device),
                          attention_mask=self._mask_for(prompts, world.device), use_cache=False)
        all_names = set()
        for part in distributed.gather_objects(sorted(metric_sums)):
            all_names.update(part)
        names = sorted(all_names)
        totals = distributed.sum_all([loss_sum, units, weight_sum] + [metric_sums.get(n, 0.0) for n in names],
                                     world.device)
        line = {"eval_loss": totals[0] / max(1.0, totals[1])}
        for name, value in zip(names, totals[3:]):
            line["eval_" + name] = value / max(1.0, totals[2])
        return line

    def _mask_for(self, batch, device):
        mask = data.attention_mask(batch.segments.to(device), torch.float32)
        return mask if device.type == "cpu" else mask == 0
