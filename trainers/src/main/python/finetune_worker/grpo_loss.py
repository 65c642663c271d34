"""GRPO's per-token loss, ``train/grpo/GrpoLoss.java`` (TRL's ``_compute_loss``) in torch: it is differentiable, so
it has to exist in torch as well; the equivalence tests and WorkerGrpoLossTest hold the two together.
"""

import torch


class Loss:
    """``train/grpo/GrpoLoss.java`` in torch (TRL's ``_compute_loss``), with the same settings, names and units."""

    def __init__(self, loss_type, epsilon, epsilon_high, delta, beta, use_bias_correction_kl, max_completion_length):
        self.loss_type = loss_type
        self.epsilon_low = float(epsilon)
        self.epsilon_high = float(epsilon_high)
        self.delta = delta
        self.beta = float(beta)
        self.bias_corrected_kl = bool(use_bias_correction_kl)
        self.max_new = int(max_completion_length)

    @classmethod
    def of(cls, grpo):
        """From the plan's GRPO section (:class:`finetune_worker.plan.Grpo`)."""
        return cls(grpo.loss_type, grpo.epsilon, grpo.epsilon_high, grpo.delta, grpo.beta, grpo.use_bias_correction_kl,
                   grpo.max_completion_length)

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
