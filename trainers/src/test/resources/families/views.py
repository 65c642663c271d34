"""What transformers and PEFT compute for saved models, many requests in one process (one torch import).

usage: views.py REQUESTS.json OUT.json

REQUESTS.json is a list of objects, each with a "kind" and its own fields; OUT.json gets one result per request:
  logits:   {"model", "adapter"?, "ids"} -> {"logits": [[...]]}: float32 logits of one sequence (PEFT on top when an
            adapter folder is given), eager attention, no cache
  generate: {"model", "ids", "new_tokens"} -> {"tokens": [...]}: greedy continuation with transformers' KV cache
  merged:   {"model", "adapter", "out"} -> {"parameters": n}: PEFT's merge_and_unload() saved to "out"
  peft:     {"model", "adapter"} -> {"missing": [...], "unexpected": [...], "trainable": n}: how the adapter loads
  adapter:  {"model", "out", "r", "target_modules", "target_parameters"} -> {"trainable": n}: a PEFT LoRA adapter with
            random A and B (B is zero as PEFT starts it, which would merge to nothing) saved to "out"
  loss:     {"model", "adapter"?, "ids", "worker"} -> {"transformers": x, "worker": y}: the mean next-token loss of one
            sequence as the model's own forward computes it with labels (for a mixture of experts whose config sets
            output_router_logits, plus router_aux_loss_coef x its load-balancing loss), and as the worker's kernels
            compute it (its summed loss over the target count), the worker's modules imported from "worker"
"""
import json
import sys
import warnings

import torch

warnings.filterwarnings("ignore")

from transformers import AutoModelForCausalLM  # noqa: E402


def load(folder, adapter=None):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter)
    return model.eval()


def logits(request):
    model = load(request["model"], request.get("adapter"))
    with torch.no_grad():
        out = model(input_ids=torch.tensor([request["ids"]]), use_cache=False).logits[0]
    return {"logits": out.float().tolist()}


def generate(request):
    model = load(request["model"], request.get("adapter"))
    ids = torch.tensor([request["ids"]])
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=request["new_tokens"],
                             do_sample=False, min_new_tokens=request["new_tokens"], pad_token_id=0)
    return {"tokens": out[0, ids.shape[1]:].tolist()}


def merged(request):
    model = load(request["model"], request["adapter"]).merge_and_unload()
    model.save_pretrained(request["out"], safe_serialization=True)
    return {"parameters": model.num_parameters()}


def peft(request):
    from peft import PeftModel, set_peft_model_state_dict
    from safetensors.torch import load_file

    base = AutoModelForCausalLM.from_pretrained(request["model"], dtype=torch.float32)
    model = PeftModel.from_pretrained(base, request["adapter"], is_trainable=True)
    # PeftModel.from_pretrained only warns; loading the state dict again reports what did not fit
    result = set_peft_model_state_dict(model, load_file(request["adapter"] + "/adapter_model.safetensors"))
    missing = [k for k in result.missing_keys if "lora_" in k]
    return {"missing": missing, "unexpected": list(result.unexpected_keys),
            "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad)}


def adapter(request):
    from peft import LoraConfig, get_peft_model

    model = AutoModelForCausalLM.from_pretrained(request["model"], dtype=torch.float32)
    config = LoraConfig(r=request["r"], lora_alpha=2 * request["r"], target_modules=request["target_modules"],
                        target_parameters=request.get("target_parameters") or None)
    model = get_peft_model(model, config)
    torch.manual_seed(11)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.normal_(0.0, 0.2)
    model.save_pretrained(request["out"])
    return {"trainable": sum(p.numel() for p in model.parameters() if p.requires_grad)}


def loss(request):
    sys.path.insert(0, request["worker"])
    from finetune_worker import data, kernels
    from finetune_worker import plan as plans

    model = load(request["model"], request.get("adapter"))
    ids = torch.tensor([request["ids"]])
    with torch.no_grad():
        theirs = model(input_ids=ids, labels=ids, use_cache=False).loss
        targets = torch.cat([ids[:, 1:], torch.full((1, 1), -100)], dim=1)
        segments = torch.ones_like(ids)
        batch = data.MicroBatch(ids, torch.arange(ids.shape[1]).unsqueeze(0), segments, targets,
                                int((targets != -100).sum()), ids.shape[1], ("test", 0), data.documents(segments))
        # the plain path: every fast-path piece of the plan's kernels section off
        plain = plans.Kernels(head="plain", attention="dense", liger=(), activation_offloading=False,
                              torch_compile=False, torch_compile_backend="inductor", torch_compile_mode=None)
        run = kernels.setup(model.get_base_model() if hasattr(model, "get_base_model") else model, plain,
                            torch.device("cpu"), torch.float32)
        ours = run.sft_loss(model, batch) / batch.weight
    return {"transformers": float(theirs), "worker": float(ours), "router": run.router is not None}


KINDS = {"logits": logits, "generate": generate, "merged": merged, "peft": peft, "adapter": adapter, "loss": loss}


def main(requests_path, out_path):
    with open(requests_path) as f:
        requests = json.load(f)
    results = [KINDS[r["kind"]](r) for r in requests]
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
