"""``python -m finetune_worker check``: one JSON line saying whether this interpreter can run the worker, and what
the worker supports.

The Java launcher runs this before torchrun, so a missing or too old library is one clear message with the pip
command that fixes it instead of a traceback from every rank; and it refuses what the worker does not implement by
the worker's own lists (``capabilities``), of which it keeps no copy.
"""

import json
import sys
from importlib import metadata

# The oldest versions the worker is written against (FSDP2's fully_shard is public API from torch 2.6).
MINIMUM = {"torch": (2, 6), "transformers": (4, 56), "peft": (0, 17), "safetensors": (0, 4)}


def _version_tuple(text):
    parts = []
    for piece in text.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def capabilities():
    """What this worker implements (it imports the objectives, so torch must be importable)."""
    from finetune_worker import plan
    from finetune_worker.objectives import Dpo

    return {"plan_format": plan.FORMAT, "objectives": list(plan.OBJECTIVES), "dpo_loss_types": list(Dpo.TYPES)}


def check():
    report = {"python": sys.version.split()[0], "executable": sys.executable, "packages": {}, "problems": []}
    if sys.version_info < (3, 10):
        report["problems"].append("Python %s is older than 3.10" % report["python"])
    for name, minimum in MINIMUM.items():
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            report["problems"].append("%s is not installed" % name)
            continue
        report["packages"][name] = version
        if _version_tuple(version) < minimum:
            report["problems"].append("%s %s is older than %s" % (name, version, ".".join(map(str, minimum))))
    if not report["problems"]:
        import torch

        report["cuda_devices"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
        # what a recipe that declares a GPU is told when there is none: a CPU-only build, or no device found
        report["torch_cuda"] = torch.version.cuda
        report["cuda_names"] = [torch.cuda.get_device_name(i) for i in range(report["cuda_devices"])]
        report["cuda_memory"] = [torch.cuda.get_device_properties(i).total_memory
                                 for i in range(report["cuda_devices"])]
        report["bf16"] = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
        try:
            import bitsandbytes  # noqa: F401

            report["bitsandbytes"] = metadata.version("bitsandbytes")
        except Exception:
            report["bitsandbytes"] = None
        from finetune_worker import extras

        # every GPU extra that is installed (bitsandbytes above only if it also imports)
        report["gpu_extras"] = extras.installed()
        report["capabilities"] = capabilities()
    print(json.dumps(report))
    return 0 if not report["problems"] else 1
