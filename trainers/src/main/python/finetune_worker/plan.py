"""``plan.json``: the worker's whole input besides the batches and schedule files, loaded into frozen dataclasses.

The Java launcher writes it from the records of ``backend/fsdp/WorkerPlanFile.java``; ``plan.schema.json`` beside
this module is the contract both sides are tested against (``WorkerPlanContractTest``). Every key is present (``null``
where a value is absent); a missing or unknown key, a value of the wrong type and another format are refused with
the key's path, so the two sides can never silently disagree. Nothing here has a default: what a setting is when the
recipe leaves it out was decided in Java, once.

To add a setting: a field here (in the dataclass of its section), the property in ``plan.schema.json``, the
component in ``WorkerPlanFile.java``.
"""

import dataclasses
import json
import os
import sys
import typing
from typing import Optional, Tuple

FORMAT = "finetune-worker-plan-2"


class PlanError(ValueError):
    """The plan does not match this worker: which key, and how."""


@dataclasses.dataclass(frozen=True)
class PeftInit:
    """A new adapter PEFT initialises itself (A from the seed, B = 0): a family the JVM trainer does not run."""
    r: int
    alpha: float
    dropout: float
    rslora: bool
    target_modules: Tuple[str, ...]  # linear layers by full name, as the plan counted them
    target_parameters: Tuple[str, ...]  # expert and router weights by full name (PEFT's target_parameters)


@dataclasses.dataclass(frozen=True)
class Adapter:
    kind: str  # "lora"
    # the adapter folder (PEFT layout) to start from: the JVM-made initial adapter, or lora_model_dir's for a family
    # the JVM trainer does not run; None when PEFT makes a new one (peft_init)
    initial: Optional[str]
    peft_init: Optional[PeftInit]
    quantized: bool  # QLoRA: the frozen base loaded in 4 bits (bitsandbytes NF4)
    double_quant: bool  # NF4's absmax values quantized as well
    quant_storage: str  # the dtype the 4-bit weights are packed into (a float one lets FSDP shard them)


@dataclasses.dataclass(frozen=True)
class Kernels:
    """The fast-path pieces the worker applies (``kernels.setup``); plain, dense and uncompiled is the reference."""
    head: str  # "plain" (full logits) or "chunked" (the LM head inside the loss)
    attention: str  # "dense", "auto", or a packed-attention kernel
    liger: Tuple[str, ...]  # Liger's kernels by name (rms_norm, rope, swiglu, layer_norm); empty: torch's own
    activation_offloading: bool
    torch_compile: bool  # compile each decoder layer (torch_compile: auto already decided for the device)
    torch_compile_backend: Optional[str]  # None: torch.compile's default
    torch_compile_mode: Optional[str]  # None: torch.compile's default


@dataclasses.dataclass(frozen=True)
class Model:
    path: str
    compute_dtype: str  # "float32" or "bfloat16": FSDP2's mixed-precision policy
    precision: str  # the regime the plan counted (precision.REGIMES): the dtype each kind of state is stored in
    tf32: bool  # float32 matrix multiplies on TF32 tensor cores
    gradient_checkpointing: bool
    adapter: Optional[Adapter]  # None: a full fine-tune
    kernels: Kernels


@dataclasses.dataclass(frozen=True)
class Parallel:
    world_size: int
    reshard_after_forward: bool
    offload_params: bool
    ddp_timeout_seconds: int  # ddp_timeout: a stopped or hung rank fails the collective after this, naming it
    layer_classes: Tuple[str, ...]  # fsdp_config.transformer_layer_cls_to_wrap; empty: the model's decoder layer


@dataclasses.dataclass(frozen=True)
class Data:
    batches: str  # finetune-batches-1
    schedule: str  # finetune-schedule-1: the data order and each step's learning rate
    micro_batch_size: int
    micro_batches_per_step: int  # over all ranks
    micro_batches_per_epoch: int
    log_dir: str


@dataclasses.dataclass(frozen=True)
class LossWatchdog:
    """Axolotl's loss watchdog: stop with a checkpoint once the logged loss stayed above ``threshold`` for
    ``patience`` steps in a row."""
    threshold: float
    patience: int


@dataclasses.dataclass(frozen=True)
class Training:
    total_steps: int
    num_epochs: float
    eval_steps: int  # 0: before the first and after the last step only
    save_steps: int  # 0: no checkpoints
    save_total_limit: int
    logging_steps: int
    seed: int
    loss_watchdog: Optional[LossWatchdog]  # None: the recipe sets none


@dataclasses.dataclass(frozen=True)
class Optimizer:
    name: str  # the recipe's optimizer: torch's AdamW, or a bitsandbytes one by its Axolotl name
    beta1: float
    beta2: float
    epsilon: float
    weight_decay: float
    max_grad_norm: float


@dataclasses.dataclass(frozen=True)
class DpoTerm:
    type: str
    weight: float


@dataclasses.dataclass(frozen=True)
class Dpo:
    beta: float
    terms: Tuple[DpoTerm, ...]


@dataclasses.dataclass(frozen=True)
class Grpo:
    num_generations: int
    max_completion_length: int
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    repetition_penalty: float
    loss_type: str
    epsilon: float
    epsilon_high: float
    delta: Optional[float]
    beta: float
    use_bias_correction_kl: bool
    mask_truncated_completions: bool


@dataclasses.dataclass(frozen=True)
class Objective:
    kind: str  # "sft", "dpo" or "grpo"
    reference: str  # "none", "adapter_disabled", "frozen_adapter" or "starting_weights"
    dpo: Optional[Dpo]
    grpo: Optional[Grpo]


@dataclasses.dataclass(frozen=True)
class Output:
    dir: str
    tokenizer_files: Tuple[str, ...]
    resume: Optional[str]  # the verified checkpoint to continue
    resume_key: str
    save_only_model: bool  # checkpoints without optimizer state (not resumable), as HF's Trainer saves them
    checkpoint_weights: bool  # HF-layout weights in every checkpoint (false: SHARDED_STATE_DICT, DCP shards only)
    max_file_bytes: int  # a full fine-tune's safetensors files are at most this size (hf_layout)
    save_chunk_bytes: int  # the most a rank copies off the device at once while writing its rows


@dataclasses.dataclass(frozen=True)
class Plan:
    format: str
    model: Model
    parallel: Parallel
    data: Data
    training: Training
    optimizer: Optimizer
    objective: Objective
    output: Output




def _declared():
    """capabilities.json: what this worker implements, declared once beside its code. The launcher's validation reads
    the same file (a copy of it ships in its recipes jar), so ``validate`` refuses what the worker lacks without starting
    Python."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "capabilities.json"), encoding="utf-8") as f:
        return json.load(f)


DECLARED = _declared()
# The worker's closed vocabularies; the launcher reads them from capabilities.json instead of keeping a copy.
OBJECTIVES = tuple(DECLARED["objectives"])
REFERENCES = ("none", "adapter_disabled", "frozen_adapter", "starting_weights")
COMPUTE_DTYPES = ("float32", "bfloat16")


def _convert(kind, value, path):
    """``value`` from JSON as ``kind`` (a dataclass, a primitive, Optional or Tuple of them), or PlanError."""
    origin = typing.get_origin(kind)
    if origin is typing.Union:
        inner = [a for a in typing.get_args(kind) if a is not type(None)][0]
        return None if value is None else _convert(inner, value, path)
    if value is None:
        raise PlanError("%s: null where a value is required" % path)
    if origin is tuple:
        if not isinstance(value, list):
            raise PlanError("%s: expected a list, got %r" % (path, value))
        item = typing.get_args(kind)[0]
        return tuple(_convert(item, v, "%s[%d]" % (path, i)) for i, v in enumerate(value))
    if dataclasses.is_dataclass(kind):
        if not isinstance(value, dict):
            raise PlanError("%s: expected an object, got %r" % (path, value))
        hints = typing.get_type_hints(kind)
        names = [f.name for f in dataclasses.fields(kind)]
        missing = [n for n in names if n not in value]
        unknown = sorted(set(value) - set(names))
        if missing:
            raise PlanError("%s: missing %s" % (path, ", ".join(repr(n) for n in missing)))
        if unknown:
            raise PlanError("%s: unknown %s (a plan from another version of the launcher?)"
                            % (path, ", ".join(repr(n) for n in unknown)))
        return kind(**{n: _convert(hints[n], value[n], "%s.%s" % (path, n)) for n in names})
    if kind is bool:
        if not isinstance(value, bool):
            raise PlanError("%s: expected true or false, got %r" % (path, value))
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PlanError("%s: expected an integer, got %r" % (path, value))
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PlanError("%s: expected a number, got %r" % (path, value))
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise PlanError("%s: expected a string, got %r" % (path, value))
        return value
    raise TypeError("no conversion for %r at %s" % (kind, path))


def parse(document):
    """A :class:`Plan` from the decoded JSON ``document``; PlanError names what does not match."""
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        found = document.get("format") if isinstance(document, dict) else None
        raise PlanError("plan.format: %r, but this worker reads %r (the launcher and the worker are from different "
                        "builds)" % (found, FORMAT))
    plan = _convert(Plan, document, "plan")
    objective = plan.objective
    if objective.kind not in OBJECTIVES:
        raise PlanError("plan.objective.kind: %r is not one of %s" % (objective.kind, OBJECTIVES))
    if objective.reference not in REFERENCES:
        raise PlanError("plan.objective.reference: %r is not one of %s" % (objective.reference, REFERENCES))
    for kind in ("dpo", "grpo"):
        if (getattr(objective, kind) is not None) != (objective.kind == kind):
            raise PlanError("plan.objective.%s: set exactly when kind is %s" % (kind, kind))
    adapter = plan.model.adapter
    if adapter is not None and (adapter.initial is None) == (adapter.peft_init is None):
        raise PlanError("plan.model.adapter: exactly one of initial and peft_init is set")
    if plan.model.compute_dtype not in COMPUTE_DTYPES:
        raise PlanError("plan.model.compute_dtype: %r is not one of %s" % (plan.model.compute_dtype, COMPUTE_DTYPES))
    return plan


def load(path):
    with open(path) as f:
        return parse(json.load(f))


def to_json(plan):
    """The JSON text of ``plan``, as the Java launcher writes it (for tools that make a plan themselves)."""
    return json.dumps(dataclasses.asdict(plan), indent=2) + "\n"


if __name__ == "__main__":
    # python -m finetune_worker.plan PLAN.json: checks a plan and prints it back
    sys.stdout.write(to_json(load(sys.argv[1])))
