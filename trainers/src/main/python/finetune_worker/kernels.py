"""How the worker runs the model on a micro batch: the plain path, or the fast one the plan asks for.

The plain path is transformers' forward with a dense ``[B, 1, T, T]`` mask, ``[B, T, V]`` logits and a
cross-entropy over them. The fast path changes how, never what (the tests hold each piece to the plain path):

* ``head: chunked``: the LM head inside the loss, one chunk of rows at a time (:mod:`head_loss`);
* ``attention``: per-document causal attention from the segment ids, no dense mask (:mod:`packed_attention`);
* ``torch_compile``: each decoder layer compiled in place (``nn.Module.compile``: parameter names unchanged);
* ``activation_offloading``: with gradient checkpointing, the checkpointed layer inputs wait in pinned CPU memory;
* ``liger``: Liger's fused RMSNorm, RoPE and SwiGLU kernels where the package is installed (CUDA).

What could not be applied, and why, is in :attr:`Kernels.notes`: the launcher prints them.
"""

import contextlib
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from finetune_worker import extras, families, head_loss, packed_attention
from finetune_worker.data import MicroBatch, documents, model_attention_mask

# The recipe's liger_* keys this worker applies, by Liger's own argument names.
LIGER_KEYS = ("rms_norm", "rope", "swiglu", "layer_norm")


@dataclass
class Kernels:
    """What this run computes with. ``head``: ``chunked`` or ``plain``; ``attention``: ``dense`` or one of
    :data:`packed_attention.KERNELS`."""

    head: str = "plain"
    attention: str = "dense"
    compiled: bool = False
    offload: bool = False
    liger: tuple = ()
    notes: list = field(default_factory=list)
    # (coefficient, experts, top-k) of the MoE load-balancing loss, when the model's config asks for it
    router: tuple = None

    def describe(self):
        """One line for the launcher: what runs, then what fell back."""
        parts = ["head %s" % ("inside the loss, in chunks" if self.head == "chunked" else "plain (full logits)"),
                 "attention %s" % ("with a dense mask" if self.attention == "dense" else self.attention)]
        if self.compiled:
            parts.append("decoder layers compiled")
        if self.offload:
            parts.append("checkpointed activations offloaded to CPU")
        if self.liger:
            parts.append("Liger " + ", ".join(self.liger))
        return "; ".join(parts)

    # -- the model calls the objectives make ---------------------------------------------------------------

    def _inputs(self, model, batch):
        inputs = dict(input_ids=batch.ids, position_ids=batch.positions, use_cache=False)
        if self.router is not None:
            # the router logits are recorded by families.router_logits; asked of the model, its forward would compute
            # the load-balancing loss over this 4D mask as if it were the 2D one it expects
            inputs["output_router_logits"] = False
        if self.attention == "dense":
            inputs["attention_mask"] = model_attention_mask(batch.segments, model.config)
        else:
            inputs["finetune_packing"] = packed_attention.describe(
                batch.documents, batch.ids.shape[0], batch.ids.shape[1], self.attention, batch.ids.device,
                batch.segments)
        return inputs

    def sft_loss(self, model, batch):
        """Σ over the batch's target positions of -log p(target), with its gradient; for a mixture of experts whose
        config asks for it, plus the router's load-balancing loss weighted as transformers weights it
        (``router_aux_loss_coef`` times it, per target token, so that the step's division by the target tokens leaves
        transformers' mean loss + coefficient x auxiliary loss)."""
        with families.router_logits(model) if self.router is not None else contextlib.nullcontext([]) as routers:
            if self.head == "chunked":
                with self._offloaded(), head_loss.request(model, "sft", batch.targets):
                    loss = model(**self._inputs(model, batch)).logits
            else:
                loss = -self.token_log_probs(model, batch)[0].sum()
            recorded = list(routers)
        if self.router is None:
            return loss
        real = (batch.segments != 0).to(torch.float32)
        return loss + self.router[0] * families.router_aux_loss(model, recorded, real) * batch.weight

    def token_log_probs(self, model, batch, entropy=False):
        """``[rows, columns]`` log p(target | prefix), exactly 0 where no target; with ``entropy`` also each
        position's prediction entropy (no gradient), else None."""
        if self.head == "chunked":
            with self._offloaded(), head_loss.request(model, "tokens", batch.targets, entropy) as result:
                logp = model(**self._inputs(model, batch)).logits
            return logp, result.entropy_value
        with self._offloaded():
            logits = model(**self._inputs(model, batch)).logits.float()
        rows, columns, vocab = logits.shape
        losses = F.cross_entropy(logits.reshape(rows * columns, vocab), batch.targets.reshape(-1),
                                 reduction="none", ignore_index=-100)
        ent = None
        if entropy:
            with torch.no_grad():
                logp_all = logits.detach().log_softmax(-1)
                ent = -(logp_all.exp() * logp_all).sum(-1)
        return -losses.reshape(rows, columns), ent

    def _offloaded(self):
        if not (self.offload and torch.is_grad_enabled()):
            return contextlib.nullcontext()
        return torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available())


def batch_of(ids, positions, segments, targets):
    """A :class:`MicroBatch` of rows made on the worker (GRPO's prompt ++ completion rows), on the CPU."""
    return MicroBatch(ids, positions, segments, targets, 0, int((segments != 0).sum()), ("rows", 0),
                      documents(segments))


def setup(model, settings, device, dtype, gradient_checkpointing=False):
    """Applies the plan's ``kernels`` settings (:class:`finetune_worker.plan.Kernels`) to the transformers model
    (before PEFT wraps it) and returns what runs."""
    kernels = Kernels()
    if settings.head == "chunked":
        why = head_loss.why_not(model)
        if why is None:
            head_loss.install(model)
            kernels.head = "chunked"
        else:
            kernels.notes.append("head: full logits, because " + why)
    attention = settings.attention
    if attention != "dense":
        why = packed_attention.why_not(model)
        if why is not None:
            kernels.notes.append("attention: dense mask, because " + why)
        else:
            dropout = float(getattr(model.config, "attention_dropout", 0.0) or 0.0)
            kernel = packed_attention.choose(device, dtype, dropout) if attention == "auto" else attention
            packed_attention.install(model)
            kernels.attention = kernel
    kernels.liger = _liger(model, settings.liger, device, kernels.notes)
    kernels.router = families.router_settings(model)
    if settings.activation_offloading:
        if gradient_checkpointing:
            kernels.offload = True
        else:
            kernels.notes.append("activation_offloading needs gradient_checkpointing: nothing offloaded")
    if settings.torch_compile:
        # the recipe's torch_compile_backend / torch_compile_mode, as Axolotl passes them to torch.compile
        options = {}
        if settings.torch_compile_backend:
            options["backend"] = settings.torch_compile_backend
        if settings.torch_compile_mode:
            options["mode"] = settings.torch_compile_mode
        layers = _decoder_layers(model)
        for layer in layers:
            layer.compile(**options)
        kernels.compiled = bool(layers)
    return kernels


def _decoder_layers(model):
    classes = families.decoder_layer_classes(model)
    return [m for m in model.modules() if type(m).__name__ in classes]


def _liger(model, wanted, device, notes):
    """Liger's kernels the recipe asked for (``liger_rms_norm`` ...: the plan names them), patched into this model
    instance."""
    asked = [key for key in LIGER_KEYS if key in wanted]
    if not asked:
        return ()
    if device.type != "cuda":
        notes.append("liger_*: Liger's kernels are Triton (CUDA) kernels; torch's own run on %s" % device.type)
        return ()
    try:
        from liger_kernel.transformers import _apply_liger_kernel_to_instance
    except ImportError:
        notes.append("liger_*: liger-kernel is not installed, torch's own kernels run (install: %s)"
                     % extras.install_command("liger-kernel"))
        return ()
    # every kernel named, the losses off: the head inside our own loss already keeps the logits from existing
    switches = {key: key in asked for key in LIGER_KEYS}
    switches.update(cross_entropy=False, fused_linear_cross_entropy=False, geglu="swiglu" in asked)
    _apply_liger_kernel_to_instance(model=model, **switches)
    return tuple(asked)
