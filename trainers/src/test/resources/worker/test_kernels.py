"""The worker's fast path (finetune_worker.kernels) against its plain path on tiny random models of real families
(transformers' Llama and Qwen2), piece by piece and all together: the LM head inside the loss, per-document
attention without a dense mask, compiled decoder layers, checkpointed activations offloaded. Each must give the
plain path's loss and gradients within 1e-5 (relative to the largest value compared).

FlashAttention's varlen kernel and Liger's kernels need CUDA: here only their inputs are checked (gpu_check.py
runs them on a GPU). FlexAttention has no backward on CPU: its forward is checked.
"""

import copy
import dataclasses
import unittest
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from finetune_worker import head_loss, kernels, packed_attention
from finetune_worker import plan as plans
from finetune_worker.data import MicroBatch, documents

RELATIVE = 1e-5

# the plan's kernels section of the plain path: every fast-path piece off
PLAIN = plans.Kernels(head="plain", attention="dense", liger=(), activation_offloading=False, torch_compile=False,
                      torch_compile_backend="inductor", torch_compile_mode=None)


def pieces(**on):
    """The plan's kernels section with the given fast-path pieces."""
    return dataclasses.replace(PLAIN, **on)


def close(test, expected, actual, what):
    expected = expected.detach().double()
    actual = actual.detach().double()
    scale = max(1.0, float(expected.abs().max()))
    delta = float((expected - actual).abs().max())
    print("%-60s max |d| %.2e (scale %.2e)" % (what, delta, scale))
    test.assertLessEqual(delta, RELATIVE * scale, what)


def llama(vocab=211, tie=False, **extra):
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=vocab, tie_word_embeddings=tie, **extra)
    return LlamaForCausalLM(config).eval()


def qwen2(vocab=211, **extra):
    torch.manual_seed(0)
    config = Qwen2Config(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=vocab, tie_word_embeddings=True, **extra)
    return Qwen2ForCausalLM(config).eval()


def packed_batch(vocab, lengths_per_row, columns, seed=1):
    """Rows packed with examples of the given lengths, padded to ``columns``, as the launcher lays them out:
    positions restart per example, segments 1, 2, ... and 0 on padding, targets the next token within an example."""
    generator = torch.Generator().manual_seed(seed)
    rows = len(lengths_per_row)
    ids = torch.randint(3, vocab, (rows, columns), generator=generator)
    positions = torch.zeros(rows, columns, dtype=torch.long)
    segments = torch.zeros(rows, columns, dtype=torch.long)
    targets = torch.full((rows, columns), -100, dtype=torch.long)
    for row, lengths in enumerate(lengths_per_row):
        start = 0
        for number, length in enumerate(lengths, start=1):
            positions[row, start:start + length] = torch.arange(length)
            segments[row, start:start + length] = number
            targets[row, start:start + length - 1] = ids[row, start + 1:start + length]
            start += length
    weight = int((targets != -100).sum())
    return MicroBatch(ids, positions, segments, targets, weight, int((segments != 0).sum()), ("train", 0),
                      documents(segments))


BATCH = dict(lengths_per_row=[[9, 14, 5], [30], [3, 3, 12, 7]], columns=32)


def sft_and_gradients(model, fast, batch):
    model.zero_grad(set_to_none=True)
    loss = fast.sft_loss(model, batch)
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def compare(test, what, model, plain, fast, batch):
    expected, expected_grads = sft_and_gradients(model, plain, batch)
    actual, actual_grads = sft_and_gradients(model, fast, batch)
    close(test, expected, actual, what + ": loss")
    test.assertEqual(sorted(expected_grads), sorted(actual_grads), what + ": the same parameters get gradients")
    for name in expected_grads:
        close(test, expected_grads[name], actual_grads[name], what + ": d " + name)


class Pieces(unittest.TestCase):

    def test_the_head_inside_the_loss_gives_the_plain_loss_and_every_gradient(self):
        for make, name in ((llama, "llama"), (qwen2, "qwen2, tied head")):
            model = make()
            batch = packed_batch(model.config.vocab_size, **BATCH)
            plain = kernels.Kernels()
            fast = kernels.setup(model, pieces(head="chunked"), torch.device("cpu"), torch.float32)
            self.assertEqual("chunked", fast.head, fast.notes)
            compare(self, name + " head inside", model, plain, fast, batch)

    def test_per_document_attention_gives_the_dense_masks_loss_and_every_gradient(self):
        model = llama()
        batch = packed_batch(model.config.vocab_size, **BATCH)
        plain = kernels.Kernels()
        fast = kernels.setup(model, pieces(attention="sdpa_documents"), torch.device("cpu"), torch.float32)
        self.assertEqual("sdpa_documents", fast.attention)
        compare(self, "sdpa per document", model, plain, fast, batch)
        # the batch really is packed: attending across its documents changes the loss
        unpacked = packed_batch(model.config.vocab_size, lengths_per_row=[[28], [30], [25]], columns=32)
        same_tokens = MicroBatch(batch.ids, unpacked.positions, unpacked.segments, batch.targets, batch.weight,
                                 batch.tokens, batch.key, unpacked.documents)
        with torch.no_grad():
            self.assertGreater(abs(float(plain.sft_loss(model, same_tokens)) - float(plain.sft_loss(model, batch))),
                               1e-3)

    def test_flex_attentions_block_mask_gives_the_dense_masks_forward(self):
        model = llama()
        batch = packed_batch(model.config.vocab_size, **BATCH)
        fast = kernels.setup(model, pieces(attention="flex"), torch.device("cpu"), torch.float32)
        with torch.no_grad():
            expected = kernels.Kernels().token_log_probs(model, batch)[0]
            actual = fast.token_log_probs(model, batch)[0]
        close(self, expected, actual, "flex attention forward (CPU has no flex backward)")

    def test_the_varlen_kernels_documents_tile_every_row(self):
        batch = packed_batch(211, **BATCH)
        packing = packed_attention.describe(batch.documents, 3, 32, "flash_varlen", torch.device("cpu"),
                                            batch.segments)
        starts = packing.cu_seqlens.tolist()
        self.assertEqual(0, starts[0])
        self.assertEqual(3 * 32, starts[-1])
        # 3 examples + padding, 1 example + padding, 4 examples + padding
        self.assertEqual(4 + 2 + 5, len(starts) - 1)
        flat = batch.segments.reshape(-1)
        for begin, end in zip(starts, starts[1:]):
            self.assertEqual(1, len(set(flat[begin:end].tolist())), "one segment per document")
        self.assertEqual(30, packing.max_length)

    def test_compiled_layers_give_the_plain_loss_and_every_gradient(self):
        model = llama()
        batch = packed_batch(model.config.vocab_size, **BATCH)
        plain = kernels.Kernels()
        expected, expected_grads = sft_and_gradients(model, plain, batch)
        # aot_eager: dynamo's capture and AOT autograd, as inductor gets them, without a C++ build on 2 cores
        fast = kernels.setup(model, pieces(torch_compile=True, torch_compile_backend="aot_eager"),
                             torch.device("cpu"), torch.float32)
        self.assertTrue(fast.compiled)
        names = [n for n, _ in model.named_parameters()]
        actual, actual_grads = sft_and_gradients(model, fast, batch)
        self.assertEqual(names, [n for n, _ in model.named_parameters()], "compiling renames no parameter")
        close(self, expected, actual, "compiled layers: loss")
        for name in expected_grads:
            close(self, expected_grads[name], actual_grads[name], "compiled layers: d " + name)

    def test_checkpointed_activations_offloaded_give_the_plain_gradients(self):
        model = llama()
        batch = packed_batch(model.config.vocab_size, **BATCH)
        expected, expected_grads = sft_and_gradients(model, kernels.Kernels(), batch)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        fast = kernels.setup(model, pieces(activation_offloading=True), torch.device("cpu"), torch.float32,
                             gradient_checkpointing=True)
        self.assertTrue(fast.offload)
        actual, actual_grads = sft_and_gradients(model, fast, batch)
        close(self, expected, actual, "checkpointing + offload: loss")
        for name in expected_grads:
            close(self, expected_grads[name], actual_grads[name], "checkpointing + offload: d " + name)

    def test_everything_at_once_with_lora_for_sft_and_token_log_probs(self):
        from peft import LoraConfig, get_peft_model

        base = llama()
        plain_model = get_peft_model(copy.deepcopy(base), LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False))
        fast_model = copy.deepcopy(base)
        fast = kernels.setup(fast_model, pieces(head="chunked", attention="auto"), torch.device("cpu"), torch.float32)
        fast_model = get_peft_model(fast_model, LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False))
        fast_model.load_state_dict(plain_model.state_dict())
        self.assertEqual(("chunked", "sdpa_documents"), (fast.head, fast.attention))
        batch = packed_batch(base.config.vocab_size, **BATCH)
        plain = kernels.Kernels()
        expected, expected_grads = sft_and_gradients(plain_model, plain, batch)
        actual, actual_grads = sft_and_gradients(fast_model, fast, batch)
        close(self, expected, actual, "lora, all pieces: sft loss")
        self.assertEqual(sorted(expected_grads), sorted(actual_grads))
        for name in expected_grads:
            close(self, expected_grads[name], actual_grads[name], "lora, all pieces: d " + name)
        # DPO's and GRPO's per-token log-probabilities, with an arbitrary upstream gradient
        upstream = torch.randn(batch.targets.shape, generator=torch.Generator().manual_seed(4))
        results = []
        for model, path in ((plain_model, plain), (fast_model, fast)):
            model.zero_grad(set_to_none=True)
            logp, entropy = path.token_log_probs(model, batch, entropy=True)
            (logp * upstream).sum().backward()
            results.append((logp, entropy, {n: p.grad.clone() for n, p in model.named_parameters()
                                            if p.grad is not None}))
        real = batch.segments != 0
        close(self, results[0][0], results[1][0], "lora, all pieces: token log-probs")
        close(self, results[0][1][real], results[1][1][real], "lora, all pieces: entropy")
        for name in results[0][2]:
            close(self, results[0][2][name], results[1][2][name], "lora, all pieces: d logp . u / d " + name)
        # with the adapter switched off (DPO's and GRPO's reference) the head and attention still apply
        with torch.no_grad(), plain_model.disable_adapter(), fast_model.disable_adapter():
            close(self, plain.token_log_probs(plain_model, batch)[0], fast.token_log_probs(fast_model, batch)[0],
                  "adapter disabled: token log-probs")

    def test_without_a_request_the_head_computes_logits_and_a_4d_mask_still_applies(self):
        model = llama()
        batch = packed_batch(model.config.vocab_size, **BATCH)
        from finetune_worker.data import attention_mask

        mask = attention_mask(batch.segments, torch.float32)
        with torch.no_grad():
            expected = model(input_ids=batch.ids, position_ids=batch.positions, attention_mask=mask).logits
            kernels.setup(model, pieces(head="chunked", attention="auto"), torch.device("cpu"), torch.float32)
            actual = model(input_ids=batch.ids, position_ids=batch.positions, attention_mask=mask).logits
        close(self, expected, actual, "rollout forward (logits, 4D mask) unchanged")


class Refusals(unittest.TestCase):
    """What cannot take a piece keeps the plain path for it, and says why."""

    def test_a_lora_adapted_head_keeps_the_full_logits(self):
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(llama(), LoraConfig(r=2, target_modules=["lm_head"]))
        fast = kernels.setup(model, pieces(head="chunked"), torch.device("cpu"), torch.float32)
        self.assertEqual("plain", fast.head)
        self.assertIn("not a plain Linear", fast.notes[0])

    def test_sliding_window_attention_keeps_the_dense_mask(self):
        model = qwen2(use_sliding_window=True, sliding_window=8, max_window_layers=0)
        fast = kernels.setup(model, pieces(attention="auto"), torch.device("cpu"), torch.float32)
        self.assertEqual("dense", fast.attention)
        self.assertIn("sliding-window", fast.notes[0])

    def test_liger_on_cpu_says_torchs_kernels_run(self):
        fast = kernels.setup(llama(), pieces(liger=("rms_norm",)), torch.device("cpu"), torch.float32)
        self.assertEqual((), fast.liger)
        self.assertIn("Liger", fast.notes[0])


class LargestTensor(TorchDispatchMode):
    """The largest tensor any op makes while active, in elements."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
        return out


class LiveChunks(TorchDispatchMode):
    """How many chunk-of-logits arrays (2-D, ``vocab`` columns, not the head's own storage) are alive at once, at
    most: each op's outputs are watched through weak references until the loss lets them go."""

    def __init__(self, vocab, head):
        super().__init__()
        self.vocab = vocab
        self.head = head.untyped_storage().data_ptr()
        self.watched = []
        self.most = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            if (isinstance(tensor, torch.Tensor) and tensor.dim() == 2 and tensor.shape[1] == self.vocab
                    and tensor.untyped_storage().data_ptr() != self.head):
                self.watched.append(weakref.ref(tensor))
        alive = {t.untyped_storage().data_ptr() for t in (r() for r in self.watched) if t is not None}
        self.most = max(self.most, len(alive))
        return out


class Memory(unittest.TestCase):

    def test_the_head_inside_the_loss_holds_one_chunk_of_logits_at_a_time(self):
        """The plan's logits term counts one chunk (Kernels.HEAD_CHUNK_LOGITS): the chunk before is freed before
        the next one exists, in the SFT loss and in DPO's/GRPO's log-probabilities; GRPO's entropy adds the
        probabilities beside the chunk, computed in place from there."""
        torch.manual_seed(0)
        vocab, width = 64, 16
        hidden = torch.randn(1, 10, width, requires_grad=True)
        head = torch.randn(vocab, width, requires_grad=True)
        targets = torch.randint(0, vocab, (1, 10))
        sft = LiveChunks(vocab, head)
        with sft:
            head_loss.sft_loss(hidden, head, targets, rows=4).backward()
        tokens, tokens_backward = LiveChunks(vocab, head), LiveChunks(vocab, head)
        with tokens:
            logp, ent = head_loss.token_log_probs(hidden, head, targets, rows=4, entropy=True)
        with tokens_backward:
            logp.sum().backward()
        print("chunks of logits alive at once: SFT %d, log-probabilities with entropy %d, their backward %d"
              % (sft.most, tokens.most, tokens_backward.most))
        self.assertEqual(1, sft.most)
        self.assertEqual(2, tokens.most)
        self.assertEqual(1, tokens_backward.most)


    def test_at_qwen25s_vocabulary_no_full_logits_array_exists_in_the_step(self):
        """Qwen2.5's 151,936-token vocabulary (tied head) on a narrow model, 2 x 512 positions: the plain path
        makes [B, T, V] logits (155.6 M values), the chunked head at most one 441-row chunk of them."""
        model = qwen2(vocab=151936)
        batch = packed_batch(151936, lengths_per_row=[[200, 312], [512]], columns=512)
        full = 2 * 512 * 151936
        plain = LargestTensor()
        with plain:
            kernels.Kernels().sft_loss(model, batch).backward()
        fast_path = kernels.setup(model, pieces(head="chunked", attention="sdpa_documents"), torch.device("cpu"),
                                  torch.float32)
        model.zero_grad(set_to_none=True)
        fast = LargestTensor()
        with fast:
            fast_path.sft_loss(model, batch).backward()
        print("largest tensor in a step: plain %d, chunked %d values (full logits %d)"
              % (plain.largest, fast.largest, full))
        self.assertGreaterEqual(plain.largest, full, "the probe sees the plain path's logits")
        self.assertLessEqual(fast.largest, 441 * 151936)


if __name__ == "__main__":
    unittest.main()
