"""The model, sharded from the start: no rank ever holds more than its own shards of the weights.

1. The architecture is built from ``config.json`` on the meta device (parameters without storage; buffers such as
   the rotary frequencies are real, they are small and computed, not loaded), with the LoRA modules PEFT adds.
2. Every parameter gets the dtype the precision regime stores it in, then ``fully_shard`` wraps each decoder layer,
   the embedding and the LM head (each its own unit when they are not tied, so a 128k-vocabulary table is never
   gathered together with the head) and the root. A frozen table tied to the head (LoRA) is no FSDP parameter
   on several ranks: each keeps its rows, and the lookup and the SFT loss exchange activations instead
   (:mod:`vocab_parallel`).
3. Each rank allocates only its shards and fills them from the safetensors files, reading just the rows of every
   tensor that it owns (``get_slice`` on the memory-mapped file): the whole checkpoint is read once per node, split
   over its ranks, and no rank materialises a full tensor. The LoRA weights come from the initial adapter the Java
   side wrote (its own A draw, B = 0), so both backends start from the same numbers.

Names are looked up, never guessed: a parameter with no tensor in the checkpoint, or a checkpoint tensor no
parameter takes, stops the load with both lists.
"""

import json
import math
import os
import re

import torch

# what PEFT puts around a base model's names: "base_model.model." in front, ".base_layer" before a wrapped
# linear's own weight, and the adapter's name inside LoRA's
_PEFT_PREFIX = "base_model.model."
_ADAPTER = re.compile(r"\.(lora_[AB]|lora_embedding_[AB]|lora_magnitude_vector)\.default(\.|$)")


def build(plan, world, regime, layer_class=None):
    """The model on ``world.device``, every shard filled; returns ``(model, lora, kernels)``.

    One process trains the model unsharded (the single-GPU fast path: nothing to gather), except a full fine-tune
    whose regime computes in another dtype than it stores: FSDP2's policy is what casts the weights for compute."""
    model, lora, fast = on_meta(plan, regime, attention="sdpa" if world.device.type == "cuda" else "eager",
                                device=world.device)
    sharded = is_sharded(world, regime, lora)
    if sharded:
        shard(model, world, regime, plan, layer_class)
    # only FSDP2 moves offloaded shards to the device for compute: an unsharded model lives on the device
    materialise(model, world, offload=sharded and _offloaded(plan, world))
    adapter = plan.model.adapter
    initial = adapter.initial if adapter is not None else None
    fill(model, plan.model.path, initial)
    if lora and initial is None:
        init_adapter(model, plan.training.seed)
    return model, lora, fast


def is_sharded(world, regime, lora):
    """Whether FSDP2 wraps the model: over several ranks, and on one where a full fine-tune computes in another dtype
    than it stores (FSDP2's policy casts the weights for compute)."""
    return world.size > 1 or (regime.compute != regime.trainable and not lora)


def _offloaded(plan, world):
    return plan.parallel.offload_params and world.device.type == "cuda"


def on_meta(plan, regime, attention="eager", config=None, device=None):
    """The architecture (and LoRA) with every parameter on the meta device, in the regime's dtypes, and the plan's
    kernels (:mod:`kernels`) patched in for ``device``: ``(model, lora, kernels)``."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    from finetune_worker import families, kernels

    if config is None:
        config = AutoConfig.from_pretrained(plan.model.path)
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attention)
    # accelerate's empty-weights context registers each parameter anew, which unties an embedding from its head
    model.tie_weights()
    model.config.use_cache = False
    checkpointing = plan.model.gradient_checkpointing
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # the kernels patch the transformers model before PEFT wraps it (they touch modules, never weights)
    fast = kernels.setup(model, plan.model.kernels, device or torch.device("cpu"), regime.compute, checkpointing)
    adapter = plan.model.adapter
    lora = adapter is not None
    if lora:
        from peft import LoraConfig, get_peft_model

        if adapter.initial is not None:
            settings = LoraConfig.from_pretrained(adapter.initial)
        else:
            # a family the JVM trainer does not run: PEFT's LoRA on exactly the targets the plan resolved
            settings = families.lora_config(adapter.peft_init)
        # a saved adapter's config says inference_mode (frozen): this one is trained
        settings.inference_mode = False
        # low_cpu_mem_usage: the adapter's weights stay on the meta device too; they are filled from the file, or
        # drawn by init_adapter
        model = get_peft_model(model, settings, low_cpu_mem_usage=True)
        if adapter.initial is None:
            families.check_adapted(model, adapter.peft_init)
    else:
        for parameter in model.parameters():
            parameter.requires_grad_(True)
    _set_dtypes(model, regime)
    return model, lora, fast


def _set_dtypes(model, regime):
    """Each parameter in its regime's dtype, tied ones (embedding = head) kept one parameter."""
    done = {}
    for module in model.modules():
        for name, parameter in list(module._parameters.items()):
            if parameter is None:
                continue
            if id(parameter) not in done:
                dtype = regime.trainable if parameter.requires_grad else regime.frozen
                done[id(parameter)] = parameter if parameter.dtype == dtype else torch.nn.Parameter(
                    parameter.detach().to(dtype), requires_grad=parameter.requires_grad)
            module._parameters[name] = done[id(parameter)]


def decoder_layers(model, layer_class=None):
    """The modules FSDP wraps one by one: the model's ``_no_split_modules`` (its decoder layer), or the classes the
    recipe names in ``fsdp_config.transformer_layer_cls_to_wrap`` (a name or a sequence of names)."""
    from finetune_worker import families

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if isinstance(layer_class, str):
        layer_class = (layer_class,)
    classes = set(layer_class) if layer_class else families.decoder_layer_classes(base)
    layers = [m for m in model.modules() if type(m).__name__ in classes]
    if not layers:
        raise ValueError("found no decoder layers (%s%s) to shard in %s" % (
            sorted(classes), ", fsdp_config.transformer_layer_cls_to_wrap" if layer_class else "", type(base).__name__))
    return layers


def _tables(model):
    """The input embedding and the output head, when they are separate tensors (each then its own FSDP unit)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    embedding, head = base.get_input_embeddings(), base.get_output_embeddings()
    if embedding is None or head is None:
        return []
    if any(p is q for p in embedding.parameters() for q in head.parameters()):
        # tied: the one table lives in the root unit, gathered with it (unless vocab_parallel keeps it in rows)
        return []
    return [embedding, head]


def shard(model, world, regime, plan, layer_class=None, mesh=None):
    """``fully_shard`` per decoder layer, the embedding and the head (when untied), then the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    from finetune_worker import vocab_parallel

    if mesh is None:
        mesh = init_device_mesh(world.device.type, (world.size,))
    offload = CPUOffloadPolicy() \
        if _offloaded(plan, world) else OffloadPolicy()
    reshard = plan.parallel.reshard_after_forward
    policy = regime.policy()
    # a frozen tied table stays in rows over the ranks, outside FSDP: the root would gather it whole, twice a step
    # (not offloaded: FSDP alone moves host-resident parameters to the device for compute)
    ignored = {vocab_parallel.shard(model, mesh)} \
        if vocab_parallel.applies(model, world) and not _offloaded(plan, world) else None
    # the recipe's transformer_layer_cls_to_wrap, else the model's own decoder layer
    for unit in decoder_layers(model, layer_class or plan.parallel.layer_classes) + _tables(model):
        fully_shard(unit, mesh=mesh, mp_policy=policy, offload_policy=offload, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, mp_policy=policy, offload_policy=offload, reshard_after_forward=reshard,
                ignored_params=ignored)
    return mesh


def materialise(model, world, offload=False):
    """Storage for this rank's shards only (uninitialised until :func:`fill`); buffers keep their computed values."""
    buffers = {name: buffer.detach().clone() for name, buffer in model.named_buffers() if buffer.device.type != "meta"}
    model.to_empty(device="cpu" if offload else world.device)
    # to_empty gives each module its own new parameter off the meta device, which unties an unsharded embedding
    # from its head (FSDP2 already holds the tied one as one sharded parameter)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if getattr(base.config, "tie_word_embeddings", False):
        base.tie_weights()
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name in buffers:
                buffer.copy_(buffers[name])


def checkpoint_name(parameter_name):
    """The checkpoint's name for a parameter of the (PEFT-wrapped, FSDP-sharded) model: a lookup key, not a guess."""
    name = parameter_name
    if name.startswith(_PEFT_PREFIX):
        if _ADAPTER.search(name):
            # PEFT's adapter files keep the prefix and drop the adapter's name
            return _ADAPTER.sub(lambda m: "." + m.group(1) + m.group(2), name)
        name = name[len(_PEFT_PREFIX):]
    # PEFT nests one wrapper per adapted parameter of a module (MoE experts: gate_up_proj and down_proj)
    return re.sub(r"(\.base_layer)+\.", ".", name)


class SafetensorsFolder:
    """The tensors of a model folder (one ``model.safetensors`` or shards with their index) by name."""

    def __init__(self, folder):
        index = os.path.join(folder, "model.safetensors.index.json")
        if os.path.isfile(index):
            with open(index) as f:
                weight_map = json.load(f)["weight_map"]
            self.files = {name: os.path.join(folder, file) for name, file in weight_map.items()}
        else:
            single = os.path.join(folder, "model.safetensors")
            if not os.path.isfile(single):
                raise FileNotFoundError("%s has neither model.safetensors nor model.safetensors.index.json" % folder)
            from safetensors import safe_open

            with safe_open(single, framework="pt") as f:
                self.files = {name: single for name in f.keys()}


def _local_rows(parameter):
    """``(local tensor, first row)`` of this rank's shard: FSDP2 shards dim 0 in ``torch.chunk`` pieces."""
    from torch.distributed.tensor import DTensor

    if not isinstance(parameter, DTensor):
        return parameter.data, 0
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    local = parameter.to_local()
    _, offset = compute_local_shape_and_global_offset(parameter.shape, parameter.device_mesh, parameter.placements)
    return local, offset[0] if offset else 0


def fill(model, base_model, adapter_folder=None):
    """Copies each rank's rows of every parameter from the checkpoint files (and the adapter file), one file at a
    time so that only that file's mapped pages are ever resident.

    A checkpoint whose tensors transformers renames or restacks on load (its conversion mapping: Mixtral's
    per-expert ``w1/w2/w3`` become stacked ``gate_up_proj/down_proj``) is read through ``from_pretrained`` on the
    CPU instead, in its stored dtype, and each rank copies its rows from that: correct for every family
    transformers loads, at the host memory of one full copy per rank for those checkpoints only."""
    from safetensors import safe_open

    sources = {name: path for name, path in SafetensorsFolder(base_model).files.items()}
    if adapter_folder:
        adapter_file = os.path.join(adapter_folder, "adapter_model.safetensors")
        with safe_open(adapter_file, framework="pt") as f:
            sources.update({name: adapter_file for name in f.keys()})
    wanted = {}
    for name, parameter in model.named_parameters():
        if adapter_folder is None and _ADAPTER.search(name):
            continue  # drawn by init_adapter
        wanted.setdefault(checkpoint_name(name), parameter)
    buffers = {checkpoint_name(n) for n, _ in model.named_buffers()}
    converted = None
    if set(wanted) - set(sources):
        converted = _converted(base_model)
        base_files = set(SafetensorsFolder(base_model).files)
        sources = {name: path for name, path in sources.items() if name not in base_files}
        sources.update({name: None for name in converted})
    missing = sorted(set(wanted) - set(sources))
    unexpected = sorted(set(sources) - set(wanted) - buffers)
    if missing or unexpected:
        raise ValueError("%s does not match the model: %d parameter(s) missing from the files %s, %d tensor(s) in the "
                         "files no parameter takes %s" % (base_model, len(missing), missing[:8], len(unexpected),
                                                         unexpected[:8]))
    by_file = {}
    for name in wanted:
        by_file.setdefault(sources[name], []).append(name)
    with torch.no_grad():
        for path, names in by_file.items():
            with (safe_open(path, framework="pt") if path else _Tensors(converted)) as f:
                for name in names:
                    _copy_rows(wanted[name], f.get_slice(name), name, base_model, path)


def _copy_rows(parameter, piece, name, base_model, path):
    local, start = _local_rows(parameter)
    shape = tuple(piece.get_shape())
    if shape != tuple(parameter.shape):
        raise ValueError("%s: %s has shape %s in %s, the model wants %s" % (
            base_model, name, list(shape), os.path.basename(path or "its loaded form"), list(parameter.shape)))
    if local.numel() == 0:
        return
    rows = piece[start:start + local.shape[0]] if len(shape) > 0 else piece[:]
    local.copy_(rows.to(dtype=local.dtype))


def _converted(base_model):
    """The checkpoint's tensors as transformers loads them (names and layout of the model it builds), on the CPU."""
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(base_model, dtype="auto", device_map="cpu")
    # parameters, not state_dict(): a tied head is the embedding, as in the model being filled
    return {name: parameter.detach() for name, parameter in loaded.named_parameters()}


class _Tensors:
    """In-memory tensors behind safetensors' ``safe_open`` interface (``get_slice``, ``get_shape``)."""

    def __init__(self, tensors):
        self.tensors = tensors

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def get_slice(self, name):
        return _Slice(self.tensors[name])


class _Slice:
    def __init__(self, tensor):
        self.tensor = tensor

    def get_shape(self):
        return list(self.tensor.shape)

    def __getitem__(self, item):
        return self.tensor[item]


def init_adapter(model, seed):
    """LoRA weights drawn here when no initial adapter file exists (the families the JVM trainer does not run):
    PEFT's initialisation (A: kaiming-uniform with a = sqrt(5), B = 0; an embedding's A = 0, B normal), each full
    tensor drawn on the CPU from one generator seeded with the plan's seed in parameter order, and each rank keeping
    its own rows: every world size starts from the same numbers, and no rank builds the model to draw them."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            found = _ADAPTER.search(name)
            if not found:
                continue
            kind = found.group(1)
            full = torch.empty(tuple(parameter.shape), dtype=torch.float32)
            if kind == "lora_A" and full.dim() >= 2:
                torch.nn.init.kaiming_uniform_(full, a=math.sqrt(5), generator=generator)
            elif kind == "lora_embedding_B":
                torch.nn.init.normal_(full, generator=generator)
            elif kind == "lora_magnitude_vector":
                raise ValueError("DoRA adapters start from the base weights' norms: give an initial adapter")
            else:
                full.zero_()
            local, start = _local_rows(parameter)
            if local.numel():
                local.copy_(full[start:start + local.shape[0]].to(local.dtype))
