#!/usr/bin/env python3
"""finetune against its peers, side by side: alternating runs, medians, one table.

  .venv/bin/python trainers/src/main/python/bench/compare.py [--runs 3] [--omp-wait-policy ACTIVE] [--quick]

Each round runs every pair in turn, ours then the peer's, so a drift of the machine hits both sides alike:
  - the quickstart: `./finetune configs/quickstart.yaml` (wall clock of the whole command; median of the per-step
    tokens_per_second in its metrics.jsonl) against `peers.py hf-quickstart --eval` (transformers Trainer + PEFT);
  - bench-train small and medium, lora and full, against `peers.py torch --attn sdpa` (tokens/s, peak RSS);
  - the fp32 GEMM peak of the engine against torch's, and the medium full run's share of the engine's peak;
  - floor: `peers.py floor`, one step's matmuls and attention alone with torch's kernels, the tokens/s no fp32
    trainer using them can pass, next to the peer's (so the best ratio there is to reach);
  - bf16 (only when asked): bench-train --bf16 against the torch peer under CPU autocast, same shapes.
Only the standard library: run it with any Python 3.10+, the peers run with the project's .venv.
Figures mean something only on a quiet machine: the table carries the worst cpu_per_wall and other_cpu seen.
--quick runs the tiny shape for 2 steps and 3 quickstart steps, once: a check that everything runs, not a measurement.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", ".."))
PEERS = os.path.join(HERE, "peers.py")


def fields(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)


def run(cmd, env, prefix):
    """Runs cmd from the repository root; returns (the last line starting with prefix as fields, wall seconds)."""
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    lines = [l for l in p.stdout.splitlines() if l.startswith(prefix + " ")]
    if p.returncode != 0 or (prefix and not lines):
        sys.exit(f"compare: {' '.join(cmd)} failed (exit {p.returncode}); its output ends:\n"
                 + "\n".join(p.stdout.splitlines()[-20:]))
    for l in p.stdout.splitlines():
        if l.startswith("finetune: OMP_WAIT_POLICY"):
            print("  " + l, flush=True)
    return (fields(lines[-1]) if lines else {}), wall


class Table:
    def __init__(self):
        self.samples = {}  # (work, side, metric) -> [values]
        self.worst = {"cpu_per_wall": [], "other_cpu": []}

    def add(self, work, side, metric, value):
        self.samples.setdefault((work, side, metric), []).append(float(value))

    def seen(self, f):
        for k in self.worst:
            if k in f:
                self.worst[k].append(float(f[k]))

    def median(self, work, side, metric):
        v = self.samples.get((work, side, metric))
        return statistics.median(v) if v else float("nan")


def quickstart(a, t, env, scratch, i):
    out = os.path.join(scratch, f"quickstart-{i}")
    cmd = ["./finetune", "configs/quickstart.yaml", f"output_dir={out}"] + (["max_steps=3"] if a.quick else [])
    _, wall = run(cmd, env, "")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rates = [l["tokens_per_second"] for l in map(json.loads, f) if "tokens_per_second" in l]
    t.add("quickstart", "ours", "wall_s", wall)
    t.add("quickstart", "ours", "step_tok_s", statistics.median(rates))
    print(f"  finetune quickstart wall_s={wall:.1f} median_step_tokens_per_s={statistics.median(rates):.0f} "
          f"steps={len(rates)}", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    peer_out = os.path.join(scratch, f"peer-hf-{i}")
    cmd = [a.python, PEERS, "hf-quickstart", "--eval", "--out", peer_out] + (["--max-steps", "3"] if a.quick else [])
    f, wall = run(cmd, env, "peer_hf")
    t.add("quickstart", "peer", "wall_s", wall)
    t.add("quickstart", "peer", "step_tok_s", f["tokens_per_s_median"])
    t.seen(f)
    print(f"  peer_hf quickstart wall_s={wall:.1f} median_step_tokens_per_s={float(f['tokens_per_s_median']):.0f} "
          f"steps={f['steps']} other_cpu={f['other_cpu']}", flush=True)
    shutil.rmtree(peer_out, ignore_errors=True)


def bench(a, t, env, shape, mode, bf16=False):
    steps = ["--steps", "2", "--warmup-steps", "1"] if a.quick else []
    work = f"{shape} {mode}" + (" bf16" if bf16 else "")
    for side, cmd, prefix in (
            ("ours", ["./finetune", "bench-train", "--shape", shape, "--mode", mode] + steps
             + (["--bf16"] if bf16 else []), "finetune"),
            ("peer", [a.python, PEERS, "torch", "--attn", "sdpa", "--shape", shape, "--mode", mode] + steps
             + (["--autocast", "bf16"] if bf16 else []), "peer_torch")):
        f, _ = run(cmd, env, prefix)
        t.add(work, side, "tok_s", f["tokens_per_s"])
        t.add(work, side, "rss_mb", f["peak_rss_mb"])
        t.add(work, side, "gflops", f["gflops"])
        t.seen(f)
        print(f"  {prefix} {work} tokens_per_s={f['tokens_per_s']} peak_rss_mb={f['peak_rss_mb']} "
              f"cpu_per_wall={f['cpu_per_wall']} other_cpu={f['other_cpu']} omp_wait_policy={f['omp_wait_policy']}",
              flush=True)


def floor(a, t, env, shape, mode):
    f, _ = run([a.python, PEERS, "floor", "--shape", shape, "--mode", mode], env, "peer_floor")
    t.add(f"{shape} {mode}", "floor", "tok_s", f["tokens_per_s_ceiling"])
    t.seen(f)
    print(f"  peer_floor {shape} {mode} tokens_per_s_ceiling={f['tokens_per_s_ceiling']} "
          f"other_cpu={f['other_cpu']}", flush=True)


def gemm(a, t, env):
    for side, cmd, prefix in (("ours", ["./finetune", "bench-train", "--gemm-peak"], "finetune"),
                              ("peer", [a.python, PEERS, "gemm"], "peer_torch")):
        f, _ = run(cmd, env, prefix)
        t.add("gemm", side, "gflops", f["gemm_peak_gflops"])
        t.seen(f)
        print(f"  {prefix} gemm_peak_gflops={f['gemm_peak_gflops']} other_cpu={f['other_cpu']}", flush=True)


def report(a, t, shapes):
    lines = ["| work | ours | peer | ratio (ours/peer) |", "|---|---|---|---|"]

    def row(label, work, metric, fmt, higher_is_better=True, ours="ours"):
        o, p = t.median(work, ours, metric), t.median(work, "peer", metric)
        ratio = o / p if p else float("nan")
        lines.append(f"| {label} | {fmt.format(o)} | {fmt.format(p)} | {ratio:.2f}×"
                     f"{'' if higher_is_better else ' (lower is better)'} |")

    if "quickstart" in a.only:
        row("quickstart wall s", "quickstart", "wall_s", "{:.1f}", higher_is_better=False)
        row("quickstart median step tokens/s", "quickstart", "step_tok_s", "{:.0f}")
    if "train" in a.only:
        for shape in shapes:
            for mode in ("lora", "full"):
                row(f"{shape} {mode} tokens/s", f"{shape} {mode}", "tok_s", "{:.0f}")
                row(f"{shape} {mode} peak RSS MB", f"{shape} {mode}", "rss_mb", "{:.0f}", higher_is_better=False)
                if "floor" in a.only:
                    row(f"{shape} {mode}: fp32 kernel floor, tokens/s (best any trainer on torch's kernels can do)",
                        f"{shape} {mode}", "tok_s", "{:.0f}", ours="floor")
    if "bf16" in a.only:
        for shape in shapes:
            for mode in ("lora", "full"):
                row(f"{shape} {mode} bf16 tokens/s (peer: CPU autocast)", f"{shape} {mode} bf16", "tok_s", "{:.0f}")
    if "gemm" in a.only:
        row("fp32 GEMM 2048³ GFLOP/s", "gemm", "gflops", "{:.1f}")
        big = shapes[-1]
        if "train" in a.only:
            share = t.median(f"{big} full", "ours", "gflops") / t.median("gemm", "ours", "gflops")
            lines.append(f"| {big} full GFLOP/s / engine GEMM peak | {share:.0%} | | |")
    print()
    print(f"median of {a.runs} alternating run(s); omp_wait_policy {a.omp_wait_policy or 'each tool’s own'}; "
          f"worst cpu_per_wall {min(t.worst['cpu_per_wall'], default=float('nan')):.2f}, "
          f"worst other_cpu {max(t.worst['other_cpu'], default=float('nan')):.2f}"
          + ("  (--quick: not a measurement)" if a.quick else ""))
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="rounds; medians over them (default 3)")
    ap.add_argument("--only", default="quickstart,train,gemm,floor",
                    help="any of quickstart,train,gemm,floor,bf16 (default: all but bf16)")
    ap.add_argument("--omp-wait-policy", choices=("ACTIVE", "PASSIVE"),
                    help="set for both sides (default: each tool's own; the launcher decides for finetune)")
    ap.add_argument("--python", default=os.path.join(REPO, ".venv", "bin", "python"),
                    help="the peers' interpreter (default: the project's .venv)")
    ap.add_argument("--quick", action="store_true", help="tiny settings, once: checks the script, measures nothing")
    a = ap.parse_args()
    a.only = {w.strip() for w in a.only.split(",") if w.strip()}
    if a.quick:
        a.runs = 1
    if not os.access(a.python, os.X_OK):
        sys.exit(f"compare: no Python at {a.python}; the test build creates .venv "
                 f"(mvn -B test), or pass --python")
    env = dict(os.environ)
    if a.omp_wait_policy:
        env["OMP_WAIT_POLICY"] = a.omp_wait_policy
    shapes = ["tiny"] if a.quick else ["small", "medium"]
    # Build first (a quick command), so no build lands inside a timed run.
    run(["./finetune", "--version"], env, "")
    t = Table()
    scratch = tempfile.mkdtemp(prefix="finetune-compare-")
    try:
        for i in range(a.runs):
            print(f"round {i + 1} of {a.runs}", flush=True)
            if "gemm" in a.only:
                gemm(a, t, env)
            if "train" in a.only:
                for shape in shapes:
                    for mode in ("lora", "full"):
                        bench(a, t, env, shape, mode)
                        if "floor" in a.only:
                            floor(a, t, env, shape, mode)
            if "bf16" in a.only:
                for shape in shapes:
                    for mode in ("lora", "full"):
                        bench(a, t, env, shape, mode, bf16=True)
            if "quickstart" in a.only:
                quickstart(a, t, env, scratch, i)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report(a, t, shapes)


if __name__ == "__main__":
    main()
