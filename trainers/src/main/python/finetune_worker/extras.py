"""The GPU-only packages (``requirements-gpu.txt``): bitsandbytes for QLoRA's NF4 weights and 8-bit/paged AdamW,
liger-kernel and flash-attn for speed. CI never installs them (they need CUDA), so every use is behind a check here
that either finds the package on CUDA or refuses with the command that installs it.

QLoRA means the same on both backends: NF4 with bitsandbytes' codebook (the JVM's ``adapters/nf4/Codebook.NF4``,
checked equal by a test), 64 values per absmax, and with double quantization the absmaxes in 8-bit blocks of 256
(bitsandbytes' fixed nested block size, the JVM's ``Nf4Quantized.NESTED_BLOCK_SIZE``).
"""

from importlib import metadata

# where the pinned list lives in a finetune clone (the launcher extracts only the worker package elsewhere)
REQUIREMENTS = "trainers/src/main/python/requirements-gpu.txt"
# bitsandbytes' Linear4bit quantizes its weight in blocks of this many values (transformers does not change it)
NF4_BLOCK_SIZE = 64

# the recipe's optimizer names that need bitsandbytes, and its class for each
BNB_OPTIMIZERS = {"adamw_bnb_8bit": "AdamW8bit", "adamw_8bit": "AdamW8bit", "paged_adamw_8bit": "PagedAdamW8bit",
                  "paged_adamw_32bit": "PagedAdamW32bit"}


class Missing(Exception):
    """A GPU-only package or a CUDA device that the plan needs is not there: one line, with the fix."""


def install_command(package, python=None):
    """The command that installs ``package`` into ``python``'s environment, and where all the GPU extras are."""
    return "%s -m pip install %s (all GPU extras: -r %s)" % (python or "python3", package, REQUIREMENTS)


def version(name):
    """The installed distribution's version, or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def installed():
    """Every GPU extra with its version or None, for ``python -m finetune_worker check``."""
    return {name: version(name) for name in ("bitsandbytes", "liger-kernel", "flash-attn")}


def require_bitsandbytes(what, device, python=None):
    """Raises :class:`Missing` unless bitsandbytes imports and ``device`` is a CUDA device: ``what`` needs it."""
    if device.type != "cuda":
        raise Missing("%s needs bitsandbytes on a CUDA GPU; this worker runs on %s" % (what, device.type))
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as error:
        raise Missing("%s needs bitsandbytes, which %s cannot import (%s); install it: %s"
                      % (what, python or "this Python", error, install_command("bitsandbytes", python))) from error


def quantization_config(adapter, compute_dtype):
    """transformers' ``BitsAndBytesConfig`` for the plan's QLoRA adapter: NF4, double quantization as the recipe
    says, compute in ``compute_dtype``, packed into ``quant_storage`` (FSDP needs it equal to the compute dtype to
    shard the 4-bit weights with the rest)."""
    import torch
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                              bnb_4bit_use_double_quant=adapter.double_quant,
                              bnb_4bit_compute_dtype=compute_dtype,
                              bnb_4bit_quant_storage=getattr(torch, adapter.quant_storage))


def optimizer_class(name, device, python=None):
    """bitsandbytes' optimizer class for a recipe optimizer name, after :func:`require_bitsandbytes`."""
    require_bitsandbytes("optimizer: " + name, device, python)
    import bitsandbytes

    return getattr(bitsandbytes.optim, BNB_OPTIMIZERS[name])
