"""What differs between the model families the worker trains, each in one small function.

transformers builds any family from its config; what the worker must still decide per family is how it shards
(the decoder-layer class), which masks the attention gets (sliding windows per layer type), which weights LoRA
adapts (the plan names them, stacked MoE experts included), and the MoE router's load-balancing loss.
"""

import contextlib
import sys

import torch


def decoder_layer_classes(model):
    """The model's decoder-layer class names: the units FSDP shards and gradient checkpointing recomputes."""
    return set(getattr(model, "_no_split_modules", None) or [])


def _windowed(allowed, window):
    """transformers' sliding_window_overlay: key k stays visible from query q when q - k < window."""
    length = allowed.shape[-1]
    index = torch.arange(length, device=allowed.device)
    return allowed & (index.unsqueeze(1) - index.unsqueeze(0) < window)


def attention_masks(config, allowed, to_mask):
    """The masks for ``model(attention_mask=...)`` from ``allowed`` ``[rows, T, T]`` (causal, within a packed
    example): one 4D mask when every layer attends alike, else a mask per layer type as transformers' families with
    ``layer_types`` take them. A 4D mask reaches the attention as given, so the sliding windows that transformers
    would add to its own causal mask must be in it (positions restart per packed example, so the window never
    crosses into another)."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if not window:
        return to_mask(allowed)
    windowed = to_mask(_windowed(allowed, window))
    if types is None:
        # Mistral, Mixtral, Phi-3: every layer slides when the config has a window
        return windowed
    if not any(t == "sliding_attention" for t in types):
        return to_mask(allowed)
    return {"full_attention": to_mask(allowed), "sliding_attention": windowed}


def lora_config(init):
    """PEFT's LoraConfig for the adapter the plan resolved (``plan.PeftInit``): named ``nn.Linear`` modules
    (``target_modules``) and raw weights (``target_parameters``: stacked experts, routers that are not linears), each
    listed by full name so that PEFT adapts exactly what the plan counted."""
    from peft import LoraConfig

    return LoraConfig(r=init.r, lora_alpha=init.alpha, lora_dropout=init.dropout, use_rslora=init.rslora,
                      target_modules=list(init.target_modules) or None,
                      target_parameters=list(init.target_parameters) or None, bias="none", task_type="CAUSAL_LM")


def check_adapted(model, init):
    """Refuses a PEFT model that adapted other weights than the plan resolved (``plan.PeftInit``): the plan counted
    those (PEFT's transformers-4 compatibility renames MoE targets)."""
    adapted = {name for name, module in model.named_modules() if hasattr(module, "lora_A") and module.lora_A}
    expected = len(init.target_modules) + len(init.target_parameters)
    if len(adapted) != expected:
        raise ValueError("PEFT adapted %d modules where the plan resolved %d targets (%s...)"
                         % (len(adapted), expected, sorted(adapted)[:4]))


def router_settings(model):
    """``(coefficient, experts, top_k)`` of the load-balancing loss when the config asks for it
    (``output_router_logits``), else None."""
    config = model.config
    if not getattr(config, "output_router_logits", False):
        return None
    experts = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None)
    return float(config.router_aux_loss_coef), int(experts), int(config.num_experts_per_tok)


@contextlib.contextmanager
def router_logits(model):
    """Records, while the model runs, what transformers records as its ``router_logits`` (the family's
    ``_can_record_outputs`` entry: each router module's first output). The model's own ``output_router_logits``
    would also make its forward compute the load-balancing loss with the attention mask it was given, which the
    worker's 4D mask is not."""
    from transformers.utils.output_capturing import OutputRecorder

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    spec = getattr(base, "_can_record_outputs", {}).get("router_logits")
    target, index = (spec.target_class, spec.index) if isinstance(spec, OutputRecorder) else (spec, 0)
    recorded = []

    def record(module, inputs, output):
        recorded.append(output[index] if isinstance(output, (tuple, list)) else output)

    hooks = [m.register_forward_hook(record) for m in model.modules() if target is not None and isinstance(m, target)]
    try:
        yield recorded
    finally:
        for hook in hooks:
            hook.remove()


def router_aux_loss(model, router_logits, token_mask):
    """transformers' own ``load_balancing_loss_func`` of the model's family over the router logits of every MoE
    layer, with the real tokens as its 2D mask (the worker's 4D attention mask is not what that function reads)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    # FSDP2 swaps the model's class for one it makes (FSDPMixtralForCausalLM, in torch's module): the family's own
    # class is further up the MRO
    module = next(m for m in (sys.modules.get(c.__module__) for c in type(base).__mro__)
                  if hasattr(m, "load_balancing_loss_func"))
    _, experts, top_k = router_settings(base)
    return module.load_balancing_loss_func(tuple(router_logits), experts, top_k, token_mask)
