"""One rank of a training run: model, LoRA, FSDP2, AdamW, the loop, evaluation, checkpoints and the final save.

The loop mirrors the JVM trainer (trainers/.../train/Trainer.java): step s consumes the micro batches at data
positions [s*G, (s+1)*G) of the Java-made order, G = micro batches per optimizer step over all ranks; rank r takes
every W-th of them from r; each micro batch's summed loss is divided by the summed weight (target tokens or pairs)
of the whole global window, counted on every rank and all-reduced, so world size 1 and world size W compute the
same loss and gradient up to arithmetic order.
"""

import contextlib
import json
import os
import signal
import sys
import time
import traceback
import warnings

import torch

from finetune_worker import (checkpoints, data, distributed, extras, hf_files, kernels, launcher_link, loading,
                            memory, objectives, optimizers, precision)
from finetune_worker import plan as plans


def _flos_parameters(model):
    """The parameters HF's ``total_flos`` counts (``num_parameters(exclude_embeddings=True)``; the JVM trainer's
    ``TrainableModel.parameterCount``): all but the embedding tables, frozen ones and adapters included, a tied head
    once (it is the embedding). A sharded parameter's numel() is the whole tensor's."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    return int(sum(p.numel() for p in model.parameters() if id(p) not in embeddings))


def _derive(*parts):
    """A well-mixed 63-bit seed from integers (SplitMix64 finaliser over their combination)."""
    z = 0
    for part in parts:
        z = (z + 0x9E3779B97F4A7C15 * (int(part) + 1)) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        z ^= z >> 31
    return z >> 1


def build_model(plan, world):
    """The model as this run trains it, in the precision regime the plan names, and what it computes with
    (:mod:`kernels`): ``((model, lora, kernels), regime)``. Built sharded from the start (:mod:`loading`); QLoRA,
    which runs on one GPU only, is loaded quantized by transformers."""
    regime = precision.of(plan.model.precision)
    precision.set_tf32(plan.model.tf32)
    adapter = plan.model.adapter
    if adapter is not None and adapter.quantized:
        return _quantized(plan, world, regime), regime
    return loading.build(plan, world, regime), regime


def _quantized(plan, world, regime):
    """QLoRA: the base in bitsandbytes' 4 bits on this GPU, the LoRA adapter from Java's initial one."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    if world.size > 1:
        raise extras.Missing("QLoRA runs on one GPU: FSDP2 gathers bitsandbytes' 4-bit parameters back as plain "
                             "tensors without their quantization state")
    extras.require_bitsandbytes("adapter: qlora", world.device)
    model = AutoModelForCausalLM.from_pretrained(
        plan.model.path, dtype=regime.compute, attn_implementation="sdpa",
        quantization_config=extras.quantization_config(plan.model.adapter, regime.compute),
        device_map={"": world.device})
    model.config.use_cache = False
    checkpointing = plan.model.gradient_checkpointing
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    fast = kernels.setup(model, plan.model.kernels, world.device, regime.compute, checkpointing)
    model = PeftModel.from_pretrained(model, plan.model.adapter.initial, is_trainable=True)
    return model, True, fast


def grad_norm_and_clip(parameters, max_norm):
    total = torch.nn.utils.clip_grad_norm_(parameters, max_norm if max_norm and max_norm > 0 else float("inf"))
    if hasattr(total, "full_tensor"):
        total = total.full_tensor()
    return float(total)


def evaluate(model, objective, batches, world):
    if hasattr(objective, "evaluate"):
        # GRPO samples before it scores: the objective runs its own evaluation
        return objective.evaluate(model, batches, world)
    model.eval()
    loss_sum, weight_sum, metric_sums = 0.0, 0.0, {}
    rounds = (len(batches) + world.size - 1) // world.size
    mine = data.rank_share(batches, world.rank, world.size)
    with torch.no_grad():
        for turn in range(rounds):
            if turn < len(mine):
                batch = mine[turn].to(world.device)
                loss, metrics = objective.loss(model, batch)
                loss_sum += float(loss)
                weight_sum += batch.weight
                for name, value in metrics.items():
                    metric_sums[name] = metric_sums.get(name, 0.0) + value * batch.weight
            else:
                # Every rank runs the same number of forward passes: each one all-gathers the sharded weights.
                objective.loss(model, batches[0].to(world.device))
    names = sorted(metric_sums)
    totals = distributed.sum_all([loss_sum, weight_sum] + [metric_sums[n] for n in names], world.device)
    weight = max(1.0, totals[1])
    line = {"eval_loss": totals[0] / weight}
    for name, value in zip(names, totals[2:]):
        line["eval_" + name] = value / weight
    return line


def run(plan, world, report):
    torch.manual_seed(plan.training.seed)
    train_batches, eval_batches = data.load_batches(plan.data.batches)
    order, learning_rates = data.load_schedule(plan.data.schedule)
    total_steps = plan.training.total_steps
    per_step = plan.data.micro_batches_per_step
    per_epoch = plan.data.micro_batches_per_epoch
    if per_step % world.size != 0:
        raise ValueError("%d micro batches per step do not split over %d ranks" % (per_step, world.size))
    if len(order) < total_steps * per_step or len(learning_rates) < total_steps:
        raise ValueError("the schedule file is shorter than %d steps" % total_steps)

    (model, lora, fast), regime = build_model(plan, world)
    # the load's own peak; from here the high-water mark is the training's
    load_peak = memory.peak_mb(world.device)
    memory.reset_peak(world.device)
    objective = objectives.of(plan, lora, fast)
    settings = plan.optimizer
    optimizer = optimizers.build(model, settings, regime, world.device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    # A sharded parameter's numel() is that of the whole tensor, so these are the model's totals on every rank.
    counts = [sum(p.numel() for p in model.parameters()), sum(p.numel() for p in trainable)]
    flos_parameters = _flos_parameters(model)

    if world.device.type == "cuda":
        train_batches = [b.pinned() for b in train_batches]
        eval_batches = [b.pinned() for b in eval_batches]
    # before a resume loads its checkpoint: a reference taken from the starting weights must see those
    train_batches, eval_batches = objective.prepare(model, train_batches, eval_batches, world)
    output_dir = plan.output.dir
    checkpoints.remove_leftovers(output_dir, world)
    step = 0
    history = []  # trainer_state.json's log_history so far
    # the launcher picked the checkpoint and verified its checksums
    folder = plan.output.resume
    if folder:
        with open(os.path.join(folder, checkpoints.STATE_FILE)) as f:
            saved = json.load(f)
        if saved.get("resume_key") != plan.output.resume_key:
            raise ValueError("%s was saved by a different recipe or data (resume key %s, now %s)"
                             % (folder, saved.get("resume_key"), plan.output.resume_key))
        state = checkpoints.load(folder, model, optimizer, lora)
        step = int(state["global_step"])
        history = hf_files.read_history(folder)
        report.emit("resumed", folder=folder, step=step, saved_world_size=state["world_size"])
    # TRL's num_tokens / HF's num_input_tokens_seen: every real token trained on so far, a resumed run's included
    tokens_seen = sum(train_batches.tokens(order[p]) for p in range(step * per_step))
    report.emit("start", step=step, total_steps=total_steps, world_size=world.size,
                parameters=int(counts[0]), trainable_parameters=int(counts[1]),
                device=str(world.device), micro_batches_per_step=per_step, flos_parameters=flos_parameters,
                kernels=fast.describe(), kernel_notes=fast.notes)

    if step == 0 and eval_batches:
        line = {"step": 0, "epoch": 0.0}
        line.update(evaluate(model, objective, eval_batches, world))
        report.emit("metrics", metrics=line)
        history.extend(hf_files.history_entries(line))

    trace_dir = plan.data.log_dir
    os.makedirs(trace_dir, exist_ok=True)
    trace = open(os.path.join(trace_dir, "data-rank%d.jsonl" % world.rank), "a")
    first = True
    # Axolotl's loss watchdog on the logged loss, as the JVM trainer's LogWindow averages it over logging_steps
    watchdog = plan.training.loss_watchdog
    log_every = plan.training.logging_steps
    window_losses, last_logged, violations = [], None, 0
    while step < total_steps:
        started = time.perf_counter()
        position = step * per_step
        # only this rank's share of the window is read from the batches file
        mine = [train_batches[i] for i in data.rank_share([order[position + k] for k in range(per_step)],
                                                          world.rank, world.size)]
        # Which micro batches this rank trained at this step: the global batch identity, auditable per rank.
        trace.write(json.dumps({"step": step + 1, "rank": world.rank,
                                "micro_batches": data.rank_share([order[position + k] for k in range(per_step)],
                                                                 world.rank, world.size)}) + "\n")
        trace.flush()
        if hasattr(objective, "start_step"):
            # GRPO samples and scores this rank's share of the window before the first backward
            objective.start_step(model, mine, step, data.rank_share(list(range(per_step)), world.rank, world.size),
                                 world)
        global_weight = distributed.sum_all([sum(b.weight for b in mine)], world.device)[0]
        scale = world.size / max(1.0, global_weight)
        model.train()
        # sums stay on the device until the step's one exchange: no micro batch waits for the device to finish
        loss_sum, metric_sums, tokens, samples = torch.zeros((), dtype=torch.float64, device=world.device), {}, 0, 0
        with _counting_host_syncs(world.device, report, step):
            for micro, batch in enumerate(mine):
                torch.manual_seed(_derive(plan.training.seed, step, micro, world.rank))
                batch = batch.to(world.device)
                loss, metrics = objective.loss(model, batch)
                # FSDP averages gradients over ranks; times W makes that the sum over the global window / its weight.
                (loss * scale).backward()
                loss_sum += loss.detach().double()
                tokens += batch.tokens
                samples += objective.samples(batch)
                for name, value in metrics.items():
                    metric_sums[name] = metric_sums.get(name, 0.0) + value * batch.weight
        norm = grad_norm_and_clip(trainable, settings.max_grad_norm)
        lr = learning_rates[step]
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        if first:
            # every plan term exists now: weights, adapter, gradients (until zero_grad) and the optimizer's state
            terms = memory.tensor_terms(model, optimizer, lora)
        optimizer.zero_grad(set_to_none=True)
        names = sorted(metric_sums)
        # the stop flag rides on this all-reduce: every rank stops after the same step, as one
        totals = distributed.sum_all([loss_sum, float(tokens), float(samples), 1.0 if launcher_link.stop_requested() else 0.0]
                                     + [metric_sums[n] for n in names], world.device)
        stop = totals[3] > 0
        tokens_seen += int(totals[1])
        seconds = distributed.max_all(time.perf_counter() - started, world.device)
        step += 1
        consumed = position + per_step
        peak = memory.peak_mb(world.device)
        line = {"step": step, "epoch": consumed / per_epoch, "loss": totals[0] / max(1.0, global_weight),
                "learning_rate": lr, "grad_norm": norm, "tokens_per_second": totals[1] / seconds,
                "num_tokens": tokens_seen, "peak_memory_mb": distributed.max_all(peak, world.device)}
        for name, value in zip(names, totals[4:]):
            line[name] = value / max(1.0, global_weight)
        if first:
            # each rank's own peak after the first optimizer step, for the launcher to set beside the plan's
            peaks = distributed.gather_objects({"rank": world.rank, "host": world.host, "peak_memory_mb": peak,
                                                "load_peak_memory_mb": load_peak,
                                                "host_peak_memory_mb": memory.host_peak_mb(), "tensors": terms})
            report.emit("peak_memory", ranks=peaks, step=step, measured=memory.peak_kind(world.device),
                        precision=regime.name, optimizer=type(optimizer).__name__)
            first = False
        evaluated = bool(eval_batches) and (step == total_steps or (plan.training.eval_steps > 0
                                                                    and step % plan.training.eval_steps == 0))
        if evaluated:
            line.update(evaluate(model, objective, eval_batches, world))
        window_losses.append(line["loss"])
        if step % log_every == 0 or step == total_steps or evaluated:
            last_logged = sum(window_losses) / len(window_losses)
            window_losses = []
        watchdog_stop = False
        if watchdog and last_logged is not None:
            violations = violations + 1 if last_logged > watchdog.threshold else 0
            watchdog_stop = violations >= watchdog.patience
        # samples: the global batch's examples, for the launcher's train_samples_per_second (not a logged metric)
        report.emit("metrics", metrics=line, samples=int(totals[2]))
        history.extend(hf_files.history_entries(line))
        if stop or plan.training.save_steps > 0 and (step % plan.training.save_steps == 0 or step == total_steps
                                                     or watchdog_stop):
            state = {"global_step": step, "world_size": world.size, "data_position": consumed,
                     "micro_batches_per_epoch": per_epoch, "resume_key": plan.output.resume_key,
                     "seed": plan.training.seed, "learning_rate": lr}
            hf_state = {"epoch": consumed / per_epoch, "tokens_seen": tokens_seen,
                        "flos": 6.0 * tokens_seen * flos_parameters, "history": list(history)}
            folder = checkpoints.save(output_dir, step, model, optimizer, state, lora,
                                      plan.training.save_total_limit, world, plan, hf_state)
            report.emit("checkpoint", step=step, folder=folder)
            if stop:
                # asked to stop (the launcher got SIGTERM, SIGINT or SIGHUP): this checkpoint holds the step
                report.emit("stopped", step=step, folder=folder)
                return
        # Failure drills for the tests: this rank raises, or is killed outright, after the given step.
        if os.environ.get("FINETUNE_WORKER_FAIL_AT") == "%d:%d" % (world.rank, step):
            raise RuntimeError("FINETUNE_WORKER_FAIL_AT: failing on purpose after step %d" % step)
        if os.environ.get("FINETUNE_WORKER_KILL_AT") == "%d:%d" % (world.rank, step):
            os.kill(os.getpid(), signal.SIGKILL)
        if watchdog_stop:
            sys.stderr.write("the loss %s stayed above loss_watchdog_threshold %s for %d steps: training stops at step %d\n"
                             % (last_logged, watchdog.threshold, violations, step))
            break

    files = hf_files.save_final(model, plan, lora, world)
    report.emit("saved", files=files, step=step)


@contextlib.contextmanager
def _counting_host_syncs(device, report, step):
    """With FINETUNE_SYNC_CHECK=1 on CUDA (gpu_check.py sets it), every step after the first reports how often the
    host waited for the GPU while its micro batches ran (torch's sync debug mode): the fast path promises none."""
    if device.type != "cuda" or os.environ.get("FINETUNE_SYNC_CHECK") != "1" or step == 0:
        yield
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message).splitlines()[0] for w in caught if "synchroniz" in str(w.message).lower()]
    report.emit("host_syncs", step=step + 1, count=len(syncs), first=syncs[:3])


def main(plan_path):
    # first of all: the launcher may ask as soon as this rank has reported its pid
    launcher_link.listen_for_stop()
    # before anything large is allocated: the resident set then follows the live tensors (memory.steady_heap)
    memory.steady_heap()
    plan = plans.load(plan_path)
    launcher_link.follow_launcher()
    world = None
    report = launcher_link.Reporter(None)
    try:
        world = distributed.start(plan.parallel.ddp_timeout_seconds, plan.parallel.offload_params)
        report = launcher_link.Reporter(world)
        # The launcher keeps every rank's pid, so that none outlives a failed run.
        report.emit("rank", everyone=True, pid=os.getpid(), local_rank=world.local_rank)
        if world.device.type == "cpu":
            # Ranks share the cores: one thread each unless the launcher said otherwise (OMP_NUM_THREADS).
            torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        run(plan, world, report)
        distributed.finish()
        report.emit("done")
        return 0
    except BaseException as error:  # noqa: BLE001 - every failure becomes one event the launcher shows
        report.emit("error", everyone=True, message="%s: %s" % (type(error).__name__, error),
                    traceback=traceback.format_exc())
        return 1
    finally:
        try:
            distributed.stop()
        except Exception:
            pass
