"""The model GRPO's KL term pulls towards (``beta`` > 0): as in TRL and the JVM trainer, the base model with the
adapter switched off, or for an adapter continued from ``lora_model_dir`` a frozen copy of that adapter as it starts.
"""

import contextlib

import torch

from finetune_worker import distributed


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
        for module in distributed.fsdp_modules(model):
            module.reshard()
