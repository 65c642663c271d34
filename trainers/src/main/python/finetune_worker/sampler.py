"""The JVM trainer's sampler in torch (``generation/Sampler.java``): repetition penalty, temperature, top-k, top-p,
min-p, then inverse-CDF sampling with uniforms from Java's ``SplittableRandom`` seeded like the JVM's micro step, so
on the same weights the worker samples the same completions as the single-device trainer, on any number of ranks.
"""

import torch

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
        """``settings``: the plan's GRPO section (:class:`finetune_worker.plan.Grpo`)."""
        self.temperature = settings.temperature
        self.top_k = settings.top_k
        self.top_p = settings.top_p
        self.min_p = settings.min_p
        self.penalty = settings.repetition_penalty

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
