"""GPU check of the torch worker: the single-GPU fast path, then FSDP2 over every GPU. One command, a table at the end.

    cd trainers/src/main/python && ../../../../.venv/bin/python gpu_check.py      # on a CUDA machine
    python3 gpu_check.py --tiny                                                    # a seconds-long smoke run (CPU too)

Needs this folder, the repository's configs/ (stories260K and the quickstart data) and a Python with the worker's
packages (requirements.txt; requirements-gpu.txt for QLoRA and flash-attn); no Java, no network. It writes what the
Java launcher normally writes (gpu_check_inputs.py: batches, schedule, initial adapter, plan.json) and runs the worker
itself, so what it measures is what ``finetune recipe.yaml`` runs with ``hardware: {gpus: 1}``.

On one GPU, for a random ~1.1B Llama (TinyLlama's shape, 4 x 2,048 packed tokens per micro batch, 2 per step) and
the quickstart (stories260K on configs/data/quickstart.jsonl), LoRA and QLoRA, 20 steps each:

* tokens/s (median of steps 2..N) and MFU: model FLOPs per token (2 per weight forward, 2 more for the input
  gradient, 2 more for the weight gradient of trained weights, plus causal attention) over the card's dense bf16
  peak from the plan's own table (recipes/.../plan/accelerators.tsv; --peak-tflops overrides);
* each rank's peak memory while loading and after step 1 (torch's max_memory_reserved, what the plan estimates)
  against the plan (gpu_check_plan.json beside this file: finetune's own plan of each case, on one GPU and for the
  FSDP case on 2, 4 and 8, which GpuCheckPlanTest writes from ``gpu_check.py --cases``; see docs/gpu.md);
* the first step's loss against the plain fp32 path on the CPU on the same micro batches;
* host synchronisations while the micro batches run (torch's sync debug mode): the fast path promises none.

On all GPUs (when there are several): FSDP2 over them for the 1.1B LoRA case, tokens/s per GPU against the one-GPU
figure. Then the acceptance lines: LoRA 1.1B MFU >= 40 %, QLoRA step time <= 1.5 x LoRA's, peaks within +-15 % of
the plan.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "..", ".."))
ACCELERATORS = os.path.join(ROOT, "recipes/src/main/resources/dev/finetune/recipes/plan/accelerators.tsv")
PLANNED = os.path.join(HERE, "gpu_check_plan.json")
sys.path.insert(0, HERE)
from finetune_worker import plan as plans  # noqa: E402  (the worker's own package, beside this file)
from gpu_check_inputs import RUN, llama_config, write_case, write_random_llama  # noqa: E402  (beside this file)

# TinyLlama-1.1B's shape: 1.10 B parameters.
LLAMA_1B = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                num_key_value_heads=4, vocab_size=32000)
TINY = dict(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4,
            vocab_size=512)


# -- runs --------------------------------------------------------------------------------------------------------

def run_worker(plan_file, nproc, device_is_cpu, log):
    """The worker on this plan: one process as the launcher starts it for one GPU, torchrun for several. Returns its
    events by kind."""
    env = dict(os.environ, PYTHONPATH=HERE, PYTHONUNBUFFERED="1", FINETUNE_SYNC_CHECK="1",
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "4"))
    if device_is_cpu:
        env["FINETUNE_DEVICE"] = "cpu"
    if nproc == 1:
        command = [sys.executable, "-m", "finetune_worker", plan_file]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
                   "-m", "finetune_worker", plan_file]
    events = {"metrics": [], "error": [], "host_syncs": []}
    started = time.time()
    with open(log, "w") as out:
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in process.stdout:
            out.write(line)
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            kind = event.get("event")
            if kind in ("metrics", "error", "host_syncs"):
                events[kind].append(event)
            elif kind in ("start", "peak_memory"):
                events[kind] = event
    events["exit"] = process.wait()
    events["seconds"] = time.time() - started
    return events


def cpu_first_step_loss(case, plan_file):
    """Step 1's loss on the plain fp32 path on the CPU (no fast-path piece), on the same micro batches and starting
    weights: summed cross-entropy over the step's target tokens / their count, as the worker logs it."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from finetune_worker import data, kernels

    plan = plans.load(plan_file)
    train, _ = data.load_batches(plan.data.batches)
    model = AutoModelForCausalLM.from_pretrained(case["model"], dtype=torch.float32, attn_implementation="eager")
    model = PeftModel.from_pretrained(model, plan.model.adapter.initial).eval()
    plain = kernels.Kernels()
    total, weight = 0.0, 0
    with torch.no_grad():
        for batch in train[:plan.data.micro_batches_per_step]:
            total += float(plain.sft_loss(model, batch))
            weight += batch.weight
    return total / weight


def model_flops_per_token(shape, seq, trained_weights):
    """2 FLOPs per weight in forward, 2 for the input gradient, 2 for the weight gradient where weights train
    (LoRA's adapters are negligible); causal attention: QK^T and PV, forward and two backward, over half the keys."""
    h, inter, layers, vocab = shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"], \
        shape["vocab_size"]
    kv = h * shape["num_key_value_heads"] // shape["num_attention_heads"]
    per_layer = h * h * 2 + 2 * h * kv + 3 * h * inter
    weights = layers * per_layer + vocab * h  # the head; the embedding is a lookup
    per_weight = 6 if trained_weights else 4
    attention = 3 * 2 * 2 * layers * h * seq / 2
    return per_weight * weights + attention


def peak_tflops(name, override):
    if override:
        return override, "--peak-tflops"
    key = re.sub(r"[\s_-]", "", name.lower()).replace("nvidia", "")
    best = None
    if os.path.isfile(ACCELERATORS):
        for line in open(ACCELERATORS):
            if line.startswith("#") or line.startswith("name\t") or not line.strip():
                continue
            fields = line.rstrip("\n").split("\t")
            for alias in [fields[0]] + [a for a in fields[1].split(",") if a]:
                normal = re.sub(r"[\s_-]", "", alias.lower())
                if key.startswith(normal) and (best is None or len(normal) > best[0]):
                    best = (len(normal), float(fields[2]), fields[0])
    return (best[1], best[2]) if best else (None, "unknown card: pass --peak-tflops")


# -- main --------------------------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/finetune-gpu-check")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tiny", action="store_true", help="a 2-layer model, 3 steps: a smoke run, CPU too")
    parser.add_argument("--peak-tflops", type=float, default=None, help="the card's dense bf16 peak")
    parser.add_argument("--cases", metavar="DIR", default=None,
                        help="print the one-GPU cases as JSON (the random models' config.json written into DIR, no "
                             "weights) for finetune's plan of each (GpuCheckPlanTest writes gpu_check_plan.json)")
    args = parser.parse_args()
    if args.cases:
        print(json.dumps(planned_cases(args.cases), indent=1))
        return 0

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    steps = 3 if args.tiny else args.steps
    card = torch.cuda.get_device_name(0) if gpus else "none (CPU)"
    peak, peak_source = peak_tflops(card, args.peak_tflops) if gpus else (None, "no GPU")
    print("gpu_check: %d GPU(s): %s; dense bf16 peak %s TFLOPS (%s); torch %s" % (
        gpus, card, peak, peak_source, torch.__version__), flush=True)
    os.makedirs(args.out, exist_ok=True)
    big = os.path.join(args.out, "llama-1b" if not args.tiny else "llama-tiny")
    write_random_llama(big, TINY if args.tiny else LLAMA_1B, "cuda" if gpus else "cpu")
    cases = make_cases(big, args.tiny)
    # the plan is of the full cases on one GPU: a --tiny or CPU run has nothing to compare with
    planned = json.load(open(PLANNED)) if os.path.isfile(PLANNED) and gpus and not args.tiny else {}
    rows = []
    for case in cases:
        rows.append(run_case(case, args, steps, nproc=1, gpus=gpus, peak=peak, planned=planned))
    if gpus > 1:
        fsdp = dict(cases[0], name=FSDP_CASE)
        rows.append(run_case(fsdp, args, steps, nproc=gpus, gpus=gpus, peak=peak, planned=planned))
    print_table(rows, gpus)
    return 0 if all(r["status"] in ("ok", "refused") for r in rows) else 1


# two micro batches per rank per step: a host sync per micro batch would show
MICRO_BATCHES_PER_RANK = 2


def make_cases(big, tiny):
    """The cases, in the table's order; ``big`` is the random Llama's folder."""
    stories = os.path.join(ROOT, "configs/models/stories260K")
    stories_shape = json.load(open(os.path.join(stories, "config.json")))
    big_shape = TINY if tiny else LLAMA_1B
    return [
        dict(name="lora-1.1b", model=big, shape=big_shape, data="random", micro=1 if tiny else 4,
             seq=256 if tiny else 2048, r=16, qlora=False),
        dict(name="qlora-1.1b", model=big, shape=big_shape, data="random", micro=1 if tiny else 4,
             seq=256 if tiny else 2048, r=16, qlora=True),
        dict(name="lora-quickstart", model=stories, shape=stories_shape, data="quickstart", micro=4, seq=256, r=8,
             qlora=False),
        dict(name="qlora-quickstart", model=stories, shape=stories_shape, data="quickstart", micro=4, seq=256, r=8,
             qlora=True),
    ]


def planned_cases(folder):
    """The full cases as finetune plans them for one GPU: each with the run settings and the micro batches per
    step, the random Llama as a config.json in ``folder`` (its weights do not change the plan)."""
    big = os.path.join(folder, "llama-1b")
    os.makedirs(big, exist_ok=True)
    llama_config(LLAMA_1B).save_pretrained(big)
    cases = [dict(case, gpus=1) for case in make_cases(big, tiny=False)]
    # the FSDP case on the GPU counts a machine may have: the plan is per device, for that world size
    cases += [dict(cases[0], name=FSDP_CASE, gpus=n) for n in FSDP_WORLD_SIZES]
    return [dict({k: v for k, v in case.items() if k != "shape"}, micro_batches_per_step=MICRO_BATCHES_PER_RANK,
                 **RUN) for case in cases]


FSDP_CASE = "lora-1.1b fsdp"
FSDP_WORLD_SIZES = (2, 4, 8)


def plan_key(name, gpus):
    """The case's entry in gpu_check_plan.json: its name, and the world size where it is sharded."""
    return name if gpus == 1 else "%s x%d" % (name, gpus)


def run_case(case, args, steps, nproc, gpus, peak, planned):
    name = case["name"]
    folder = os.path.join(args.out, name.replace(" ", "-"))
    per_step = MICRO_BATCHES_PER_RANK * nproc
    plan_file = write_case(case, folder, steps, per_step, nproc)
    print("gpu_check: %s: %s" % (name, plan_file), flush=True)
    events = run_worker(plan_file, nproc, gpus == 0, os.path.join(folder, "worker.log"))
    row = {"case": name, "gpus": nproc, "status": "ok"}
    if events["exit"] != 0 or events["error"]:
        message = events["error"][0]["message"] if events["error"] else "exit %d" % events["exit"]
        row["status"] = "refused" if "Missing:" in message else "FAILED"
        row["note"] = message
        return row
    metrics = [e["metrics"] for e in events["metrics"] if "loss" in e["metrics"]]
    start = events.get("start", {})
    row["kernels"] = start.get("kernels", "")
    row["notes"] = start.get("kernel_notes", [])
    steady = metrics[1:] or metrics
    row["tokens_per_second"] = statistics.median(m["tokens_per_second"] for m in steady)
    tokens_per_step = metrics[0]["num_tokens"]
    row["step_seconds"] = tokens_per_step / row["tokens_per_second"]
    flops = model_flops_per_token(case["shape"], case["seq"], trained_weights=False)
    if peak:
        row["mfu"] = row["tokens_per_second"] * flops / (peak * 1e12 * nproc)
    peaks = events.get("peak_memory", {}).get("ranks", [])
    row["peak_gib"] = max(p["peak_memory_mb"] for p in peaks) / 1024 if peaks else None
    plan = planned.get(plan_key(name, nproc))
    row["plan_gib"] = plan["peak_bytes"] / 2**30 if plan else None
    row["plan_load_gib"] = plan["load_peak_bytes"] / 2**30 if plan and plan.get("load_peak_bytes") else None
    # each rank's load peak (the model built and filled) and step-1 peak: the plan's figures are per device
    row["ranks"] = sorted((p["rank"], p.get("load_peak_memory_mb"), p["peak_memory_mb"]) for p in peaks)
    row["loss"] = metrics[0]["loss"]
    syncs = [e["count"] for e in events["host_syncs"]]
    row["syncs"] = max(syncs) if syncs else None
    if nproc == 1:
        row["cpu_loss"] = cpu_first_step_loss(case, plan_file)
    return row


def print_table(rows, gpus):
    print()
    header = ("case", "GPUs", "tokens/s", "step s", "MFU", "peak GiB", "plan GiB", "peak/plan", "loss 1", "CPU loss 1",
              "syncs", "status")
    print("%-18s %4s %10s %7s %6s %8s %8s %9s %8s %10s %5s  %s" % header)
    one_gpu = {r["case"]: r for r in rows if r["gpus"] == 1}
    for r in rows:
        def f(key, spec, scale=1.0):
            return (spec % (r[key] * scale)) if r.get(key) is not None else "-"
        ratio = "%.2f" % (r["peak_gib"] / r["plan_gib"]) if r.get("peak_gib") and r.get("plan_gib") else "-"
        print("%-18s %4d %10s %7s %6s %8s %8s %9s %8s %10s %5s  %s" % (
            r["case"], r["gpus"], f("tokens_per_second", "%.0f"), f("step_seconds", "%.3f"), f("mfu", "%.1f%%", 100),
            f("peak_gib", "%.2f"), f("plan_gib", "%.2f"), ratio, f("loss", "%.4f"), f("cpu_loss", "%.4f"),
            f("syncs", "%d"), r["status"] + (": " + r["note"] if r.get("note") else "")))
    print()
    for r in rows:
        for rank, load, step in r.get("ranks", []):
            print("%-18s rank %d: load peak %s GiB (plan %s), step-1 peak %s GiB (plan %s)" % (
                r["case"], rank, "%.2f" % (load / 1024) if load is not None else "-",
                "%.2f" % r["plan_load_gib"] if r.get("plan_load_gib") else "-", "%.2f" % (step / 1024),
                "%.2f" % r["plan_gib"] if r.get("plan_gib") else "-"))
    for r in rows:
        if r.get("kernels"):
            print("  %s: %s%s" % (r["case"], r["kernels"], "".join("; " + n for n in r.get("notes", []))))
    print()
    lora, qlora = one_gpu.get("lora-1.1b"), one_gpu.get("qlora-1.1b")
    checks = []
    if gpus and lora and lora.get("mfu") is not None:
        checks.append(("LoRA 1.1B MFU >= 40 %", lora["mfu"] >= 0.40, "%.1f %%" % (100 * lora["mfu"])))
    if lora and qlora and qlora.get("step_seconds") and lora.get("step_seconds"):
        ratio = qlora["step_seconds"] / lora["step_seconds"]
        checks.append(("QLoRA step time <= 1.5 x LoRA", ratio <= 1.5, "%.2f x" % ratio))
    for r in rows:
        if r.get("peak_gib") and r.get("plan_gib"):
            off = r["peak_gib"] / r["plan_gib"] - 1
            checks.append(("%s peak within +-15 %% of the plan" % r["case"], abs(off) <= 0.15, "%+.1f %%" % (100 * off)))
        loads = [load for _, load, _ in r.get("ranks", []) if load is not None]
        if loads and r.get("plan_load_gib"):
            off = max(loads) / 1024 / r["plan_load_gib"] - 1
            checks.append(("%s load peak <= the plan's + 25 %%" % r["case"], off <= 0.25, "%+.1f %%" % (100 * off)))
        if r.get("cpu_loss") is not None and r.get("loss") is not None:
            off = abs(r["loss"] - r["cpu_loss"]) / abs(r["cpu_loss"])
            checks.append(("%s step-1 loss vs CPU fp32 (bf16: <= 2 %%)" % r["case"], off <= 0.02, "%.2e" % off))
        if r.get("syncs") is not None:
            checks.append(("%s no host sync while micro batches run" % r["case"], r["syncs"] == 0, str(r["syncs"])))
    fsdp = [r for r in rows if r["gpus"] > 1 and r.get("tokens_per_second")]
    if fsdp and lora and lora.get("tokens_per_second"):
        per_gpu = fsdp[0]["tokens_per_second"] / fsdp[0]["gpus"]
        checks.append(("FSDP tokens/s per GPU vs one GPU", True, "%.0f vs %.0f (%.0f %%)" % (
            per_gpu, lora["tokens_per_second"], 100 * per_gpu / lora["tokens_per_second"])))
    for what, passed, value in checks:
        print("%-58s %-16s %s" % (what, value, "PASS" if passed else "FAIL"))


if __name__ == "__main__":
    sys.exit(main())
