"""The micro batches the Java side tokenized, packed and wrote (``finetune preprocess``), and their order.

A batches file holds, per split (``train``, ``eval``), every micro batch of one epoch laid out for the forward pass
exactly as the JVM trainer lays it out: ids, positions (restarting at every packed example), segments (1, 2, ... per
packed example, 0 on padding), and the next-token targets with a 0/1 mask, all flattened one batch after another.

A rank reads only the micro batches it trains on, when it trains on them: the file's layout (a safetensors header)
gives each batch's byte range, which is read with ``pread``. Nothing of the file stays in the process (a memory map
would leave every page it touched counted in the rank's resident set, which grows with an epoch's data), and no rank
ever holds the whole tokenized dataset, let alone widened to int64.
"""

import json
import os
import struct
from dataclasses import dataclass

import torch

from finetune_worker import families

FORMAT = "finetune-batches-1"
_DTYPES = {"I32": torch.int32, "I64": torch.int64, "U8": torch.uint8, "F32": torch.float32, "F64": torch.float64,
           "I16": torch.int16, "I8": torch.int8, "BOOL": torch.bool}
_COLUMNS = ("ids", "positions", "segments", "targets", "mask")


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


class TensorsFile:
    """A safetensors file read by byte range: its header once, then only the elements asked for."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        self.metadata = header.pop("__metadata__", {}) or {}
        self.tensors = header
        self.base = 8 + length

    def has(self, name):
        return name in self.tensors

    def shape(self, name):
        return tuple(self.tensors[name]["shape"])

    def read(self, name, start=0, count=None):
        """Elements ``[start, start + count)`` of tensor ``name`` flattened (all of it by default)."""
        info = self.tensors[name]
        dtype = _DTYPES[info["dtype"]]
        size = torch.empty(0, dtype=dtype).element_size()
        first, last = info["data_offsets"]
        total = (last - first) // size
        count = total - start if count is None else count
        if start < 0 or count < 0 or start + count > total:
            raise ValueError("%s: elements %d..%d of %s are outside its %d" % (self.path, start, start + count, name,
                                                                              total))
        buffer = bytearray(count * size)
        view = memoryview(buffer)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            done, offset = 0, self.base + first + start * size
            while done < len(buffer):
                chunk = os.preadv(fd, [view[done:]], offset + done)
                if chunk <= 0:
                    raise ValueError("%s ends inside tensor %s" % (self.path, name))
                done += chunk
        finally:
            os.close(fd)
        return torch.frombuffer(buffer, dtype=dtype) if buffer else torch.empty(0, dtype=dtype)


class Batches:
    """The micro batches of one split, read when indexed; a slice is another view (nothing is read for it)."""

    def __init__(self, file, split, indices=None):
        self.file = file
        self.split = split
        shapes = file.read(split + ".shapes").reshape(-1, 2).tolist() if file.has(split + ".shapes") else []
        self.shapes = shapes
        self.weights = file.read(split + ".weights").tolist() if file.has(split + ".weights") else []
        self.offsets = [0]
        for rows, length in shapes:
            self.offsets.append(self.offsets[-1] + rows * length)
        self.indices = list(range(len(shapes))) if indices is None else list(indices)
        self._tokens = {}

    def _view(self, indices):
        view = Batches.__new__(Batches)
        view.__dict__.update(self.__dict__)
        view.indices = list(indices)
        return view

    def __len__(self):
        return len(self.indices)

    def __iter__(self):
        for i in range(len(self.indices)):
            yield self[i]

    def __add__(self, other):
        return Chain([self, other])

    def __getitem__(self, item):
        if isinstance(item, slice):
            return self._view(self.indices[item])
        index = self.indices[item]
        rows, length = self.shapes[index]
        start, cells = self.offsets[index], rows * length
        part = {name: self.file.read("%s.%s" % (self.split, name), start, cells).reshape(rows, length).long()
                for name in _COLUMNS}
        targets = torch.where(part["mask"] != 0, part["targets"], torch.full_like(part["targets"], -100))
        tokens = int((part["segments"] != 0).sum())
        self._tokens[index] = tokens
        return MicroBatch(part["ids"], part["positions"], part["segments"], targets, int(self.weights[index]), tokens,
                          (self.split, index), documents(part["segments"]))

    def tokens(self, item):
        """Real tokens of batch ``item``, reading only its segments."""
        index = self.indices[item]
        if index not in self._tokens:
            rows, length = self.shapes[index]
            segments = self.file.read(self.split + ".segments", self.offsets[index], rows * length)
            self._tokens[index] = int((segments != 0).sum())
        return self._tokens[index]


class Chain:
    """Several splits one after another (DPO scores the reference of train and eval batches in one pass)."""

    def __init__(self, parts):
        self.parts = parts

    def __len__(self):
        return sum(len(p) for p in self.parts)

    def __getitem__(self, item):
        for part in self.parts:
            if item < len(part):
                return part[item]
            item -= len(part)
        raise IndexError(item)

    def __iter__(self):
        for part in self.parts:
            yield from part


def load_batches(path):
    file = TensorsFile(path)
    return Batches(file, "train"), Batches(file, "eval")


def load_metadata(path):
    """The batches file's string metadata (GRPO: ``eos_id`` and ``pad_id`` of the tokenizer the launcher used)."""
    return TensorsFile(path).metadata


def load_schedule(path):
    """``order``: the micro batch at every data position; ``lr``: the learning rate of every optimizer step."""
    file = TensorsFile(path)
    return file.read("order").tolist(), file.read("lr").double().tolist()


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
