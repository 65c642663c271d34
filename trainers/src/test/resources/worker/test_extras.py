"""The GPU-only paths as far as a CPU can check them: QLoRA and 8-bit/paged AdamW refused without bitsandbytes
on CUDA, before any weight is read, with the command that installs it; QLoRA's NF4 codebook the one bitsandbytes
defines (and the JVM stores: FINETUNE_JVM_NF4 lists its 16 codes); fused AdamW taking the same steps as the plain
one.
"""

import copy
import json
import os
import tempfile
import types
import unittest

import torch

from finetune_worker import extras, optimizers, precision, train
from finetune_worker import plan as plans
from finetune_worker.distributed import World

CUDA = torch.device("cuda", 0)  # a device object only: nothing here touches a GPU


def has_bitsandbytes():
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        return False
    return True


class Refusals(unittest.TestCase):

    def test_qlora_on_a_cpu_worker_is_refused_naming_the_device(self):
        with self.assertRaises(extras.Missing) as refused:
            extras.require_bitsandbytes("adapter: qlora", torch.device("cpu"))
        self.assertIn("needs bitsandbytes on a CUDA GPU; this worker runs on cpu", str(refused.exception))

    @unittest.skipIf(has_bitsandbytes(), "bitsandbytes is installed here (gpu_check.py covers it)")
    def test_without_bitsandbytes_the_refusal_names_the_install_command(self):
        with self.assertRaises(extras.Missing) as refused:
            extras.require_bitsandbytes("adapter: qlora", CUDA, python="/opt/venv/bin/python")
        message = str(refused.exception)
        self.assertIn("/opt/venv/bin/python cannot import", message)
        self.assertIn("/opt/venv/bin/python -m pip install bitsandbytes", message)
        self.assertIn("requirements-gpu.txt", message)

    @unittest.skipIf(has_bitsandbytes(), "bitsandbytes is installed here (gpu_check.py covers it)")
    def test_every_bitsandbytes_optimizer_is_refused_before_it_is_built(self):
        model = torch.nn.Linear(2, 2)
        for name in ("adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit"):
            settings = plans.Optimizer(name=name, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=0.0,
                                       max_grad_norm=1.0)
            with self.assertRaises(extras.Missing) as refused:
                optimizers.build(model, settings, precision.of("fp32"), CUDA)
            self.assertIn("optimizer: " + name, str(refused.exception))

    def test_a_qlora_plan_is_refused_before_the_weights_are_read(self):
        with tempfile.TemporaryDirectory() as folder:
            # no model files at all: a refusal that came after loading would fail differently
            adapter = plans.Adapter(kind="lora", initial=folder, peft_init=None, quantized=True, double_quant=True,
                                    quant_storage="uint8")
            kernels = plans.Kernels(head="plain", attention="dense", liger=(), activation_offloading=False,
                                    torch_compile=False, torch_compile_backend="inductor", torch_compile_mode=None)
            # only the model section is read before the refusal
            plan = types.SimpleNamespace(model=plans.Model(path=os.path.join(folder, "absent"),
                                                           compute_dtype="float32", precision="mixed", tf32=False,
                                                           gradient_checkpointing=False,
                                                           adapter=adapter, kernels=kernels))
            world = World(0, 1, 0, torch.device("cpu"), "host")
            with self.assertRaises(extras.Missing) as refused:
                train.build_model(plan, world)
            self.assertIn("adapter: qlora needs bitsandbytes on a CUDA GPU", str(refused.exception))
            sharded = World(0, 2, 0, CUDA, "host")
            with self.assertRaises(extras.Missing) as refused:
                train.build_model(plan, sharded)
            self.assertIn("QLoRA runs on one GPU", str(refused.exception))


class Nf4(unittest.TestCase):

    def test_the_jvms_nf4_codes_are_bitsandbytes_normal_map(self):
        """bitsandbytes' ``create_normal_map(offset=0.9677083, use_extra_value=True)``: 8 positive quantiles of a
        standard normal from ``offset`` to 1/2, 7 negative ones, and 0, divided by the largest."""
        offset = 0.9677083
        ppf = torch.special.ndtri
        positive = ppf(torch.linspace(offset, 0.5, 9)[:-1].double())
        negative = -ppf(torch.linspace(offset, 0.5, 8)[:-1].double())
        values = torch.cat([positive, torch.zeros(1, dtype=torch.float64), negative]).float()
        values = (values / values.max()).sort().values
        jvm = torch.tensor(json.loads(os.environ["FINETUNE_JVM_NF4"]), dtype=torch.float32)
        print("NF4: max |bitsandbytes' map - JVM codes| = %.2e" % float((values - jvm).abs().max()))
        self.assertEqual(16, jvm.numel())
        self.assertLessEqual(float((values - jvm).abs().max()), 1e-7)

    def test_the_workers_quantization_is_nf4_in_blocks_of_64_with_double_quant_as_asked(self):
        self.assertEqual(int(os.environ["FINETUNE_JVM_NF4_BLOCK"]), extras.NF4_BLOCK_SIZE)
        for double in (True, False):
            adapter = plans.Adapter(kind="lora", initial="", peft_init=None, quantized=True, double_quant=double,
                                    quant_storage="uint8")
            config = extras.quantization_config(adapter, torch.bfloat16)
            self.assertTrue(config.load_in_4bit)
            self.assertEqual("nf4", config.bnb_4bit_quant_type)
            self.assertEqual(double, config.bnb_4bit_use_double_quant)
            self.assertEqual(torch.bfloat16, config.bnb_4bit_compute_dtype)


class FusedAdamW(unittest.TestCase):

    def test_the_fused_kernel_takes_the_plain_optimizers_steps(self):
        """On CUDA the worker asks for torch's fused AdamW; torch has the same kernel for CPU tensors, so the
        optimizer the worker builds for a GPU is run here against the one it builds for a CPU."""
        # adamw_torch: fused on CUDA only (adamw_torch_fused would ask for the fused kernel on the CPU as well)
        settings = plans.Optimizer(name="adamw_torch", beta1=0.9, beta2=0.95, epsilon=1e-8, weight_decay=0.1,
                                   max_grad_norm=1.0)
        torch.manual_seed(0)
        first = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
        models = [first, copy.deepcopy(first)]
        fused = optimizers.build(models[0], settings, precision.of("fp32"), CUDA)
        plain = optimizers.build(models[1], settings, precision.of("fp32"), torch.device("cpu"))
        self.assertTrue(fused.defaults["fused"])
        self.assertFalse(plain.defaults.get("fused"))
        generator = torch.Generator().manual_seed(1)
        for step in range(5):
            x = torch.randn(8, 16, generator=generator)
            for model, optimizer in ((models[0], fused), (models[1], plain)):
                for group in optimizer.param_groups:
                    group["lr"] = 1e-2 * (step + 1)
                model(x).square().mean().backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        for a, b in zip(models[0].parameters(), models[1].parameters()):
            self.assertLessEqual(float((a - b).abs().max()), 1e-6)


if __name__ == "__main__":
    unittest.main()
