"""peer_hf: configs/quickstart.yaml's work done by transformers' Trainer with PEFT's LoRA: the recipe's settings
read from the recipe itself, its rows split, tokenized and packed as finetune packs them."""
import json
import math
import os
import random
import statistics
import time

import torch

from measure import STARTED, Counters, omp_wait_policy, peak_rss_mb
from peer_torch import LORA_TARGETS


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
