#!/usr/bin/env python3
"""The peers finetune's benchmarks are read against, run with the project's .venv (torch, transformers, peft).

  peers.py torch --shape small --mode lora      plain eager torch on bench-train's model, step and data sizes
  peers.py hf-quickstart [--eval]               transformers Trainer + PEFT LoRA doing configs/quickstart.yaml's work
  peers.py gemm                                 torch's fp32 GEMM ceiling, as bench-train --gemm-peak measures it
  peers.py floor --shape medium --mode lora     one step's matmuls and attention alone: the tokens/s no fp32
                                                trainer with these kernels can pass

Both print per-step lines, then one summary line in bench-train's key=value form, starting with the peer's name
(`peer_torch ...`, `peer_hf ...`) where bench-train's starts with `finetune`. The shapes come from the table
BenchShape reads (shapes.tsv) and the quickstart's settings from the recipe itself, so neither side can drift.
Run alone on the machine: like bench-train, the line carries cpu_per_wall and other_cpu to show disturbance, and
cpu_ms_per_step for comparing on busy cores.
"""
import argparse
import os

import measure  # noqa: F401  (first: its STARTED is taken before torch is imported)
import torch  # noqa: E402

from peer_hf import run_hf  # noqa: E402
from peer_torch import run_floor, run_gemm, run_torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", ".."))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="peer", required=True)
    t = sub.add_parser("torch", help="plain eager torch on a bench-train shape")
    t.add_argument("--shape", default="tiny", help="a row of shapes.tsv: tiny | small | medium")
    t.add_argument("--mode", choices=("lora", "full"), default="lora",
                   help="lora: r 8, alpha 16 on q,k,v,o,gate,up,down, base frozen; full: every parameter")
    t.add_argument("--steps", type=int, help="timed steps (default: the shape's)")
    t.add_argument("--warmup-steps", type=int, help="untimed steps first (default: the shape's)")
    t.add_argument("--attn", choices=("sdpa", "explicit"), default="sdpa",
                   help="F.scaled_dot_product_attention (default) or matmul + mask + softmax")
    t.add_argument("--grad-ckpt", action="store_true", help="recompute each decoder layer in backward")
    t.add_argument("--autocast", choices=("none", "bf16"), default="none",
                   help="bf16: torch.autocast('cpu', bfloat16) around forward and loss, as bench-train --bf16")
    h = sub.add_parser("hf-quickstart", help="transformers Trainer + PEFT on the quickstart recipe")
    h.add_argument("--recipe", default=os.path.join(REPO, "configs", "quickstart.yaml"))
    h.add_argument("--eval", action="store_true", help="evaluate and save as the recipe does (eval_steps, save_steps)")
    h.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: the recipe's epochs)")
    h.add_argument("--out", default=os.path.join(REPO, "out", "peer-hf"), help="the Trainer's output folder")
    g = sub.add_parser("gemm", help="torch's fp32 GEMM ceiling (2048³ matmul, median of 10)")
    f = sub.add_parser("floor", help="one step's matmuls and attention alone, each timed at its shape")
    f.add_argument("--shape", default="medium", help="a row of shapes.tsv")
    f.add_argument("--mode", choices=("lora", "full"), default="lora")
    for p in (t, h, g, f):
        p.add_argument("--threads", type=int, default=os.cpu_count(),
                       help="torch threads (default: one per core, as finetune's engine)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.peer == "torch":
        if (a.steps is not None and a.steps < 1) or (a.warmup_steps is not None and a.warmup_steps < 0):
            ap.error("--steps must be >= 1 and --warmup-steps >= 0")
        run_torch(a)
    elif a.peer == "gemm":
        run_gemm(a)
    elif a.peer == "floor":
        run_floor(a)
    else:
        run_hf(a)


if __name__ == "__main__":
    main()
