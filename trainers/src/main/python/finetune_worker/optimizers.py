"""The optimizer a recipe names, built in one place: every name the launcher lets through is the update it names.

The launcher refuses a name this worker cannot run before anything starts (``finetune_worker check`` tells it what
is installed); :func:`build` refuses again, one line, if it gets one anyway. Names and behaviour are the Hugging Face
Trainer's (``OptimizerNames``):

- ``adamw_torch``, ``adamw_hf``: ``torch.optim.AdamW`` (multi-tensor); ``adamw_torch_fused``: the same update in
  torch's fused kernel. Under the ``bf16-fp32-moments`` regime, :class:`AdamWFp32Moments` (the same update with
  float32 moments beside bfloat16 weights, which torch's AdamW cannot keep: it stores state in the parameter dtype).
- ``sgd``: ``torch.optim.SGD`` as HF builds it: no momentum (the recipe has no ``optim_args``), weight decay added
  to the gradient. It keeps no state.
- bitsandbytes' 8-bit, paged and Lion optimizers, where bitsandbytes is installed on CUDA and the parameters are
  plain tensors (a rank of an FSDP2 run steps DTensor shards, which its kernels do not take).

Weight decay follows the HF Trainer's grouping: biases and normalisation weights are not decayed.
"""

import math

import torch

TORCH = ("adamw_torch", "adamw_hf", "adamw_torch_fused", "sgd")
BITSANDBYTES = ("adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit", "lion_8bit", "lion_32bit",
                "paged_lion_8bit", "paged_lion_32bit")


def parameter_groups(model, weight_decay):
    decayed, plain = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        lower = name.lower()
        # The Hugging Face Trainer's rule, as the JVM trainer's: biases and norm weights are not decayed.
        (plain if lower.endswith("bias") or "norm" in lower else decayed).append(parameter)
    groups = [{"params": decayed, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def build(model, settings, regime, device):
    """``settings``: the plan's ``plan.Optimizer`` (name, beta1, beta2, epsilon, weight_decay); the learning rate
    is set before every step from the schedule."""
    name = settings.name
    groups = parameter_groups(model, settings.weight_decay)
    betas = (settings.beta1, settings.beta2)
    if name in ("adamw_torch", "adamw_hf", "adamw_torch_fused"):
        if regime.moments != regime.trainable:
            return AdamWFp32Moments(groups, lr=0.0, betas=betas, eps=settings.epsilon)
        # one fused kernel for every parameter on CUDA (no per-tensor launches, no host round trip); on CPU only
        # where the recipe names the fused one
        fused = {"fused": True} if name == "adamw_torch_fused" or device.type == "cuda" else {}
        return torch.optim.AdamW(groups, lr=0.0, betas=betas, eps=settings.epsilon, **fused)
    if name == "sgd":
        return torch.optim.SGD(groups, lr=0.0)
    if name in BITSANDBYTES:
        return _bitsandbytes(name, groups, betas, settings.epsilon, device)
    raise ValueError("the worker does not run optimizer %r (it runs %s)" % (name, ", ".join(TORCH + BITSANDBYTES)))


def _bitsandbytes(name, groups, betas, epsilon, device):
    from finetune_worker import extras

    extras.require_bitsandbytes("optimizer: " + name, device)
    import bitsandbytes.optim as bnb
    from torch.distributed.tensor import DTensor

    if any(isinstance(p, DTensor) for g in groups for p in g["params"]):
        raise ValueError("optimizer %s cannot step FSDP2's sharded DTensor parameters (bitsandbytes' kernels take "
                         "plain tensors): use adamw_torch_fused on more than one GPU" % name)
    bits = 8 if "8bit" in name else 32
    paged = name.startswith("paged_")
    if "lion" in name:
        return bnb.Lion(groups, lr=0.0, betas=betas, optim_bits=bits, is_paged=paged)
    return bnb.AdamW(groups, lr=0.0, betas=betas, eps=epsilon, optim_bits=bits, is_paged=paged)


def state_dtype(optimizer):
    """The dtype of the first moment found, or None before the first step."""
    for state in optimizer.state.values():
        for value in state.values():
            if torch.is_tensor(value) and value.dim() > 0:
                return value.dtype
    return None


class AdamWFp32Moments(torch.optim.Optimizer):
    """``torch.optim.AdamW``'s update (decoupled decay, bias-corrected moments) for bfloat16 weights with float32
    moments: each tensor is widened to float32 for its update only, one tensor at a time, and rounded back once.

    State names are torch's (``step``, ``exp_avg``, ``exp_avg_sq``), and each moment has its parameter's sharding,
    so ``torch.distributed.checkpoint`` saves and reshards it like AdamW's own."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, eps, decay = float(group["lr"]), group["eps"], group["weight_decay"]
            for parameter in group["params"]:
                if parameter.grad is None:
                    continue
                state = self.state[parameter]
                if not state:
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(parameter, dtype=torch.float32)
                    state["exp_avg_sq"] = torch.zeros_like(parameter, dtype=torch.float32)
                state["step"] += 1
                step = float(state["step"])
                weight, grad = _local(parameter), _local(parameter.grad).float()
                first, second = _local(state["exp_avg"]), _local(state["exp_avg_sq"])
                first.lerp_(grad, 1 - beta1)
                second.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denominator = (second.sqrt() / math.sqrt(1 - beta2 ** step)).add_(eps)
                wide = weight.float()
                wide.mul_(1 - lr * decay)
                wide.addcdiv_(first, denominator, value=-lr / (1 - beta1 ** step))
                weight.copy_(wide)
        return loss


def _local(tensor):
    """A DTensor's local shard (a view: writing it writes the parameter), or the tensor itself."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor
