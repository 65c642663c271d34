"""The micro batches the Java side tokenized, packed and wrote (``finetune preprocess``), and their order.

A batches file holds, per split (``train``, ``eval``), every micro batch of one epoch laid out for the forward pass
exactly as the JVM trainer lays it out: ids, positions (restarting at every packed example), segments (1, 2, ... per
packed example, 0 on padding), and the next-token targets with a 0/1 mask, all flattened one batch after another.
"""

from dataclasses import dataclass

import torch
from safetensors.torch import load_file

from finetune_worker import families

FORMAT = "finetune-batches-1"


@dataclass(frozen=True)
class MicroBatch:
    ids: torch.Tensor  # [rows, columns] int64
    positions: torch.Tensor
    segments: torch.Tensor
    targets: torch.Tensor  # token predicted at each position; -100 where no loss is taken
    weight: int  # loss units: target tokens (SFT) or pairs (DPO)
    tokens: int  # real (non-padding) tokens
    key: tuple  # (split, index): the same batch on any device
    # (row, start, end) of every packed example and padding run: per-document attention's input, taken from the
    # CPU copy of the segments so that no layer waits for the device to say where documents end
    documents: tuple = ()

    def to(self, device):
        # from pinned memory (pinned()) the copy is queued behind the running step instead of waiting for it
        return MicroBatch(self.ids.to(device, non_blocking=True), self.positions.to(device, non_blocking=True),
                          self.segments.to(device, non_blocking=True), self.targets.to(device, non_blocking=True),
                          self.weight, self.tokens, self.key, self.documents)

    def pinned(self):
        """This batch in page-locked host memory, which a CUDA device copies from without a synchronisation."""
        return MicroBatch(self.ids.pin_memory(), self.positions.pin_memory(), self.segments.pin_memory(),
                          self.targets.pin_memory(), self.weight, self.tokens, self.key, self.documents)


def load_split(tensors, split):
    shapes = tensors[split + ".shapes"].tolist()
    weights = tensors[split + ".weights"].tolist()
    columns = {name: tensors["%s.%s" % (split, name)] for name in ("ids", "positions", "segments", "targets", "mask")}
    batches = []
    offset = 0
    for index, ((rows, length), weight) in enumerate(zip(shapes, weights)):
        cells = rows * length
        part = {name: column[offset:offset + cells].reshape(rows, length).long() for name, column in columns.items()}
        offset += cells
        targets = torch.where(part["mask"] != 0, part["targets"], torch.full_like(part["targets"], -100))
        batches.append(MicroBatch(part["ids"], part["positions"], part["segments"], targets, int(weight),
                                  int((part["segments"] != 0).sum()), (split, index), documents(part["segments"])))
    return batches


def load_batches(path):
    tensors = load_file(path)
    return load_split(tensors, "train"), load_split(tensors, "eval")


def load_metadata(path):
    """The batches file's string metadata (GRPO: ``eos_id`` and ``pad_id`` of the tokenizer the launcher used)."""
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        return f.metadata() or {}


def load_schedule(path):
    """``order``: the micro batch at every data position; ``lr``: the learning rate of every optimizer step."""
    tensors = load_file(path)
    return tensors["order"].tolist(), tensors["lr"].double().tolist()


def documents(segments):
    """(row, start, end) of each maximal run of one segment id, row by row: the packed examples of a batch, and
    each row's padding tail as one more (it attends within itself; nothing reads what it computes)."""
    out = []
    cpu = segments.detach().to("cpu")
    rows, columns = cpu.shape
    for row in range(rows):
        values = cpu[row]
        change = (torch.nonzero(values[1:] != values[:-1]).flatten() + 1).tolist()
        out.extend((row, s, e) for s, e in zip([0] + change, change + [columns]))
    return tuple(out)


def attention_mask(segments, dtype, config=None):
    """Additive ``[rows, 1, T, T]`` mask: causal, within a packed example only.

    Padding (segment 0) attends to itself alone, so its rows stay finite; no loss is taken there. With the model's
    ``config``, its sliding windows are in the mask too (a mask per layer type where the family has several:
    :func:`families.attention_masks`).
    """
    length = segments.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=segments.device).tril()
    same = segments.unsqueeze(2) == segments.unsqueeze(1)
    real = (segments != 0).unsqueeze(2)
    allowed = causal.unsqueeze(0) & same & real
    allowed |= torch.eye(length, dtype=torch.bool, device=segments.device).unsqueeze(0)

    def additive(pairs):
        mask = torch.zeros(pairs.shape, dtype=dtype, device=segments.device)
        mask.masked_fill_(~pairs, torch.finfo(dtype).min)
        return mask.unsqueeze(1)

    if config is None:
        return additive(allowed)
    return families.attention_masks(config, allowed, additive)


def model_attention_mask(segments, config):
    """:func:`attention_mask` as the model takes it on ``segments``' device: additive float32 on CPU, boolean on GPU,
    where SDPA's fused kernels take a boolean mask whatever the compute dtype (bf16 under FSDP's policy)."""
    mask = attention_mask(segments, torch.float32, config)
    if segments.device.type == "cpu":
        return mask
    return {k: m == 0 for k, m in mask.items()} if isinstance(mask, dict) else mask == 0


def rank_share(items, rank, world):
    """This rank's share of a window: every world-th item from its rank. Every rank gets the same count when the
    window is a multiple of the world size (training windows always are: micro x ranks x accumulation)."""
    return items[rank::world]
