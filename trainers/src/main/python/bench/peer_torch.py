"""peer_torch: the Llama decoder of bench-train's shapes (shapes.tsv) in plain eager torch modules, trained as
bench-train trains it; and torch's fp32 GEMM ceiling, as bench-train --gemm-peak measures it."""
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import torch.utils.checkpoint

from measure import Counters, omp_wait_policy, peak_rss_mb

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = os.path.join(HERE, "..", "..", "resources", "dev", "finetune", "trainers", "bench", "shapes.tsv")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def read_shapes():
    rows = [line.rstrip("\n").split("\t") for line in open(SHAPES) if line.strip() and not line.startswith("#")]
    header = rows[0]
    return {r[0]: {k: int(v) for k, v in zip(header[1:], r[1:])} for r in rows[1:]}


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
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
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
          f"omp_wait_policy={omp_wait_policy()} attn={a.attn} torch={torch.__version__} base_params={base_params} "
          f"compute={'bf16' if a.autocast == 'bf16' else 'fp32'}",
          flush=True)


def step_kernels(s, mode):
    """The matrix multiplies and attention of one training step of shape s, as (label, count, thunk): forward,
    the input gradients, and in full mode the weight gradients; in LoRA mode the six rank-8 products of each
    adapted projection (under 1 % of the FLOPs, but each reads or writes a whole [tokens, width] array: on the small
    shape they take about a quarter of the matmul time). Layer 0's q/k/v input gradient is counted though autograd
    skips it in LoRA mode: a floor, not a model, so it errs towards more work only where that is negligible."""
    n, dim, kv = s["batch"] * s["seq"], s["dim"], s["kv_heads"] * (s["dim"] // s["heads"])
    shapes = [(dim, dim), (dim, kv), (dim, kv), (dim, dim), (dim, s["ffn"]), (dim, s["ffn"]), (s["ffn"], dim)]
    kernels = []
    for n_in, n_out in set(shapes):
        count = shapes.count((n_in, n_out)) * s["layers"]
        x, w, g = torch.randn(n, n_in), torch.randn(n_out, n_in), torch.randn(n, n_out)
        kernels.append((f"forward {n}x{n_in}·{n_in}x{n_out}", count, lambda x=x, w=w: F.linear(x, w)))
        kernels.append((f"input grad {n}x{n_out}·{n_out}x{n_in}", count, lambda g=g, w=w: g @ w))
        if mode == "full":
            kernels.append((f"weight grad {n_out}x{n}·{n}x{n_in}", count, lambda g=g, x=x: g.t() @ x))
        if mode == "lora":
            r = 8
            a, b, low = torch.randn(r, n_in), torch.randn(n_out, r), torch.randn(n, r)
            kernels.append((f"lora forward x·Aᵀ, low·Bᵀ at {n_in}->{r}->{n_out}", count,
                            lambda x=x, a=a, b=b, low=low: (F.linear(x, a), F.linear(low, b))))
            kernels.append((f"lora backward g·B, gᵀ·low, lowᵀ·x, low·A at {n_in}->{r}->{n_out}", count,
                            lambda x=x, a=a, b=b, g=g, low=low: (g @ b, g.t() @ low, low.t() @ x, low @ a)))
    x, w, g = torch.randn(n, dim), torch.randn(s["vocab"], dim), torch.randn(n, s["vocab"])
    kernels.append((f"lm_head forward {n}x{dim}·{dim}x{s['vocab']}", 1, lambda: F.linear(x, w)))
    kernels.append((f"lm_head input grad {n}x{s['vocab']}·{s['vocab']}x{dim}", 1, lambda: g @ w))
    if mode == "full":
        kernels.append((f"lm_head weight grad {s['vocab']}x{n}·{n}x{dim}", 1, lambda: g.t() @ x))
    hd = dim // s["heads"]
    q = torch.randn(s["batch"], s["heads"], s["seq"], hd, requires_grad=True)
    k = torch.randn(s["batch"], s["heads"], s["seq"], hd, requires_grad=True)
    v = torch.randn(s["batch"], s["heads"], s["seq"], hd, requires_grad=True)

    def attention():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(torch.ones_like(out))
    kernels.append((f"causal sdpa forward+backward {s['batch']}x{s['heads']}x{s['seq']}x{hd}", s["layers"], attention))
    return kernels


def run_floor(a):
    """Times each kernel of one step at its shape (median of 5 after 2 untimed) and prints what they add up to:
    the step time with every elementwise op, copy, loss and optimizer update free, and the tokens/s it allows."""
    s = read_shapes()[a.shape]
    total = 0.0
    start = Counters()
    for label, count, thunk in step_kernels(s, a.mode):
        for _ in range(2):
            thunk()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            thunk()
            times.append(time.perf_counter() - t0)
        ms = statistics.median(times) * 1e3
        total += ms * count
        print(f"  {label}: {ms:.2f} ms × {count}", flush=True)
    end = Counters()
    tokens = s["batch"] * s["seq"]
    print(f"peer_floor shape={a.shape} mode={a.mode} kernel_ms_per_step={total:.1f} "
          f"tokens_per_s_ceiling={tokens / total * 1e3:.1f} threads={torch.get_num_threads()} "
          f"cpu_per_wall={start.cpu_per_wall(end):.2f} other_cpu={start.other_share(end):.2f} torch={torch.__version__}",
          flush=True)


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
