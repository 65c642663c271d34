"""What gpu_check.py hands the worker for one case, written as the Java launcher writes it: a random Llama of a given
shape (or stories260K), packed micro batches (random tokens, or the quickstart's texts), the schedule, the initial
LoRA adapter and plan.json, built from the worker's own plan dataclasses so that it is the contract the launcher
writes (finetune_worker/plan.schema.json).

Apart from gpu_check.py, which runs the cases and judges what they measure, because this is the launcher's side of
the contract reproduced without Java; when the launcher's files change, this is the file to follow them.
"""

import json
import os

import torch
from safetensors.torch import save_file

from finetune_worker import plan as plans

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "..", ".."))
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# What every case runs on a GPU with bf16, beside its model and data; finetune's plan of the same recipe must say the
# same (GpuCheckPlanTest reads these through ``gpu_check.py --cases``). On a CPU or without bf16: fp32.
RUN = dict(precision="mixed", optimizer="adamw_torch_fused", head="chunked", torch_compile=False,
           gradient_checkpointing=False)


def llama_config(shape):
    """The random Llama's config: what its config.json says, and what the plan reads of it."""
    from transformers import LlamaConfig

    return LlamaConfig(max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False,
                       torch_dtype="bfloat16", **shape)


def write_random_llama(folder, shape, device):
    from transformers import LlamaForCausalLM

    if os.path.isfile(os.path.join(folder, "config.json")):
        return
    config = llama_config(shape)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)


def random_rows(count, rows, columns, vocab, seed):
    """``count`` micro batches of ``rows`` packed rows: examples of random lengths (64..columns), a padding tail."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        ids = torch.randint(3, vocab, (rows, columns), generator=generator, dtype=torch.int32)
        segments = torch.zeros(rows, columns, dtype=torch.int32)
        positions = torch.zeros(rows, columns, dtype=torch.int32)
        for row in range(rows):
            start, number = 0, 1
            while columns - start >= 64:
                length = int(torch.randint(64, columns - start + 1, (1,), generator=generator))
                segments[row, start:start + length] = number
                positions[row, start:start + length] = torch.arange(length, dtype=torch.int32)
                start, number = start + length, number + 1
        batches.append((ids, positions, segments))
    return batches


def quickstart_rows(count, rows, columns):
    """The quickstart's texts tokenized with stories260K's tokenizer and packed greedily into rows."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(os.path.join(ROOT, "configs/models/stories260K"))
    texts = [json.loads(line)["text"] for line in open(os.path.join(ROOT, "configs/data/quickstart.jsonl"))]
    examples = [[tokenizer.bos_token_id] + tokenizer(t, add_special_tokens=False)["input_ids"][:columns - 2]
                + [tokenizer.eos_token_id] for t in texts]
    batches, cursor = [], 0
    for _ in range(count):
        ids = torch.zeros(rows, columns, dtype=torch.int32)
        positions = torch.zeros(rows, columns, dtype=torch.int32)
        segments = torch.zeros(rows, columns, dtype=torch.int32)
        for row in range(rows):
            start, number = 0, 1
            while True:
                example = examples[cursor % len(examples)]
                if start + len(example) > columns:
                    break
                ids[row, start:start + len(example)] = torch.tensor(example, dtype=torch.int32)
                positions[row, start:start + len(example)] = torch.arange(len(example), dtype=torch.int32)
                segments[row, start:start + len(example)] = number
                start, number, cursor = start + len(example), number + 1, cursor + 1
        batches.append((ids, positions, segments))
    return batches


def write_batches(path, batches):
    """The launcher's batches file (finetune-batches-1): next-token targets within each example."""
    split = {k: [] for k in ("ids", "positions", "segments", "targets", "mask")}
    shapes, weights = [], []
    for ids, positions, segments in batches:
        targets = torch.zeros_like(ids)
        targets[:, :-1] = ids[:, 1:]
        mask = torch.zeros_like(ids, dtype=torch.uint8)
        mask[:, :-1] = ((segments[:, :-1] == segments[:, 1:]) & (segments[:, :-1] != 0)).to(torch.uint8)
        for name, value in (("ids", ids), ("positions", positions), ("segments", segments), ("targets", targets),
                            ("mask", mask)):
            split[name].append(value.reshape(-1))
        shapes.append(list(ids.shape))
        weights.append(int(mask.sum()))
    tensors = {"train." + k: torch.cat(v) for k, v in split.items()}
    tensors.update({"train.shapes": torch.tensor(shapes, dtype=torch.int32),
                    "train.weights": torch.tensor(weights, dtype=torch.int64)})
    for name, dtype in (("ids", torch.int32), ("positions", torch.int32), ("segments", torch.int32),
                        ("targets", torch.int32), ("mask", torch.uint8)):
        tensors["eval." + name] = torch.zeros(0, dtype=dtype)
    tensors["eval.shapes"] = torch.zeros((0, 2), dtype=torch.int32)
    tensors["eval.weights"] = torch.zeros(0, dtype=torch.int64)
    save_file(tensors, path, metadata={"format": "finetune-batches-1"})


def write_case(case, folder, steps, per_step, nproc):
    """Everything the worker reads for one case; returns plan.json's path."""
    os.makedirs(folder, exist_ok=True)
    count = steps * per_step
    if case["data"] == "random":
        rows = random_rows(count, case["micro"], case["seq"], case["shape"]["vocab_size"], seed=1)
    else:
        rows = quickstart_rows(count, case["micro"], case["seq"])
    batches = os.path.join(folder, "batches.safetensors")
    write_batches(batches, rows)
    schedule = os.path.join(folder, "schedule.safetensors")
    save_file({"order": torch.arange(count, dtype=torch.int32),
               "lr": torch.full((steps,), 2e-4, dtype=torch.float64)}, schedule)
    initial = os.path.join(folder, "initial-adapter")
    if not os.path.isdir(initial):
        from peft import LoraConfig, get_peft_model
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.initialization import no_init_weights

        # the base weights' values do not matter here (only the adapter is saved): left uninitialised
        with no_init_weights():
            base = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(case["model"]), dtype=torch.bfloat16)
        peft = get_peft_model(base, LoraConfig(r=case["r"], lora_alpha=2 * case["r"], lora_dropout=0.0,
                                               task_type="CAUSAL_LM", target_modules=TARGETS))
        peft.save_pretrained(initial)
        del peft, base
    gpu = torch.cuda.is_available()
    # the worker's own plan dataclasses: the contract the Java launcher writes (finetune_worker/plan.schema.json)
    adapter = plans.Adapter(kind="lora", initial=initial, peft_init=None, quantized=case["qlora"], double_quant=True,
                            quant_storage="uint8")
    plan = plans.Plan(
        format=plans.FORMAT,
        model=plans.Model(path=case["model"], compute_dtype="bfloat16" if gpu and torch.cuda.is_bf16_supported()
                          else "float32",
                          # the regime finetune plans for LoRA with bf16 on a GPU (fp32 adapters over a bf16 base)
                          precision=RUN["precision"] if gpu and torch.cuda.is_bf16_supported() else "fp32", tf32=True,
                          gradient_checkpointing=RUN["gradient_checkpointing"], adapter=adapter,
                          kernels=plans.Kernels(head=RUN["head"], attention="auto", liger=(), activation_offloading=False,
                                                torch_compile=RUN["torch_compile"], torch_compile_backend="inductor",
                                                torch_compile_mode=None)),
        parallel=plans.Parallel(world_size=nproc, reshard_after_forward=True, offload_params=False,
                                ddp_timeout_seconds=1800, layer_classes=()),
        data=plans.Data(batches=batches, schedule=schedule, micro_batch_size=case["micro"],
                        micro_batches_per_step=per_step, micro_batches_per_epoch=count,
                        log_dir=os.path.join(folder, "logs")),
        training=plans.Training(total_steps=steps, num_epochs=1.0, eval_steps=0, save_steps=0, save_total_limit=0,
                                logging_steps=1, seed=42, loss_watchdog=None),
        optimizer=plans.Optimizer(name=RUN["optimizer"], beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=0.0,
                                  max_grad_norm=1.0),
        objective=plans.Objective(kind="sft", reference="none", dpo=None, grpo=None),
        output=plans.Output(dir=os.path.join(folder, "run"), tokenizer_files=(), resume=None, resume_key="gpu-check",
                            save_only_model=False, checkpoint_weights=True, max_file_bytes=5 * 10**9,
                            save_chunk_bytes=64 * 2**20))
    path = os.path.join(folder, "plan.json")
    with open(path, "w") as f:
        f.write(plans.to_json(plan))
    return path
