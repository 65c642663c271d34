"""GRPO on the worker: sample completions with the model under FSDP2, have the Java launcher score them, and take
the clipped policy-ratio loss with the KL pull to the reference.

What lives where (one implementation of each concept):

* Rewards, advantages and the reward/completion metrics are the launcher's (:mod:`reward_channel`).
* Sampling: the JVM trainer's sampler (:mod:`sampler`), run with the model under FSDP2 (:mod:`rollout`).
* The per-token loss mirrors ``train/grpo/GrpoLoss.java`` (:mod:`grpo_loss`); the KL term's reference is
  :mod:`reference`.
* This module: the objective the loop runs, putting those together step by step.
"""

import torch

from finetune_worker import data, distributed
from finetune_worker.grpo_loss import Loss
from finetune_worker.kernels import batch_of
from finetune_worker.reference import Reference
from finetune_worker.reward_channel import RewardChannel, score
from finetune_worker.rollout import Rollout, prompt_ids
from finetune_worker.sampler import micro_step_seed


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


class Grpo:
    """The objective: :meth:`start_step` samples and scores the step's micro batches of this rank, :meth:`loss`
    scores one of them in the order the loop runs them, :meth:`evaluate` rolls out and scores the held-out prompts."""

    name = "grpo"

    def __init__(self, plan, lora, kernels):
        settings = plan.objective.grpo
        self.kernels = kernels
        self.lora = lora
        self.seed = plan.training.seed
        self.generations = settings.num_generations
        self.max_new = settings.max_completion_length
        self.loss_type = settings.loss_type
        self.beta = settings.beta
        self.objective = Loss.of(settings)
        self.mask_truncated = settings.mask_truncated_completions
        special = data.load_metadata(plan.data.batches)
        self.eos_id = int(special["eos_id"])
        self.pad_id = int(special["pad_id"])
        self.rollout = Rollout(plan, self.eos_id, self.pad_id)
        self.channel = RewardChannel()
        self.pending = []
        self.unit_scale = 1.0
        # the launcher resolved it: a frozen copy only of an adapter continued from lora_model_dir
        self.reference = Reference(plan.objective.reference == "frozen_adapter")

    def prepare(self, model, train, evaluation, world):
        self.reference.prepare(model)
        return train, evaluation

    @staticmethod
    def samples(batch):
        """Completions, as ``GrpoBatch.samples``."""
        return batch.weight

    # -- sampling and scoring -------------------------------------------------------------------------------

    def _scored(self, batches, completions, answers):
        out = []
        for batch, completion, answer in zip(batches, completions, answers):
            prompts = prompt_ids(batch)
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
        completions = self.rollout.rollouts(model, batches, seeds, world)
        answers = score(self.channel, "train", batches, completions, world)
        self.pending = self._scored(batches, completions, answers)
        self.unit_scale = 1.0
        if self.loss_type == "dapo":
            # The loss is a sum over the window's completion tokens: the loop divides by completions, so scale.
            totals = distributed.sum_all([sum(float(p["mask"].sum()) for p in self.pending),
                                          float(sum(p["weight"] for p in self.pending))], world.device)
            self.unit_scale = totals[1] / max(1.0, totals[0])

    # -- the loss ---------------------------------------------------------------------------------------------

    def _token_log_probs(self, model, item, device, entropy=False):
        """``[rows, columns]`` log p of the completion tokens (0 elsewhere), and with ``entropy`` each position's
        prediction entropy."""
        batch = batch_of(item["ids"], item["positions"], item["segments"], item["targets"]).to(device)
        logp, ent = self.kernels.token_log_probs(model, batch, entropy)
        completion_mask = item["completion_mask"].to(device)
        return logp * completion_mask, ent

    def _score_rows(self, model, item, device):
        completion_mask = item["completion_mask"].to(device)
        mask = item["mask"].to(device)
        ref = None
        if self.beta != 0:
            with torch.no_grad():
                with self.reference.of(model):
                    ref = self._token_log_probs(model, item, device)[0]
        logp, entropy = self._token_log_probs(model, item, device, entropy=True)
        total, tokens, metrics = self.objective.compute(logp, logp.detach(), ref, item["advantages"], mask)
        with torch.no_grad():
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
        completions = self.rollout.rollouts(model, mine, [self.seed] * len(mine), world)
        items = self._scored(mine, completions, score(self.channel, "eval", mine, completions, world))
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
                                  attention_mask=self._mask_for(model, prompts, world.device), use_cache=False)
                    model(input_ids=prompts.ids.to(world.device), position_ids=prompts.positions.to(world.device),
                          attention_mask=self._mask_for(model, prompts, world.device), use_cache=False)
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

    def _mask_for(self, model, batch, device):
        # the model's sliding windows are in the mask, as in training (a mask per layer type where it has several)
        return data.model_attention_mask(batch.segments.to(device), model.config)
