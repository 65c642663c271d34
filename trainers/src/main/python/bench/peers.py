#!/usr/bin/env python3
"""The peers finetune's benchmarks are read against, run with the project's .venv (torch, transformers, peft).

  peers.py torch --shape small --mode lora      plain eager torch on bench-train's model, step and data sizes
  peers.py hf-quickstart [--eval]               transformers Trainer + PEFT LoRA doing configs/quickstart.yaml's work
  peers.py gemm                                 torch's fp32 GEMM ceiling, as bench-train --gemm-peak measures it

Both print per-step lines, then one summary line in bench-train's key=value form, starting with the peer's name
(`peer_torch ...`, `peer_hf ...`) where bench-train's starts with `finetune`. The shapes come from the table
BenchShape reads (shapes.tsv) and the quickstart's settings from the recipe itself, so neither side can drift.
Run alone on the machine: like bench-train, the line carries cpu_per_wall and other_cpu to show disturbance, and
cpu_ms_per_step for comparing on busy cores.
"""
import argparse
import json
import math
import os
import random
import statistics
import sys
import time

STARTED = time.time()
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", ".."))
SHAPES = os.path.join(HERE, "..", "..", "resources", "dev", "finetune", "trainers", "bench", "shapes.tsv")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

import torch  # noqa: E402  (after STARTED: the wall time includes the import, as finetune's includes the JVM)
import torch.nn.functional as F  # noqa: E402
import torch.utils.checkpoint  # noqa: E402


def read_shapes():
    rows = [line.rstrip("\n").split("\t") for line in open(SHAPES) if line.strip() and not line.startswith("#")]
    header = rows[0]
    return {r[0]: {k: int(v) for k, v in zip(header[1:], r[1:])} for r in rows[1:]}


class Counters:
    """This process's CPU seconds, the machine's busy ticks (/proc/stat) and the wall clock, read together."""

    def __init__(self):
        t = os.times()
        self.own = t.user + t.system
        self.wall = time.perf_counter()
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        # user nice system irq softirq steal, as bench-train's CpuCounters
        self.busy = sum(v[i] for i in (0, 1, 2, 5, 6, 7) if i < len(v)) / os.sysconf("SC_CLK_TCK")

    def cpu_per_wall(self, later):
        return (later.own - self.own) / (later.wall - self.wall)

    def other_share(self, later):
        capacity = (later.wall - self.wall) * (os.cpu_count() or 1)
        return max(0.0, (later.busy - self.busy) - (later.own - self.own)) / capacity


def peak_rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def omp_wait_policy():
    return os.environ.get("OMP_WAIT_POLICY", "default")


# ---------------------------------------------------------------------------------------------------------------
# peer_torch: the Llama decoder in plain modules
# ---------------------------------------------------------------------------------------------------------------
class Linear(torch.nn.Module):
    """A bias-free projection; with lora(), PEFT's LoRA: A Kaiming-uniform, B zero, y = Wx + (alpha/r)·B(Ax)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n_out, n_in) * 0.02)
        self.a = self.b = None

    def lora(self, r, alpha):
        self.a = torch.nn.Parameter(torch.empty(r, self.weight.shape[1]))
        torch.nn.init.kaiming_uniform_(self.a, a=math.sqrt(5))
        self.b = torch.nn.Parameter(torch.zeros(self.weight.shape[0], r))
        self.scale = alpha / r

    def forward(self, x):
        y = F.linear(x, self.weight)
        return y if self.a is None else y + F.linear(F.linear(x, self.a), self.b) * self.scale


def rms_norm(x, weight, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class Layer(torch.nn.Module):
    def __init__(self, s, attn):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = s["heads"], s["kv_heads"], s["dim"] // s["heads"]
        self.attn = attn
        self.norm1 = torch.nn.Parameter(torch.ones(s["dim"]))
        self.norm2 = torch.nn.Parameter(torch.ones(s["dim"]))
        kv = self.kv_heads * self.head_dim
        self.q_proj, self.k_proj = Linear(s["dim"], s["dim"]), Linear(s["dim"], kv)
        self.v_proj, self.o_proj = Linear(s["dim"], kv), Linear(s["dim"], s["dim"])
        self.gate_proj, self.up_proj = Linear(s["dim"], s["ffn"]), Linear(s["dim"], s["ffn"])
        self.down_proj = Linear(s["ffn"], s["dim"])

    def rotate(self, x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = rms_norm(x, self.norm1)
        q = self.q_proj(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        if self.kv_heads != self.heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        if self.attn == "sdpa":
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
            causal = torch.ones(t, t, dtype=torch.bool).triu(1)
            a = scores.masked_fill(causal, float("-inf")).softmax(-1) @ v
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, -1))
        h = rms_norm(x, self.norm2)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Decoder(torch.nn.Module):
    def __init__(self, s, attn, grad_ckpt):
        super().__init__()
        self.grad_ckpt = grad_ckpt
        self.embed = torch.nn.Parameter(torch.randn(s["vocab"], s["dim"]) * 0.02)
        self.layers = torch.nn.ModuleList(Layer(s, attn) for _ in range(s["layers"]))
        self.norm = torch.nn.Parameter(torch.ones(s["dim"]))
        self.lm_head = Linear(s["dim"], s["vocab"])
        head_dim = s["dim"] // s["heads"]
        inv = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(s["seq"]).float(), inv).repeat(1, 2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        x = F.embedding(ids, self.embed)
        for layer in self.layers:
            if self.grad_ckpt:
                x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        return self.lm_head(rms_norm(x, self.norm))


def run_torch(a):
    shapes = read_shapes()
    if a.shape not in shapes:
        sys.exit(f"peers.py: --shape {a.shape} is not in {SHAPES} (one of {', '.join(shapes)})")
    s = shapes[a.shape]
    steps = a.steps if a.steps is not None else s["steps"]
    warmup = a.warmup_steps if a.warmup_steps is not None else s["warmup_steps"]
    torch.manual_seed(1234)
    model = Decoder(s, a.attn, a.grad_ckpt)
    base_params = sum(p.numel() for p in model.parameters())
    if a.mode == "lora":
        model.requires_grad_(False)
        for layer in model.layers:
            for name in LORA_TARGETS:
                getattr(layer, name).lora(8, 16)
    params = sum(p.numel() for p in model.parameters())
    trained = [p for p in model.parameters() if p.requires_grad]
    trainable = sum(p.numel() for p in trained)
    lr = 1e-4 if a.mode == "full" else 1e-3
    opt = torch.optim.AdamW(trained, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    head_dim = s["dim"] // s["heads"]
    matmul = s["layers"] * (2 * s["dim"] * s["heads"] * head_dim + 2 * s["dim"] * s["kv_heads"] * head_dim
                            + 3 * s["dim"] * s["ffn"]) + s["dim"] * s["vocab"]
    print(f"model params={params} trainable={trainable} matmul_params={matmul} mode={a.mode} lr={lr} "
          f"threads={torch.get_num_threads()} attn={a.attn} torch={torch.__version__}", flush=True)

    rows = torch.randint(0, s["vocab"], (warmup + steps, s["batch"], s["seq"]),
                         generator=torch.Generator().manual_seed(1235))
    seconds, losses, start = [], [], None
    for i in range(warmup + steps):
        if i == warmup:
            start = Counters()
        t0 = time.perf_counter()
        logits = model(rows[i])
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, s["vocab"]), rows[i][:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        dt = time.perf_counter() - t0
        if i >= warmup:
            seconds.append(dt)
        print(f"step {i} {'warmup' if i < warmup else 'timed'} ms={dt * 1e3:.1f} loss={losses[-1]:.4f}", flush=True)
    end = Counters()

    tokens = s["batch"] * s["seq"]
    median = statistics.median(seconds)
    tps = tokens * len(seconds) / sum(seconds)
    fpt = 6 * matmul if a.mode == "full" else 4 * matmul + 6 * trainable
    attn_fpt = 12 * s["layers"] * s["seq"] * s["dim"]
    print(f"peer_torch tokens_per_s={tps:.1f} tokens_per_s_median={tokens / median:.1f} "
          f"step_ms_median={median * 1e3:.1f} step_ms_min={min(seconds) * 1e3:.1f} step_ms_max={max(seconds) * 1e3:.1f} "
          f"peak_rss_mb={peak_rss_mb():.1f} params={params} trainable={trainable} matmul_params={matmul} "
          f"flops_per_token={fpt} gflops={tps * fpt / 1e9:.1f} attn_flops_per_token={attn_fpt} "
          f"gflops_with_attn={tps * (fpt + attn_fpt) / 1e9:.1f} mode={a.mode} grad_ckpt={int(a.grad_ckpt)} "
          f"vocab={s['vocab']} dim={s['dim']} layers={s['layers']} heads={s['heads']} kv_heads={s['kv_heads']} "
          f"ffn={s['ffn']} seq={s['seq']} batch={s['batch']} steps={len(seconds)} loss_first={losses[0]:.4f} "
          f"loss_last={losses[-1]:.4f} threads={torch.get_num_threads()} cpu_per_wall={start.cpu_per_wall(end):.2f} "
          f"other_cpu={start.other_share(end):.2f} cpu_ms_per_step={(end.own - start.own) / len(seconds) * 1e3:.1f} "
          f"omp_wait_policy={omp_wait_policy()} attn={a.attn} torch={torch.__version__} base_params={base_params}",
          flush=True)


# ---------------------------------------------------------------------------------------------------------------
# peer_hf: the quickstart recipe with transformers' Trainer and PEFT
# ---------------------------------------------------------------------------------------------------------------
def recipe_settings(path):
    import yaml
    with open(path) as f:
        r = yaml.safe_load(f)
    folder = os.path.dirname(os.path.abspath(path))
    fraction = lambda v: v if isinstance(v, (int, float)) else float(v)  # noqa: E731
    return {
        "base": os.path.join(folder, r["base_model"]),
        "data": os.path.join(folder, r["datasets"][0]["path"]),
        "val": fraction(r.get("val_set_size", 0)),
        "r": int(r["lora_r"]), "alpha": fraction(r["lora_alpha"]), "dropout": fraction(r.get("lora_dropout", 0)),
        "seq": int(r["sequence_len"]), "batch": int(r["micro_batch_size"]), "epochs": fraction(r["num_epochs"]),
        "lr": fraction(r["learning_rate"]), "schedule": r.get("lr_scheduler", "linear"),
        "warmup": int(r.get("warmup_steps", 0)), "weight_decay": fraction(r.get("weight_decay", 0)),
        "eval_steps": r.get("eval_steps"), "save_steps": r.get("save_steps"), "seed": int(r.get("seed", 42)),
    }


def packed_rows(c, tokenizer):
    """The recipe's rows: a seeded held-out split, each row BOS + text + EOS, packed best-fit-decreasing into
    sequence_len with a block-diagonal causal mask and positions restarting per sample (finetune's segments)."""
    texts = [json.loads(line)["text"] for line in open(c["data"]) if line.strip()]
    order = list(range(len(texts)))
    random.Random(c["seed"]).shuffle(order)
    held = math.ceil(c["val"] * len(texts)) if c["val"] else 0
    encode = lambda t: ([tokenizer.bos_token_id] + tokenizer(t, add_special_tokens=False)["input_ids"])[
        : c["seq"] - 1] + [tokenizer.eos_token_id]  # noqa: E731
    samples = [encode(texts[i]) for i in order[held:]]
    held_samples = [encode(texts[i]) for i in order[:held]]
    return pack(samples, c["seq"]), pack(held_samples, c["seq"]), len(samples)


def pack(samples, seq):
    bins = []  # [room, [sample indices]]
    for i in sorted(range(len(samples)), key=lambda i: -len(samples[i])):
        fits = [b for b in bins if b[0] >= len(samples[i])]
        if fits:
            best = min(fits, key=lambda b: b[0])
        else:
            best = [seq, []]
            bins.append(best)
        best[0] -= len(samples[i])
        best[1].append(i)
    rows = []
    for _, members in bins:
        ids, positions, labels, segments = [], [], [], []
        for k, i in enumerate(members):
            ids += samples[i]
            positions += range(len(samples[i]))
            labels += [-100] + samples[i][1:]
            segments += [k + 1] * len(samples[i])
        used = len(ids)
        pad = seq - used
        ids, positions, labels, segments = ids + [0] * pad, positions + list(range(pad)), labels + [-100] * pad, \
            segments + [0] * pad
        seg = torch.tensor(segments)
        mask = (seg[:, None] == seg[None, :]) & torch.ones(seq, seq, dtype=torch.bool).tril()
        mask |= torch.eye(seq, dtype=torch.bool)  # a padding position sees itself, so no row is all -inf
        rows.append({"input_ids": torch.tensor(ids), "position_ids": torch.tensor(positions),
                     "labels": torch.tensor(labels), "attention_mask": mask[None], "tokens": used})
    return rows


def run_hf(a):
    from peft import LoraConfig, get_peft_model
    from transformers import (AutoModelForCausalLM, AutoTokenizer, Trainer, TrainerCallback, TrainingArguments)

    c = recipe_settings(a.recipe)
    torch.manual_seed(c["seed"])
    tokenizer = AutoTokenizer.from_pretrained(c["base"])
    train, held, n_samples = packed_rows(c, tokenizer)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(c["base"], dtype=torch.float32),
                           LoraConfig(r=c["r"], lora_alpha=c["alpha"], lora_dropout=c["dropout"],
                                      target_modules=list(LORA_TARGETS), task_type="CAUSAL_LM"))
    step_seconds = []
    counters = {}

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if "start" not in counters:
                counters["start"] = Counters()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            step_seconds.append(time.perf_counter() - self.t0)
            print(f"step {len(step_seconds)} ms={step_seconds[-1] * 1e3:.1f}", flush=True)

    class Rows(torch.utils.data.Dataset):
        def __init__(self, rows):
            self.rows = rows

        def __len__(self):
            return len(self.rows)

        def __getitem__(self, i):
            return {k: v for k, v in self.rows[i].items() if k != "tokens"}

    evaluate = a.eval and held
    every = lambda v: v if v else 0.5  # noqa: E731  (a fraction of the run, as the recipe's 0.5)
    args = TrainingArguments(
        output_dir=a.out, per_device_train_batch_size=c["batch"], per_device_eval_batch_size=c["batch"],
        num_train_epochs=c["epochs"], max_steps=a.max_steps or -1, learning_rate=c["lr"],
        lr_scheduler_type=c["schedule"], warmup_steps=c["warmup"], optim="adamw_torch",
        weight_decay=c["weight_decay"], max_grad_norm=1.0, logging_steps=1, seed=c["seed"], report_to="none",
        eval_strategy="steps" if evaluate else "no", eval_steps=every(c["eval_steps"]),
        save_strategy="steps" if a.eval else "no", save_steps=every(c["save_steps"]),
        dataloader_num_workers=0, use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Rows(train),
                      eval_dataset=Rows(held) if evaluate else None, callbacks=[Timer()])
    t0 = time.perf_counter()
    result = trainer.train()
    train_s = time.perf_counter() - t0
    end = Counters()
    start = counters["start"]
    evals = [e["eval_loss"] for e in trainer.state.log_history if "eval_loss" in e]
    eval_loss = evals[-1] if evals else float("nan")

    steps = len(step_seconds)
    per_epoch = math.ceil(len(train) / c["batch"])
    tokens_per_epoch = sum(r["tokens"] for r in train)
    # Mean tokens in a step times the steps run: rows differ only by their padding, which is not counted.
    tokens = tokens_per_epoch / per_epoch * steps
    median = statistics.median(step_seconds)
    print(f"peer_hf tokens_per_s={tokens / train_s:.1f} tokens_per_s_median={tokens / steps / median:.1f} "
          f"step_ms_median={median * 1e3:.1f} step_ms_min={min(step_seconds) * 1e3:.1f} "
          f"step_ms_max={max(step_seconds) * 1e3:.1f} peak_rss_mb={peak_rss_mb():.1f} steps={steps} "
          f"rows={len(train)} samples={n_samples} tokens={tokens:.0f} train_s={train_s:.2f} "
          f"wall_s={time.time() - STARTED:.2f} loss_mean={result.training_loss:.4f} eval_loss={eval_loss:.4f} "
          f"threads={torch.get_num_threads()} cpu_per_wall={start.cpu_per_wall(end):.2f} "
          f"other_cpu={start.other_share(end):.2f} cpu_ms_per_step={(end.own - start.own) / steps * 1e3:.1f} "
          f"omp_wait_policy={omp_wait_policy()} torch={torch.__version__}", flush=True)


def run_gemm(a):
    """fp32 2048x2048 by 2048x2048, two untimed then the median of ten, as bench-train --gemm-peak."""
    n, runs = 2048, 10
    torch.manual_seed(1234)
    x, y = torch.randn(n, n), torch.randn(n, n)
    for _ in range(2):
        x @ y
    seconds = []
    start = Counters()
    for _ in range(runs):
        t0 = time.perf_counter()
        x @ y
        seconds.append(time.perf_counter() - t0)
    end = Counters()
    flops = 2.0 * n ** 3
    print(f"peer_torch gemm_peak_gflops={flops / statistics.median(seconds) / 1e9:.1f} n={n} runs={runs} "
          f"gflops_max={flops / min(seconds) / 1e9:.1f} gflops_min={flops / max(seconds) / 1e9:.1f} "
          f"threads={torch.get_num_threads()} cpu_per_wall={start.cpu_per_wall(end):.2f} "
          f"other_cpu={start.other_share(end):.2f} torch={torch.__version__}", flush=True)


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
    h = sub.add_parser("hf-quickstart", help="transformers Trainer + PEFT on the quickstart recipe")
    h.add_argument("--recipe", default=os.path.join(REPO, "configs", "quickstart.yaml"))
    h.add_argument("--eval", action="store_true", help="evaluate and save as the recipe does (eval_steps, save_steps)")
    h.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: the recipe's epochs)")
    h.add_argument("--out", default=os.path.join(REPO, "out", "peer-hf"), help="the Trainer's output folder")
    g = sub.add_parser("gemm", help="torch's fp32 GEMM ceiling (2048³ matmul, median of 10)")
    for p in (t, h, g):
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
    else:
        run_hf(a)


if __name__ == "__main__":
    main()
