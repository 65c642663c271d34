"""GPU check of the fsdp worker: LoRA SFT on a random >= 1B-parameter Llama, FSDP2 over every GPU of this machine.

Needs only this folder and a Python with torch (CUDA), transformers, peft and safetensors (requirements.txt); no
Java, no network. It writes what the Java side normally writes (batches, schedule, initial adapter, plan), runs
``torchrun -m finetune_worker`` and prints tokens/s and each rank's peak memory, to set beside ``finetune plan``'s
estimate for the same shape (the model's config.json is left in --out for that).

    cd trainers/src/main/python && python3 gpu_check.py                  # 1.1B, 20 steps, all GPUs
    python3 gpu_check.py --tiny --steps 3                                # a seconds-long smoke run (CPU too)
"""

import argparse
import json
import os
import subprocess
import sys
import time

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))

# TinyLlama-1.1B's shape: 1.10 B parameters.
FULL = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
            num_key_value_heads=4, vocab_size=32000)
TINY = dict(hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4,
            vocab_size=512)


def write_model(folder, shape):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False, **shape)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def write_batches(path, count, rows, columns, vocab):
    generator = torch.Generator().manual_seed(1)
    cells = count * rows * columns
    ids = torch.randint(3, vocab, (count, rows, columns), generator=generator, dtype=torch.int32)
    targets = torch.zeros_like(ids)
    targets[:, :, :-1] = ids[:, :, 1:]
    mask = torch.ones(count, rows, columns, dtype=torch.uint8)
    mask[:, :, -1] = 0
    split = {
        "ids": ids.reshape(cells), "positions": torch.arange(columns, dtype=torch.int32).repeat(count * rows),
        "segments": torch.ones(cells, dtype=torch.int32), "targets": targets.reshape(cells),
        "mask": mask.reshape(cells), "shapes": torch.tensor([[rows, columns]] * count, dtype=torch.int32),
        "weights": torch.full((count,), rows * (columns - 1), dtype=torch.int64)}
    tensors = {"train." + k: v for k, v in split.items()}
    empty = {"ids": torch.zeros(0, dtype=torch.int32), "positions": torch.zeros(0, dtype=torch.int32),
             "segments": torch.zeros(0, dtype=torch.int32), "targets": torch.zeros(0, dtype=torch.int32),
             "mask": torch.zeros(0, dtype=torch.uint8), "shapes": torch.zeros((0, 2), dtype=torch.int32),
             "weights": torch.zeros(0, dtype=torch.int64)}
    tensors.update({"eval." + k: v for k, v in empty.items()})
    save_file(tensors, path, metadata={"format": "finetune-batches-1"})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/finetune-gpu-check")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--micro", type=int, default=4, help="sequences per micro batch per rank")
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--nproc", type=int, default=None, help="ranks (default: every GPU, else 2 CPU ranks)")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer model instead of 1.1B")
    parser.add_argument("--grad-ckpt", action="store_true")
    args = parser.parse_args()

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nproc = args.nproc or (gpus if gpus else 2)
    os.makedirs(args.out, exist_ok=True)
    model_dir = os.path.join(args.out, "model")
    shape = TINY if args.tiny else FULL
    started = time.time()
    parameters = write_model(model_dir, shape)
    print("gpu_check: random Llama with %.3f B parameters in %s (%.0f s); %d GPU(s): %s" % (
        parameters / 1e9, model_dir, time.time() - started, gpus,
        torch.cuda.get_device_name(0) if gpus else "none, CPU ranks over gloo"), flush=True)

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    lora = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                                           target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                           "up_proj", "down_proj"]))
    initial = os.path.join(args.out, "initial-adapter")
    lora.save_pretrained(initial)
    del lora, base

    per_step = nproc  # one micro batch per rank per step
    batches = os.path.join(args.out, "batches.safetensors")
    write_batches(batches, args.steps * per_step, args.micro, args.seq, shape["vocab_size"])
    schedule = os.path.join(args.out, "schedule.safetensors")
    save_file({"order": torch.arange(args.steps * per_step, dtype=torch.int32),
               "lr": torch.full((args.steps,), 2e-4, dtype=torch.float64)}, schedule)
    output_dir = os.path.join(args.out, "run")
    plan = {
        "format": "finetune-worker-plan-1", "base_model": model_dir, "output_dir": output_dir, "batches": batches,
        "schedule": schedule, "objective": {"kind": "sft"}, "adapter": {"kind": "lora", "initial": initial},
        "gradient_checkpointing": args.grad_ckpt, "reshard_after_forward": True, "offload_params": False,
        "bf16": "auto", "total_steps": args.steps, "micro_batches_per_step": per_step,
        "micro_batches_per_epoch": args.steps * per_step, "eval_steps": 0, "save_steps": 0, "save_total_limit": 0,
        "optimizer": {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "weight_decay": 0.0, "max_grad_norm": 1.0},
        "seed": 42, "resume_key": "gpu-check", "world_size": nproc,
        "data_log_dir": os.path.join(args.out, "logs")}
    plan_file = os.path.join(args.out, "plan.json")
    with open(plan_file, "w") as f:
        json.dump(plan, f, indent=2)

    env = dict(os.environ, PYTHONPATH=HERE, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS",
                                                                                                  "4"))
    if not gpus:
        env["FINETUNE_DEVICE"] = "cpu"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
               "-m", "finetune_worker", plan_file]
    print("gpu_check: " + " ".join(command), flush=True)
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    steps, peaks, errors = [], [], []
    for line in process.stdout:
        line = line.rstrip("\n")
        if line.startswith("{"):
            try:
                event = json.loads(line)
            except ValueError:
                event = {}
            kind = event.get("event")
            if kind == "metrics" and "loss" in event["metrics"]:
                m = event["metrics"]
                steps.append(m)
                print("step %3d  loss %.4f  %9.0f tokens/s  peak %.2f GiB" % (
                    m["step"], m["loss"], m["tokens_per_second"], m["peak_memory_mb"] / 1024), flush=True)
                continue
            if kind == "peak_memory":
                peaks = event["ranks"]
            if kind == "error":
                errors.append(event)
        print(line, flush=True)
    code = process.wait()
    if code != 0 or errors or len(steps) != args.steps:
        print("gpu_check: FAILED (exit %d, %d of %d steps)" % (code, len(steps), args.steps))
        return 1
    steady = steps[1:] or steps
    tokens_per_second = sum(s["tokens_per_second"] for s in steady) / len(steady)
    print("gpu_check: %d steps of %d x %d tokens per rank over %d rank(s); loss %.4f -> %.4f" % (
        args.steps, args.micro, args.seq, nproc, steps[0]["loss"], steps[-1]["loss"]))
    print("gpu_check: %.0f tokens/s over all ranks (mean of steps 2..%d)" % (tokens_per_second, args.steps))
    for peak in peaks:
        print("gpu_check: rank %d on %s: peak %.2f GiB after step 1" % (peak["rank"], peak["host"],
                                                                       peak["peak_memory_mb"] / 1024))
    print("gpu_check: peak over the run %.2f GiB (max over ranks)" % (max(s["peak_memory_mb"] for s in steps) / 1024))
    return 0


if __name__ == "__main__":
    sys.exit(main())
