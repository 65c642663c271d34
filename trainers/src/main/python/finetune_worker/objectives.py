"""Objectives: a micro batch in, the summed loss and its metrics out (the loop divides by the global weight).

The arithmetic mirrors the JVM trainer's objectives (trainers/.../train/sft, train/dpo) so that the two loss
sequences can be compared step by step.
"""

import torch
import torch.nn.functional as F

from finetune_worker import plan


class Sft:
    name = "sft"

    def __init__(self, kernels):
        self.kernels = kernels

    def prepare(self, model, train, evaluation, world):
        return train, evaluation

    def loss(self, model, batch):
        return self.kernels.sft_loss(model, batch), {}

    @staticmethod
    def samples(batch):
        """Examples as HF counts them for ``train_samples_per_second`` (``Batch.samples``): packed rows."""
        return int(batch.ids.shape[0])


class Dpo:
    """TRL's DPO losses over rows ``[chosen..., rejected...]``, as the JVM trainer's DpoLoss writes them: several
    ``dpo_loss_type`` terms may be summed with their weights.

    The reference is, as in TRL, the base model with the adapter switched off (LoRA from scratch), or else the
    weights as they start: a full fine-tune's before the first step, or the adapter loaded from ``lora_model_dir``
    (TRL's frozen "ref" copy of it). Those are computed once by :meth:`prepare`, before a resumed run loads its
    checkpoint: the sequence log-probabilities of every batch, which is all a frozen copy would ever give, at the
    cost of one forward pass over the data and no second set of weights under FSDP.
    """

    name = "dpo"
    # the loss types the worker implements, as capabilities.json declares them: the launcher refuses the others
    TYPES = tuple(plan.DECLARED["dpo_loss_types"])

    def __init__(self, settings, reference, lora, kernels):
        """``settings``: the plan's DPO section; ``reference``: the launcher's resolved reference model."""
        self.kernels = kernels
        self.terms = [(term.type, term.weight) for term in settings.terms]
        for kind, _ in self.terms:
            if kind not in self.TYPES:
                raise ValueError("the worker does not implement dpo_loss_type %s" % kind)
        self.beta = settings.beta
        # the adapter switched off runs beside the policy; anything else is the weights before the first step
        self.precomputed = reference != "adapter_disabled"
        self.lora = lora
        self.reference = {}

    @staticmethod
    def samples(batch):
        """Pairs, as ``DpoBatch.samples``."""
        return batch.weight

    def sequence_log_probs(self, model, batch):
        return self.kernels.token_log_probs(model, batch)[0].sum(dim=1)

    def reference_of(self, model, batch):
        if batch.key in self.reference:
            return self.reference[batch.key]
        with torch.no_grad():
            if not self.precomputed:
                with model.disable_adapter():
                    return self.sequence_log_probs(model, batch).detach()
            return self.sequence_log_probs(model, batch).detach()

    def prepare(self, model, train, evaluation, world):
        if not self.precomputed:
            return train, evaluation
        # Training moves the only copy of the starting weights: score every batch now. Every rank runs the same
        # number of forward passes (FSDP all-gathers in each), then the ranks exchange their values.
        from finetune_worker import distributed

        everything = train + evaluation
        values = distributed.map_batches(everything, world,
                                         lambda batch: self.reference_of(model, batch.to(world.device)).cpu().tolist())
        for batch, value in zip(everything, values):
            # kept on the device: a micro batch reads its values without a copy from the host
            self.reference[batch.key] = torch.tensor(value, dtype=torch.float32, device=world.device)
        return train, evaluation

    def per_pair(self, kind, c, r, lengths, pairs):
        if kind == "sigmoid":
            return F.softplus(-(c - r) * self.beta)
        if kind == "hinge":
            return torch.clamp(1 - (c - r) * self.beta, min=0)
        per_token = c / lengths[:pairs] - r / lengths[pairs:]
        if kind == "ipo":
            return (per_token - 1 / (2 * self.beta)) ** 2
        if kind == "sigmoid_norm":
            return F.softplus(-per_token * self.beta)
        # a type declared in capabilities.json without its arm here must fail, never train as another loss
        raise ValueError("the worker declares dpo_loss_type %s but has no arm for it" % kind)

    def loss(self, model, batch):
        reference = self.reference_of(model, batch).to(batch.ids.device)
        policy = self.sequence_log_probs(model, batch)
        pairs = policy.shape[0] // 2
        lengths = (batch.targets != -100).sum(dim=1).clamp(min=1).to(policy.dtype)
        chosen_ratio = policy[:pairs] - reference[:pairs]
        rejected_ratio = policy[pairs:] - reference[pairs:]
        total = None
        for kind, weight in self.terms:
            term = self.per_pair(kind, chosen_ratio, rejected_ratio, lengths, pairs).sum() * weight
            total = term if total is None else total + term
        # 0-dim tensors, left on the device: the loop reads them once per step
        with torch.no_grad():
            chosen = (self.beta * chosen_ratio).double()
            rejected = (self.beta * rejected_ratio).double()
            metrics = {
                "rewards/chosen": chosen.mean(),
                "rewards/rejected": rejected.mean(),
                "rewards/accuracies": (chosen > rejected).double().mean(),
                "rewards/margins": (chosen - rejected).mean(),
                "logps/chosen": policy[:pairs].double().mean(),
                "logps/rejected": policy[pairs:].double().mean(),
            }
        return total, metrics


def of(plan, lora, kernels):
    objective = plan.objective
    if objective.kind == "grpo":
        from finetune_worker import grpo

        return grpo.Grpo(plan, lora, kernels)
    if objective.kind == "sft":
        return Sft(kernels)
    if objective.kind == "dpo":
        return Dpo(objective.dpo, objective.reference, lora, kernels)
    raise ValueError("the worker does not run the objective %r" % objective.kind)
