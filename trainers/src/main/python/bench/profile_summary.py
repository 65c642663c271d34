#!/usr/bin/env python3
"""Where a training step's time goes, by op class, from the chrome trace `finetune bench-train --profile FILE` writes.

  python3 trainers/src/main/python/bench/profile_summary.py /tmp/step.json [--top 15]

Self time per op (its duration less that of the ops it calls, per thread), summed by class; the op count says how
many engine ops the step ran, which bounds the per-op overhead (a JNI call, an NDArray and a native allocation each).
Standard library only.
"""
import argparse
import json
import re
import sys
from collections import defaultdict

# First match wins; the pattern is searched in the op's name (aten::mm, MmBackward0, ...).
CLASSES = [
    ("matmul", r"\b(aten::)?(mm|bmm|addmm|matmul|linear|_mkl|baddbmm)\b|MmBackward|BmmBackward|AddmmBackward"),
    ("loss", r"cross_entropy|nll_loss|log_softmax|LogSoftmax|NllLoss|gather"),
    ("attention", r"scaled_dot_product|flash_attention|_efficient_attention|softmax|Softmax"),
    ("optimizer", r"_foreach|adam|lerp|addcdiv|addcmul|sqrt"),
    ("norm/reduction", r"\b(aten::)?(mean|sum|rsqrt|pow|norm|var|amax|max)\b|Mean|Sum|Pow|Rsqrt"),
    ("copy/layout", r"copy_|contiguous|clone|cat|stack|to\b|_to_copy|reshape|view|transpose|permute|expand|"
                    r"slice|select|index|narrow|split|chunk|unsqueeze|squeeze|as_strided|empty|zeros|ones|fill_|"
                    r"Cat|Clone|Transpose|Permute|Expand|Slice|Select|Index|View|Reshape|Unsafe"),
    ("elementwise", r"\b(aten::)?(mul|add|sub|div|neg|silu|sigmoid|exp|where|masked_fill|cos|sin|gelu|relu)_?\b|"
                    r"Mul|Add|Sub|Div|Neg|Silu|Sigmoid|Exp|Where|MaskedFill"),
    ("embedding", r"embedding|Embedding"),
]
COMPILED = [(name, re.compile(p)) for name, p in CLASSES]


def op_class(name):
    for cls, pattern in COMPILED:
        if pattern.search(name):
            return cls
    return "other"


def self_times(events):
    """(name, self microseconds, depth, start) of every complete event, per thread, by interval nesting."""
    by_thread = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and "dur" in e:
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    out = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        stack = []  # [end, event, child time]
        for e in evs:
            ts, dur = float(e["ts"]), float(e["dur"])
            while stack and stack[-1][0] <= ts:
                end, parent, children = stack.pop()
                out.append((parent["name"], float(parent["dur"]) - children, len(stack), float(parent["ts"])))
            if stack:
                stack[-1][2] += dur
            stack.append([ts + dur, e, 0.0])
        while stack:
            end, parent, children = stack.pop()
            out.append((parent["name"], float(parent["dur"]) - children, len(stack), float(parent["ts"])))
    return out


def phases(ops):
    """forward: before the autograd engine's first node; backward: from it to its last; after: the optimizer, metrics."""
    backward = [ts for n, _, d, ts in ops if d == 0 and n.startswith("autograd::engine")]
    if not backward:
        return lambda ts: "step"
    first, last = min(backward), max(backward)
    return lambda ts: "forward" if ts < first else "backward" if ts <= last else "after backward"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=15, help="also list the N ops with the most self time")
    a = ap.parse_args()
    with open(a.trace) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    ops = [o for o in self_times(events) if not o[0].startswith("ProfilerStep")]
    if not ops:
        sys.exit(f"profile_summary: no complete events in {a.trace}")
    total = sum(o[1] for o in ops)
    classes, names, counts = defaultdict(float), defaultdict(float), defaultdict(int)
    phase_of = phases(ops)
    phase_time, phase_calls = defaultdict(float), defaultdict(int)
    for name, t, depth, ts in ops:
        classes[op_class(name)] += t
        names[name] += t
        counts[name] += 1
        phase_time[phase_of(ts)] += t
        # An op at the top of the stack outside the autograd engine is one the program called: a JNI call from Java.
        if depth == 0 and not name.startswith("autograd::"):
            phase_calls[phase_of(ts)] += 1
    print(f"{len(ops)} engine ops, {sum(phase_calls.values())} of them called by the program, "
          f"{total / 1e3:.1f} ms of self time\n")
    print("| phase | self ms | share | ops called by the program |")
    print("|---|---|---|---|")
    for phase in ("forward", "backward", "after backward", "step"):
        if phase in phase_time:
            print(f"| {phase} | {phase_time[phase] / 1e3:.1f} | {phase_time[phase] / total:.0%} | {phase_calls[phase]} |")
    print()
    print("| op class | self ms | share |")
    print("|---|---|---|")
    for cls, t in sorted(classes.items(), key=lambda kv: -kv[1]):
        print(f"| {cls} | {t / 1e3:.1f} | {t / total:.0%} |")
    print(f"\n| top {a.top} ops | calls | self ms | share |")
    print("|---|---|---|---|")
    for name, t in sorted(names.items(), key=lambda kv: -kv[1])[:a.top]:
        print(f"| {name} | {counts[name]} | {t / 1e3:.1f} | {t / total:.0%} |")


if __name__ == "__main__":
    main()
