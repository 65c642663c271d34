"""finetune_worker.head_loss, the LM head inside the loss, against the plain path (the whole logits, then
cross-entropy) and against the JVM's own implementation of the same idea (``train/token_scores.py``, compiled by
torch.jit from the very source the JVM trainer loads; FINETUNE_TOKEN_SCORES names the file).

The JVM's module is loaded as the JVM loads it: a TorchScript archive written around the source, with the graph
executor's optimizer off (``TorchScript.configureExecutor``).
"""

import io
import os
import unittest
import zipfile

import torch
import torch.nn.functional as F

from finetune_worker import head_loss

RELATIVE = 1e-5


def jvm_module(name):
    """``TorchScript.archive`` in Python: the module's pickled object, its source, no constants, version 3."""
    with open(os.environ["FINETUNE_TOKEN_SCORES"], encoding="utf-8") as f:
        source = f.read()
    training = b"training"
    data = (b"\x80\x02c__torch__\n" + name.encode() + b"\n)\x81}(X" + len(training).to_bytes(4, "little") + training
            + b"\x88ub.")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("module/data.pkl", data)
        archive.writestr("module/code/__torch__.py", source)
        archive.writestr("module/constants.pkl", b"\x80\x02).")
        archive.writestr("module/version", "3\n")
    buffer.seek(0)
    torch._C._set_graph_executor_optimize(False)
    return torch.jit.load(buffer)


def close(test, expected, actual, what):
    """``actual`` within RELATIVE of ``expected``, relative to the largest magnitude in ``expected``."""
    expected = expected.detach().double()
    actual = actual.detach().double()
    test.assertEqual(tuple(expected.shape), tuple(actual.shape), what)
    scale = max(1.0, float(expected.abs().max()))
    delta = float((expected - actual).abs().max())
    print("%-48s max |d| %.2e (scale %.2e)" % (what, delta, scale))
    test.assertLessEqual(delta, RELATIVE * scale, what)


def inputs(rows=3, columns=11, dim=24, vocab=97, seed=0, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, columns, dim, generator=generator).to(dtype).requires_grad_()
    weight = (0.3 * torch.randn(vocab, dim, generator=generator)).to(dtype).requires_grad_()
    targets = torch.randint(0, vocab, (rows, columns), generator=generator)
    targets[0, :4] = -100  # a prompt
    targets[-1, -3:] = -100  # padding
    return hidden, weight, targets


def plain_log_probs(hidden, weight, targets):
    logits = (hidden @ weight.t()).float()
    rows, columns, vocab = logits.shape
    return -F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), reduction="none",
                            ignore_index=-100).reshape(rows, columns)


class AgainstThePlainPath(unittest.TestCase):

    def test_sft_loss_and_its_gradients_equal_cross_entropy_over_the_whole_logits(self):
        for rows in (1, 5, 33, 1000):  # chunks of one row, uneven chunks, the whole batch in one
            hidden, weight, targets = inputs()
            expected = -plain_log_probs(hidden, weight, targets).sum()
            expected_grads = torch.autograd.grad(expected * 0.37, [hidden, weight])
            actual = head_loss.sft_loss(hidden, weight, targets, rows=rows)
            actual_grads = torch.autograd.grad(actual * 0.37, [hidden, weight])
            close(self, expected, actual, "sft loss, %d rows per chunk" % rows)
            close(self, expected_grads[0], actual_grads[0], "sft d hidden, %d rows per chunk" % rows)
            close(self, expected_grads[1], actual_grads[1], "sft d head weight, %d rows per chunk" % rows)

    def test_a_frozen_head_gets_no_gradient_and_the_input_still_does(self):
        hidden, weight, targets = inputs()
        weight = weight.detach()
        loss = head_loss.sft_loss(hidden, weight, targets, rows=4)
        (grad,) = torch.autograd.grad(loss, [hidden])
        expected = torch.autograd.grad(-plain_log_probs(hidden, weight, targets).sum(), [hidden])[0]
        close(self, expected, grad, "sft d hidden, frozen head")

    def test_token_log_probs_and_their_gradients_under_any_upstream_gradient(self):
        hidden, weight, targets = inputs(seed=1)
        upstream = torch.randn(targets.shape, generator=torch.Generator().manual_seed(5))
        expected = plain_log_probs(hidden, weight, targets)
        expected_grads = torch.autograd.grad((expected * upstream).sum(), [hidden, weight])
        actual, entropy = head_loss.token_log_probs(hidden, weight, targets, rows=7, entropy=True)
        actual_grads = torch.autograd.grad((actual * upstream).sum(), [hidden, weight])
        close(self, expected, actual, "token log-probs")
        self.assertTrue(bool((actual[targets == -100] == 0).all()), "exactly 0 where there is no target")
        close(self, expected_grads[0], actual_grads[0], "token log-probs d hidden")
        close(self, expected_grads[1], actual_grads[1], "token log-probs d head weight")
        log_softmax = (hidden @ weight.t()).detach().log_softmax(-1)
        close(self, -(log_softmax.exp() * log_softmax).sum(-1), entropy, "entropy")

    def test_gradients_pass_torchs_numerical_check_in_float64(self):
        hidden, weight, targets = inputs(rows=2, columns=5, dim=6, vocab=13, dtype=torch.float64)
        self.assertTrue(torch.autograd.gradcheck(
            lambda h, w: head_loss.sft_loss(h, w, targets, rows=3), (hidden, weight)))
        self.assertTrue(torch.autograd.gradcheck(
            lambda h, w: head_loss.token_log_probs(h, w, targets, rows=3)[0], (hidden, weight)))

    def test_bf16_inputs_are_reduced_in_float32_as_the_plain_paths_logits_float(self):
        hidden, weight, targets = inputs(dtype=torch.bfloat16)
        expected = -plain_log_probs(hidden, weight, targets).sum()
        actual = head_loss.sft_loss(hidden, weight, targets, rows=4)
        self.assertEqual(torch.float32, actual.dtype)
        # the same bf16 products, reduced in fp32: only the GEMM's blocking differs
        expected, value = float(expected.detach()), float(actual.detach())
        self.assertLessEqual(abs(expected - value), 1e-3 * abs(expected))
        (grad,) = torch.autograd.grad(actual, [hidden])
        self.assertEqual(torch.bfloat16, grad.dtype)

    def test_chunk_rows_follow_the_plans_256_mib_of_logits(self):
        self.assertEqual(441, head_loss.chunk_rows(151936))
        self.assertEqual(2097, head_loss.chunk_rows(32000))
        self.assertEqual(1, head_loss.chunk_rows(1 << 40))


class AgainstTheJvmsModule(unittest.TestCase):
    """The same loss written twice, in the JVM trainer's TorchScript and here: the two must agree."""

    def test_sft_loss_equals_the_jvms_head_sft_loss(self):
        jvm = jvm_module("HeadSftLoss")
        for rows in (3, 64):
            hidden, weight, targets = inputs(seed=2)
            weights = (targets != -100).float()
            # the JVM's targets are always a valid index; weight 0 where no loss is taken
            loss, _entropy, _correct = jvm(hidden, weight, targets.clamp(min=0), weights, torch.tensor(rows))
            expected_grads = torch.autograd.grad(loss * 1.3, [hidden, weight])
            actual = head_loss.sft_loss(hidden, weight, targets, rows=rows)
            actual_grads = torch.autograd.grad(actual * 1.3, [hidden, weight])
            close(self, loss, actual, "JVM HeadSftLoss loss, %d rows" % rows)
            close(self, expected_grads[0], actual_grads[0], "JVM HeadSftLoss d normed, %d rows" % rows)
            close(self, expected_grads[1], actual_grads[1], "JVM HeadSftLoss d weight, %d rows" % rows)

    def test_token_log_probs_equal_the_jvms_head_token_log_probs(self):
        jvm = jvm_module("HeadTokenLogProbs")
        hidden, weight, targets = inputs(seed=3)
        weights = (targets != -100).float()
        upstream = torch.randn(targets.shape, generator=torch.Generator().manual_seed(9))
        logp, entropy, _correct, _mean = jvm(hidden, weight, targets.clamp(min=0), weights)
        expected_grads = torch.autograd.grad((logp * upstream).sum(), [hidden, weight])
        actual, actual_entropy = head_loss.token_log_probs(hidden, weight, targets, rows=5, entropy=True)
        actual_grads = torch.autograd.grad((actual * upstream).sum(), [hidden, weight])
        close(self, logp, actual, "JVM HeadTokenLogProbs log-probs")
        close(self, entropy, actual_entropy, "JVM HeadTokenLogProbs entropy")
        close(self, expected_grads[0], actual_grads[0], "JVM HeadTokenLogProbs d normed")
        close(self, expected_grads[1], actual_grads[1], "JVM HeadTokenLogProbs d weight")


if __name__ == "__main__":
    unittest.main()
