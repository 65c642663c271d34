"""Reading a ``torch.distributed.checkpoint`` folder without running anything its files say.

DCP's own reader unpickles ``.metadata`` with ``pickle.load``, and its default planner loads non-tensor entries
(the optimizer's ``param_groups`` values) with ``torch.load(weights_only=False)``: either runs any code a crafted
file names, and a checkpoint folder is a file anyone may hand over (a shared run, a copied disk). Here the metadata
goes through an unpickler that builds only the classes DCP's metadata is made of, and the byte entries through
``torch.load(weights_only=True)``. Everything else (the shards' tensors) DCP already reads with ``weights_only=True``.
"""

import io
import pickle

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

# What DCP's metadata pickles hold (torch 2.13; read off real checkpoints): its dataclasses, torch.Size, dtypes,
# layouts and memory formats, and the checkpoint's path. Nothing here runs code beyond building these values.
_ALLOWED = {
    ("torch.distributed.checkpoint.metadata", name) for name in (
        "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata", "TensorProperties",
        "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("collections", "OrderedDict"),
}


class UnsafeCheckpoint(ValueError):
    """A checkpoint file that names something a checkpoint never holds: it is not loaded."""


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), (torch.dtype, torch.layout,
                                                                         torch.memory_format)):
            return getattr(torch, name)
        raise UnsafeCheckpoint("dcp/.metadata names %s.%s, which DCP metadata never holds: not loaded"
                               % (module, name))


def read_metadata(stream):
    """The metadata pickled in ``stream``, built from allowed classes only."""
    try:
        metadata = _MetadataUnpickler(stream).load()
    except UnsafeCheckpoint:
        raise
    except Exception as error:  # noqa: BLE001 - any malformed pickle is one kind of problem here
        raise UnsafeCheckpoint("dcp/.metadata is not readable DCP metadata (%s: %s)"
                               % (type(error).__name__, error)) from None
    if not isinstance(metadata, Metadata):
        raise UnsafeCheckpoint("dcp/.metadata holds a %s, not DCP metadata" % type(metadata).__name__)
    return metadata


class SafeReader(FileSystemReader):
    """``FileSystemReader`` with the metadata read by :func:`read_metadata`."""

    def read_metadata(self, *args, **kwargs):
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as stream:
            metadata = read_metadata(stream)
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class SafePlanner(DefaultLoadPlanner):
    """``DefaultLoadPlanner`` whose byte entries (plain values: numbers, tuples, names) load with
    ``weights_only=True``."""

    def load_bytes(self, read_item, value):
        loaded = torch.load(value, weights_only=True)
        if self.flatten_state_dict:
            from torch.distributed.checkpoint._traverse import set_element  # noqa: PLC0415 - DCP's own helper

            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
        else:
            self.state_dict[read_item.dest_index.fqn] = loaded


def check(folder):
    """The problem with ``folder``'s DCP metadata, or None: what the launcher asks before a resume starts ranks."""
    import os

    try:
        with open(os.path.join(folder, "dcp", ".metadata"), "rb") as f:
            read_metadata(io.BufferedReader(f))
    except (UnsafeCheckpoint, OSError) as error:
        return str(error)
    return None
