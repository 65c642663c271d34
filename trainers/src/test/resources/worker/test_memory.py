"""A rank's tensor bytes per plan term (memory.tensor_terms) counted alike for real tensors and on the meta device,
where meta_terms counts plans no machine here runs: every storage once however many views share it, two storages of
one size twice; and what meta_terms refuses to count.
"""

import types
import unittest

import torch

from finetune_worker import memory, meta_terms, optimizers, precision


def stepped(device, tied):
    """A small model with a tied head, a gradient on every trainable parameter and one AdamW step, on ``device``."""
    torch.manual_seed(0)
    with torch.device(device):
        model = torch.nn.Sequential(torch.nn.Embedding(40, 8), torch.nn.Linear(8, 16), torch.nn.LayerNorm(16),
                                    torch.nn.Linear(8, 40, bias=False))
    if tied:
        model[3].weight = model[0].weight
    model[1].requires_grad_(False)
    for parameter in model.parameters():
        if parameter.requires_grad:
            parameter.grad = torch.zeros_like(parameter)
    settings = types.SimpleNamespace(name="adamw_torch", beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=0.1)
    optimizer = optimizers.build(model, settings, precision.of("fp32"), torch.device("cpu"))
    optimizer.step()
    return model, optimizer


class TensorTerms(unittest.TestCase):

    def test_real_and_meta_tensors_count_the_same_bytes(self):
        for tied in (False, True):
            real = memory.tensor_terms(*stepped("cpu", tied), lora=True)
            meta = memory.tensor_terms(*stepped("meta", tied), lora=True)
            self.assertEqual(real, meta, "tied=%s" % tied)
            # frozen: the 16x8 linear and its bias; trainable: embedding 40x8, norm 2x16, and the head 40x8 unless
            # it is the embedding (fp32)
            self.assertEqual(real["weights"], (16 * 8 + 16) * 4)
            self.assertEqual(real["adapter"], (40 * 8 + 2 * 16 + (0 if tied else 40 * 8)) * 4)
            self.assertEqual(real["gradients"], real["adapter"])
            self.assertEqual(real["optimizer_state"], 2 * real["adapter"])

    def test_a_meta_storage_is_counted_once_however_many_views_share_it(self):
        whole = torch.empty(6, 4, device="meta")
        other = torch.empty(6, 4, device="meta")
        self.assertEqual(memory._count([whole, whole[2:], whole.view(24)], set()), 6 * 4 * 4)
        self.assertEqual(memory._count([whole, other], set()), 2 * 6 * 4 * 4)


class MetaTermsRefusals(unittest.TestCase):

    def test_what_exists_only_on_a_gpu_or_the_host_is_refused_by_name(self):
        def plan(quantized=False, optimizer="adamw_torch_fused", offload=False):
            adapter = types.SimpleNamespace(quantized=quantized)
            return types.SimpleNamespace(model=types.SimpleNamespace(adapter=adapter),
                                         optimizer=types.SimpleNamespace(name=optimizer),
                                         parallel=types.SimpleNamespace(offload_params=offload))

        self.assertIsNone(meta_terms.refusal(plan()))
        self.assertIn("QLoRA", meta_terms.refusal(plan(quantized=True)))
        self.assertIn("paged_adamw_8bit", meta_terms.refusal(plan(optimizer="paged_adamw_8bit")))
        self.assertIn("offload_params", meta_terms.refusal(plan(offload=True)))
        with self.assertRaisesRegex(ValueError, "cannot count this plan: QLoRA"):
            meta_terms.rank_terms(plan(quantized=True), 0)


if __name__ == "__main__":
    unittest.main()
