"""Per-document causal attention for packed rows, from the segment ids the launcher wrote: no ``[B, 1, T, T]`` mask.

A packed row holds several examples; each must attend causally within itself only. The plain path says so with a
dense mask, which costs ``B * T * T`` elements and, worse, keeps the GPU's flash kernels out (SDPA given an
arbitrary mask falls back to kernels that compute every score). Here the documents are described once per micro
batch (:func:`describe`, from the CPU copy of the segments, so no layer waits on the GPU) and each layer runs one
of three kernels on them:

* ``flash_varlen``: flash-attention's variable-length kernel over the documents as one flat sequence
  (``cu_seqlens``); CUDA with the ``flash-attn`` package (requirements-gpu.txt) and 16-bit compute.
* ``flex``: PyTorch's FlexAttention with a block-sparse mask made from the segment ids: compiled on CUDA, it skips
  whole blocks across documents and above the diagonal.
* ``sdpa_documents``: PyTorch's SDPA with ``is_causal`` on each document in turn: everywhere, no extra package.

A row's padding tail (segment 0) is one more document: what padding computes is never read (no target there).

The model runs with the attention implementation :data:`NAME` (registered in transformers'
``AttentionInterface``; transformers builds no mask for a name it has no mask function for). A forward given
``finetune_packing=`` attends per document; one given a 4D mask instead (the GRPO rollouts' prompts and KV cache)
runs the implementation the model had before, with that mask.
"""

from dataclasses import dataclass

import torch

NAME = "finetune_packed"
KERNELS = ("flash_varlen", "flex", "sdpa_documents")


@dataclass(frozen=True)
class Packing:
    """One micro batch's documents, for every layer. ``cu_seqlens``: int32 starts of the documents in the
    flattened ``rows * columns`` tokens, then the end; ``spans``: (row, start, end) of each document."""

    kernel: str
    rows: int
    columns: int
    cu_seqlens: torch.Tensor
    max_length: int
    spans: tuple
    block_mask: object = None


def describe(documents, rows, columns, kernel, device, segments):
    """The :class:`Packing` of a micro batch for ``kernel``, its tensors on ``device``: ``documents`` are its
    (row, start, end) spans (:func:`data.documents`, computed on the CPU when the batch was loaded), ``segments``
    the ``[rows, columns]`` ids on ``device`` (FlexAttention's mask reads them)."""
    if kernel not in KERNELS:
        raise ValueError("unknown packed-attention kernel %r (one of %s)" % (kernel, ", ".join(KERNELS)))
    starts = [row * columns + s for row, s, _ in documents] + [rows * columns]
    cu = torch.tensor(starts, dtype=torch.int32)
    if device.type == "cuda":
        cu = cu.pin_memory()
    cu = cu.to(device, non_blocking=True)
    longest = max(e - s for _, s, e in documents)
    block_mask = _block_mask(segments, device) if kernel == "flex" else None
    return Packing(kernel, rows, columns, cu, longest, tuple(documents), block_mask)


def _block_mask(segments, device):
    from torch.nn.attention.flex_attention import create_block_mask

    def same_document_causal(b, h, q, k):
        return (segments[b, q] == segments[b, k]) & (q >= k)

    rows, columns = segments.shape
    return create_block_mask(same_document_causal, rows, None, columns, columns, device=device)


def choose(device, dtype, dropout=0.0):
    """The fastest kernel this device and environment run: flash-attention's varlen kernel where installed (CUDA,
    16-bit), else FlexAttention on CUDA (no dropout), else SDPA per document."""
    if device.type == "cuda":
        if dtype in (torch.float16, torch.bfloat16) and _has_flash_attn():
            return "flash_varlen"
        if dropout == 0.0 and _has_flex():
            return "flex"
    return "sdpa_documents"


def _has_flash_attn():
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return False
    return True


def _has_flex():
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def why_not(model):
    """Why per-document attention would change what this model computes (None when it would not): sliding windows,
    attention logit soft-capping and attention sinks need the family's own mask and kernel."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    layer_types = getattr(config, "layer_types", None) or ()
    if getattr(config, "use_sliding_window", False) or any("sliding" in str(t) for t in layer_types):
        return "the model uses sliding-window attention"
    if getattr(config, "sliding_window", None) and not hasattr(config, "use_sliding_window"):
        return "the model uses sliding-window attention (sliding_window = %s)" % config.sliding_window
    if getattr(config, "attn_logit_softcapping", None):
        return "the model soft-caps its attention logits"
    for module in model.modules():
        if hasattr(module, "sinks"):
            return "the model has attention sinks"
    return None


_flex_compiled = None


def _flex(device):
    """FlexAttention: compiled once per process on CUDA (only compiled does it skip masked blocks); eager on CPU,
    where it computes every score (the equivalence tests run it there)."""
    global _flex_compiled
    from torch.nn.attention.flex_attention import flex_attention

    if device.type != "cuda":
        return flex_attention
    if _flex_compiled is None:
        _flex_compiled = torch.compile(flex_attention)
    return _flex_compiled


# outside any compiled graph (torch_compile: true compiles whole decoder layers): the per-document loop and the
# documents' lengths would otherwise be baked into the graph and recompiled for every batch
@torch.compiler.disable
def _attend(packing, query, key, value, scaling, dropout):
    """``query [B, H, T, d]``, ``key``/``value [B, H_kv, T, d]`` -> ``[B, T, H, d]``, per document."""
    rows, heads, columns, dim = query.shape
    if packing.kernel == "flash_varlen":
        from flash_attn import flash_attn_varlen_func

        def flat(t):
            return t.transpose(1, 2).reshape(rows * columns, t.shape[1], dim)

        out = flash_attn_varlen_func(flat(query), flat(key), flat(value), packing.cu_seqlens, packing.cu_seqlens,
                                     packing.max_length, packing.max_length, dropout_p=dropout,
                                     softmax_scale=scaling, causal=True)
        return out.reshape(rows, columns, heads, dim)
    if packing.kernel == "flex":
        out = _flex(query.device)(query, key, value, block_mask=packing.block_mask, scale=scaling,
                                  enable_gqa=key.shape[1] != heads)
        return out.transpose(1, 2).contiguous()
    gqa = key.shape[1] != heads
    per_row = [[] for _ in range(rows)]
    for row, start, end in packing.spans:
        per_row[row].append(torch.nn.functional.scaled_dot_product_attention(
            query[row:row + 1, :, start:end], key[row:row + 1, :, start:end], value[row:row + 1, :, start:end],
            dropout_p=dropout, is_causal=True, scale=scaling, enable_gqa=gqa))
    out = torch.cat([torch.cat(parts, dim=2) for parts in per_row], dim=0)
    return out.transpose(1, 2).contiguous()


def _make(base):
    """The attention function: per document with a packing, else ``base`` (the implementation it replaced) with
    the caller's mask."""

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, finetune_packing=None,
                  **kwargs):
        if finetune_packing is None:
            return base(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
        return _attend(finetune_packing, query, key, value, scaling, dropout if module.training else 0.0), None

    return attention


def _base_function(model, name):
    """The function behind implementation ``name``: transformers' registry, or for ``eager`` the modeling file's
    own ``eager_attention_forward`` (each family has its own)."""
    import sys

    from transformers import AttentionInterface

    if name in AttentionInterface._global_mapping:
        return AttentionInterface._global_mapping[name]
    for module in model.modules():
        function = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
        if function is not None:
            return function
    raise ValueError("no attention function %r for %s" % (name, type(model).__name__))


def install(model):
    """Switches ``model`` to :data:`NAME`, keeping its current implementation (``sdpa``, ``eager``) for forwards
    that bring their own mask. Returns False (and changes nothing) where :func:`why_not` says it must not."""
    if why_not(model) is not None:
        return False
    from transformers import AttentionInterface

    base = model.config._attn_implementation
    if base.startswith(NAME):
        return True
    function = _base_function(model, base)
    # one name per family and base implementation: the eager functions differ between modeling files
    name = "%s_%s_%s" % (NAME, base, type(model).__name__)
    AttentionInterface.register(name, _make(function))
    model.set_attn_implementation(name)
    return True
