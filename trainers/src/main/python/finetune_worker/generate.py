"""``finetune generate`` for the families the in-JVM model does not implement (Gemma, Phi-3, the mixtures of experts,
OLMo, Granite, ...): ``python -m finetune_worker generate REQUEST.json RESULT.json``.

The model is loaded with the worker's own training code (:mod:`loading`: the architecture from ``config.json``, the
LoRA modules from the saved ``adapter_config.json``, every tensor looked up by name in the base's safetensors and in
``adapter_model.safetensors``), never through PEFT's ``PeftModel.from_pretrained``: that is the reference the tests
compare with. A merged model (``merge-lora``'s output) is a plain model folder and loads the same way, without an
adapter. Float32 on the CPU, eager attention: the arithmetic the in-JVM model does.

The loop is ``Generator.java``'s: the prompts left-padded into one batch (each real token at its true position), a KV
cache, :class:`sampler.Sampler` with Java's ``SplittableRandom(seed)`` stream (so a seed samples what the JVM would
on the same logits), a row stops after an EOS id, a stop sequence or ``max_new_tokens``. The result is what
``Completion.java`` holds: the tokens, why they stopped, the raw logits at the last prompt position.

REQUEST.json: ``{"model": BASE_FOLDER, "adapter": ADAPTER_FOLDER or null, "prompts": [[ids]], "max_new_tokens",
"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "seed", "eos_ids": [...], "stop_sequences": [[...]]}``.
RESULT.json: ``{"completions": [{"tokens": [...], "stop": "eos"|"stop_sequence"|"max_new_tokens",
"last_logits": [...]}]}``, written whole or not at all.
"""

import json
import os
import types

import torch


def main(request_path, result_path):
    with open(request_path) as f:
        request = json.load(f)
    torch.manual_seed(0)  # nothing here draws; PEFT's init of modules the file then fills does
    model = load(request["model"], request.get("adapter"))
    completions = generate(model, request)
    staging = result_path + ".partial"
    with open(staging, "w") as f:
        json.dump({"completions": completions}, f)
    os.replace(staging, result_path)
    return 0


def load(base, adapter):
    """The model of ``base`` (with the adapter folder ``adapter`` on top when given) as the worker trains it, in float32
    on the CPU, every weight filled from the files."""
    from finetune_worker import loading, plan, precision

    kernels = plan.Kernels(head="plain", attention="dense", liger=(), activation_offloading=False,
                           torch_compile=False, torch_compile_backend=None, torch_compile_mode=None)
    lora = None if adapter is None else plan.Adapter(kind="lora", initial=adapter, peft_init=None, quantized=False,
                                                      double_quant=False, quant_storage="float32")
    section = plan.Model(path=base, compute_dtype="float32", precision="fp32", tf32=False,
                         gradient_checkpointing=False, adapter=lora, kernels=kernels)
    cpu = torch.device("cpu")
    model, _, _ = loading.on_meta(types.SimpleNamespace(model=section), precision.of("fp32"), attention="eager",
                                  device=cpu)
    loading.materialise(model, types.SimpleNamespace(device=cpu))
    loading.fill(model, base, adapter)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    # the router's load-balancing loss is a training term (and transformers' fails on a padded, cached decode step)
    if getattr(model.config, "output_router_logits", False):
        model.config.output_router_logits = False
    return model.eval()


def _settings(request):
    return types.SimpleNamespace(temperature=float(request["temperature"]), top_k=int(request["top_k"]),
                                 top_p=float(request["top_p"]), min_p=float(request["min_p"]),
                                 repetition_penalty=float(request["repetition_penalty"]))


def generate(model, request):
    """One completion per prompt, in order (``Generator.generate``)."""
    from finetune_worker.sampler import JavaRandom, Sampler

    prompts = [list(map(int, p)) for p in request["prompts"]]
    max_new = int(request["max_new_tokens"])
    eos = set(int(i) for i in request["eos_ids"])
    stops = [list(map(int, s)) for s in request["stop_sequences"] if s]
    sampler = Sampler(_settings(request))
    random = JavaRandom(int(request["seed"]))
    rows = len(prompts)
    width = max(len(p) for p in prompts)
    ids = torch.zeros((rows, width), dtype=torch.long)
    mask = torch.zeros((rows, width), dtype=torch.long)
    positions = torch.zeros((rows, width), dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[r, width - len(p):] = 1
        positions[r, width - len(p):] = torch.arange(len(p))
    # transformers builds each layer's mask from the 2-D padding mask (its sliding windows and chunking included),
    # and the model makes the cache its layers need (a sliding window's own kind)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        logits = out.logits[:, -1, :].float()
        last_logits = logits.tolist()
        cache = out.past_key_values
        tokens = [[] for _ in range(rows)]
        why = [None] * rows
        history = [list(p) for p in prompts]
        following = torch.tensor([len(p) for p in prompts], dtype=torch.long)
        chosen = sampler.choose(logits, random, history)
        for step in range(max_new):
            for r, token in enumerate(chosen):
                if why[r] is not None:
                    continue
                tokens[r].append(token)
                history[r].append(token)
                if token in eos:
                    why[r] = "eos"
                elif any(len(s) <= len(tokens[r]) and tokens[r][-len(s):] == s for s in stops):
                    why[r] = "stop_sequence"
                elif len(tokens[r]) == max_new:
                    why[r] = "max_new_tokens"
            if all(w is not None for w in why) or step + 1 == max_new:
                break
            mask = torch.cat([mask, torch.ones((rows, 1), dtype=torch.long)], dim=1)
            out = model(input_ids=torch.tensor(chosen, dtype=torch.long).unsqueeze(1), attention_mask=mask,
                        position_ids=(following + step).unsqueeze(1), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            chosen = sampler.choose(out.logits[:, -1, :].float(), random, history)
    return [{"tokens": tokens[r], "stop": why[r] or "max_new_tokens", "last_logits": last_logits[r]}
            for r in range(rows)]
