"""The precision regimes the memory plan names (``finetune plan --precision``), each one the worker runs exactly.

A regime says in which dtype each kind of state is stored; the plan multiplies the same bytes by the same counts
(recipes/.../plan/PrecisionRegime.java), so what a rank holds after its first step is what the plan printed:

- ``fp32``: every weight, gradient and optimizer moment in float32; compute in float32.
- ``bf16`` (pure bf16): weights, gradients and moments in bfloat16 (torch's optimizers keep state in the parameter's
  dtype), as a model loaded with ``torch_dtype=bfloat16`` trains under the HF Trainer, Axolotl and torchtune.
- ``bf16-fp32-moments``: bfloat16 weights and gradients, the optimizer's moments in float32.
- ``mixed``: bfloat16 compute over float32 master weights: trainable weights, their gradients and moments in float32;
  FSDP2 gathers each unit's weights as bfloat16 for the forward and backward (``MixedPrecisionPolicy``); frozen
  weights (a LoRA base) are stored in bfloat16, since no update ever needs their extra bits.

Gradients are reduce-scattered in float32 in every regime: a sum over many ranks in bfloat16 would lose the bits the
regime keeps.
"""

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Regime:
    name: str
    frozen: torch.dtype  # a frozen (LoRA base) weight as stored
    trainable: torch.dtype  # a trainable weight as stored: the copy the optimizer updates
    compute: torch.dtype  # what the forward and backward read: FSDP2's all-gathered unit
    moments: torch.dtype  # an optimizer moment

    def policy(self):
        from torch.distributed.fsdp import MixedPrecisionPolicy

        # param_dtype None leaves each parameter as stored; set only where compute differs from storage
        cast = self.compute if self.compute != self.trainable else None
        return MixedPrecisionPolicy(param_dtype=cast, reduce_dtype=torch.float32)


REGIMES = {
    "fp32": Regime("fp32", torch.float32, torch.float32, torch.float32, torch.float32),
    "bf16": Regime("bf16", torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.bfloat16),
    "bf16-fp32-moments": Regime("bf16-fp32-moments", torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.float32),
    "mixed": Regime("mixed", torch.bfloat16, torch.float32, torch.bfloat16, torch.float32),
}


def of(name):
    if name not in REGIMES:
        raise ValueError("unknown precision regime %r (the worker runs %s)" % (name, ", ".join(REGIMES)))
    return REGIMES[name]


def set_tf32(enabled):
    """``tf32``: float32 matrix multiplies on TF32 tensor cores (Ampere and later); a no-op on CPU."""
    torch.backends.cuda.matmul.allow_tf32 = bool(enabled)
    torch.backends.cudnn.allow_tf32 = bool(enabled)
