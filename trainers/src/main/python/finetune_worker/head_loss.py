"""The LM head inside the loss, over chunks of rows: the ``[B, T, V]`` logits and their gradient never exist.

At a 151,936-token vocabulary a 4 x 2,048 micro batch has 1.2 G logits: 4.6 GiB in fp32, as much again for their
gradient, and HF's plain path also keeps a bf16 copy. Here the head's matmul runs one chunk of rows at a time
(``chunk_rows``: 64 Mi logits, the plan's ``Kernels.HEAD_CHUNK_LOGITS``), each chunk's logits made in fp32,
reduced to what the objective reads, and dropped.

* :func:`sft_loss` mirrors the JVM's ``HeadSftLoss`` (``train/token_scores.py``): the loss's weights are known in
  forward, so each chunk's gradient factor ``weights * (softmax - onehot)`` is turned into the head's input and
  weight gradients at once; backward only scales them. Three head matmuls per chunk, as the plain path.
* :func:`token_log_probs` is DPO's and GRPO's: each position's upstream gradient is known only in backward, so
  forward keeps the per-row log-sum-exp and backward recomputes each chunk's logits (one more head matmul, but no
  ``[N, V]`` array kept, where the JVM's ``HeadTokenLogProbs`` keeps the factor).

:func:`install` puts these inside the model's own forward: the output head's ``forward`` is replaced on the instance
(its parameter names, which checkpoints and PEFT files use, stay as they are), and a :func:`request` made just
before a forward makes the head return the loss or the log-probabilities instead of logits. Working inside the
model's forward keeps FSDP2's unsharding of the root's parameters, gradient checkpointing and PEFT's wrapping as
they are; without a request (generation, rollouts) the head computes logits as before.
"""

import contextlib
import types

import torch

from finetune_worker import vocab_parallel

# The plan's Kernels.HEAD_CHUNK_LOGITS: fp32 logits per chunk (256 MiB), the largest array the loss makes.
HEAD_CHUNK_LOGITS = 64 << 20

# Config keys of families whose logits are transformed after the head (Gemma 2/3: tanh soft-capping; Cohere:
# logit_scale; Granite: logits_scaling). Their head cannot be taken as a plain matmul: they keep the plain path.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def chunk_rows(vocab):
    """Rows of one chunk for this vocabulary, as ``Kernels.headChunkRows``."""
    return max(1, HEAD_CHUNK_LOGITS // int(vocab))


def _accumulation(x):
    """The dtype logits are reduced in: fp32 for 16-bit hidden states (as the plain path's ``logits.float()``),
    fp64 for fp64 (gradient checks)."""
    return torch.promote_types(x.dtype, torch.float32)


class _SftLoss(torch.autograd.Function):
    """``HeadSftLoss``: Σ weights * (-log softmax(hidden @ weightᵀ)[targets]), gradients taken chunk by chunk in
    forward while each chunk's logits hold the loss's factor."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, weights, rows):
        x = hidden.detach()
        w = weight.detach()
        n = x.shape[0]
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        acc = _accumulation(x)
        loss = torch.zeros((), dtype=acc, device=x.device)
        dx = torch.empty_like(x) if need_x else None
        dw = None
        for start in range(0, n, rows):
            end = min(start + rows, n)
            xc = x[start:end]
            tc = targets[start:end].unsqueeze(1)
            wc = weights[start:end].unsqueeze(1).to(acc)
            logits = torch.mm(xc, w.t()).to(acc)
            logits.sub_(logits.amax(dim=1, keepdim=True))
            target_logit = logits.gather(1, tc)
            exps = logits.exp_()
            total = exps.sum(dim=1, keepdim=True)
            loss = loss - ((target_logit - total.log()) * wc).sum()
            if need_x or need_w:
                # weights * (softmax - onehot), written over the chunk's exps
                factor = exps.mul_(wc / total)
                factor.scatter_add_(1, tc, -wc)
                factor = factor.to(x.dtype)
                if need_x:
                    torch.mm(factor, w, out=dx[start:end])
                if need_w:
                    part = torch.mm(factor.t(), xc)
                    # the first chunk's product is the sum so far: no zero-filled [V, D] to add it to
                    dw = part.to(acc) if dw is None else dw.add_(part)
            # this chunk's [rows, V] freed before the next one's exists: one chunk at a time, as the plan counts
            logits = exps = factor = part = None
        # made here, not inputs: kept on ctx, as the gradients they already are
        ctx.weight_dtype = weight.dtype
        ctx.dx, ctx.dw = dx, dw
        return loss

    @staticmethod
    def backward(ctx, grad):
        dx, dw = ctx.dx, ctx.dw
        gx = dx * grad.to(dx.dtype) if dx is not None else None
        gw = (dw * grad).to(ctx.weight_dtype) if dw is not None else None
        return gx, gw, None, None, None


class _TokenLogProbs(torch.autograd.Function):
    """log softmax(hidden @ weightᵀ)[targets] per row, and without a gradient the entropy of each row's softmax.
    Forward keeps the per-row log-sum-exp; backward recomputes each chunk's logits for its gradient."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, rows, entropy):
        x = hidden.detach()
        w = weight.detach()
        n = x.shape[0]
        acc = _accumulation(x)
        logp = torch.empty(n, dtype=acc, device=x.device)
        lse = torch.empty(n, dtype=acc, device=x.device)
        ent = torch.empty(n if entropy else 0, dtype=acc, device=x.device)
        for start in range(0, n, rows):
            end = min(start + rows, n)
            logits = torch.mm(x[start:end], w.t()).to(acc)
            row_lse = torch.logsumexp(logits, dim=1)
            lse[start:end] = row_lse
            logp[start:end] = logits.gather(1, targets[start:end].unsqueeze(1)).squeeze(1) - row_lse
            if entropy:
                # -Σ p log p = lse - Σ p * logits; the product in the probabilities' storage: two chunk-sized
                # arrays, not three
                probs = (logits - row_lse.unsqueeze(1)).exp_()
                ent[start:end] = row_lse - probs.mul_(logits).sum(dim=1)
                probs = None
            logits = None
        ctx.rows = rows
        ctx.weight_dtype = weight.dtype
        ctx.save_for_backward(x, w, targets, lse)
        ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx, grad, _entropy_grad):
        x, w, targets, lse = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        n = x.shape[0]
        dx = torch.empty_like(x) if need_x else None
        dw = None
        for start in range(0, n, ctx.rows):
            end = min(start + ctx.rows, n)
            xc = x[start:end]
            g = grad[start:end].to(lse.dtype).unsqueeze(1)
            logits = torch.mm(xc, w.t()).to(lse.dtype)
            # d logp / d logits = onehot - softmax; times the upstream gradient, in the chunk's own storage
            factor = logits.sub_(lse[start:end].unsqueeze(1)).exp_().mul_(-g)
            factor.scatter_add_(1, targets[start:end].unsqueeze(1), g)
            factor = factor.to(x.dtype)
            if need_x:
                torch.mm(factor, w, out=dx[start:end])
            if need_w:
                part = torch.mm(factor.t(), xc)
                dw = part.to(lse.dtype) if dw is None else dw.add_(part)
            logits = factor = part = None
        return dx, (dw.to(ctx.weight_dtype) if dw is not None else None), None, None, None


def _flat(hidden, targets):
    """``[B, T, D]`` and ``[B, T]`` (-100 where no loss is taken) as rows, a valid index and a 0/1 weight per row."""
    x = hidden.reshape(-1, hidden.shape[-1])
    flat = targets.reshape(-1)
    valid = flat != -100
    return x, flat.clamp(min=0), valid


def sft_loss(hidden, weight, targets, rows=None):
    """Σ over target positions of -log p(target): what ``F.cross_entropy(hidden @ weightᵀ, targets,
    reduction="sum", ignore_index=-100)`` computes, one chunk of rows at a time. ``hidden [B, T, D]`` (after the
    final norm), ``weight [V, D]``, ``targets [B, T]``."""
    x, flat, valid = _flat(hidden, targets)
    return _SftLoss.apply(x, weight, flat, valid.float(), rows or chunk_rows(weight.shape[0]))


def token_log_probs(hidden, weight, targets, rows=None, entropy=False):
    """``[B, T]`` log p(target) (exactly 0 where the target is -100), differentiable; with ``entropy`` also the
    ``[B, T]`` entropy of every position's prediction (no gradient), else None."""
    x, flat, valid = _flat(hidden, targets)
    logp, ent = _TokenLogProbs.apply(x, weight, flat, rows or chunk_rows(weight.shape[0]), entropy)
    shape = targets.shape
    logp = torch.where(valid, logp, torch.zeros_like(logp)).reshape(shape)
    return logp, (ent.reshape(shape) if entropy else None)


# -- inside the model's forward -----------------------------------------------------------------------------------

def why_not(model):
    """Why this model's output head cannot be taken inside the loss (None when it can): it must be a plain
    ``nn.Linear`` without bias (not a LoRA-wrapped or quantized head), and the family must not transform its
    logits after it."""
    head = model.get_output_embeddings()
    if head is None:
        return "the model has no output embeddings"
    if type(head) is not torch.nn.Linear:
        return "the output head is a %s, not a plain Linear (adapted or quantized)" % type(head).__name__
    if head.bias is not None:
        return "the output head has a bias"
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for key in _LOGIT_TRANSFORMS:
        value = getattr(config, key, None)
        if value not in (None, 1, 1.0):
            return "the family transforms its logits after the head (%s = %s)" % (key, value)
    return None


class _Request:
    def __init__(self, kind, targets, entropy):
        self.kind = kind
        self.targets = targets
        self.entropy = entropy
        self.entropy_value = None


def install(model):
    """Lets :func:`request` take the output head inside the loss; returns False (and changes nothing) where
    :func:`why_not` says it cannot."""
    if why_not(model) is not None:
        return False
    head = model.get_output_embeddings()
    if getattr(head, "_finetune_plain_forward", None) is not None:
        return True
    head._finetune_plain_forward = head.forward
    head._finetune_request = None

    def forward(self, hidden):
        request = self._finetune_request
        self._finetune_request = None  # one forward per request
        # a table kept in rows over the ranks (vocab_parallel): whole while gathered for sampling, else the SFT loss
        # works on the rows and the other heads gather it for their call
        table = getattr(self, "_finetune_vocab", None)
        weight = self.weight if table is None else table.whole
        if request is not None and request.kind == "sft":
            if weight is None:
                return vocab_parallel.sft_loss(hidden, self.weight, request.targets)
            return sft_loss(hidden, weight, request.targets)
        if weight is None:
            weight = vocab_parallel.full(self.weight)
        if request is None:
            return self._finetune_plain_forward(hidden) if table is None else torch.nn.functional.linear(hidden, weight)
        value, request.entropy_value = token_log_probs(hidden, weight, request.targets, entropy=request.entropy)
        return value

    head.forward = types.MethodType(forward, head)
    return True


@contextlib.contextmanager
def request(model, kind, targets, entropy=False):
    """Within the ``with``, the model's next forward returns as its ``logits``, instead of logits, the SFT loss
    (``kind="sft"``: :func:`sft_loss`) or the per-token log-probabilities (``"tokens"``: :func:`token_log_probs`)
    of ``targets``; with ``entropy`` the yielded object's ``entropy_value`` is set too. The value leaves the model
    as its output, so FSDP2 sees the backward that reaches the head's weight through it."""
    head = model.get_output_embeddings()
    wanted = _Request(kind, targets, entropy)
    head._finetune_request = wanted
    try:
        yield wanted
    finally:
        head._finetune_request = None
