"""Read reference weights from ``.safetensors`` files or Hugging Face folders, never pickle.

The header is checked before safetensors parses the file, so a truncated or corrupt file
fails with a message that says what is wrong with it rather than a Rust deserialiser error.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path, PurePath, PureWindowsPath
from typing import Any

from flops_fit.errors import WeightFileError

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
SINGLE_FILE = "model.safetensors"
SHARD_INDEX = "model.safetensors.index.json"
_MAX_HEADER = 100_000_000  # safetensors' own limit
# how torch.save's files begin (a zip archive; before torch 1.6, a pickle of protocol 2-5), told apart
# from a safetensors header only when that header is impossible
_PICKLE_MAGIC = (b"PK\x03\x04", b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
_NEVER_UNPICKLED = ("flops-fit never unpickles (it can execute code). Convert it once, in an environment you trust, "
                    "with safetensors.torch.save_file(state_dict, 'model.safetensors')")


@dataclass
class Weights:
    """Tensors read from disk plus the folder's ``config.json`` (empty for a bare file)."""

    tensors: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
    source: str = ""


def check_safetensors_file(path: str | Path) -> dict[str, Any]:
    """Validate a file's header and size; return the parsed header (tensor name -> info)."""
    path = Path(path)
    size = path.stat().st_size
    fix = "re-download or re-save it (e.g. safetensors.torch.save_file / save_pretrained)"
    if size < 8:
        raise WeightFileError(f"{path} is not a safetensors file: it has {size} bytes, fewer than the 8-byte header length; {fix}")
    with path.open("rb") as f:
        start = f.read(8)
        (header_len,) = struct.unpack("<Q", start)
        if header_len > _MAX_HEADER or 8 + header_len > size:
            if start.startswith(_PICKLE_MAGIC):
                raise WeightFileError(f"{path} is a pickle checkpoint (torch.save's format) under a safetensors name; "
                                      f"{_NEVER_UNPICKLED}")
            raise WeightFileError(
                f"{path} is truncated or corrupt: its header claims {header_len} bytes but the file has "
                f"{size - 8} after the length field; {fix}"
            )
        raw = f.read(header_len)
    try:
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
    except ValueError as exc:
        raise WeightFileError(f"{path} is corrupt: its header is not valid safetensors JSON ({exc}); {fix}") from None
    data_len = size - 8 - header_len
    ends = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            raise WeightFileError(f"{path} is corrupt: its header's entry for tensor {name!r} has no [start, end] "
                                  f"data_offsets; {fix}")
        ends.append(offsets[1])
    needed = max(ends, default=0)
    if needed > data_len:
        raise WeightFileError(
            f"{path} is truncated: its tensors need {needed} bytes of data but the file holds {data_len}; {fix}"
        )
    return header


def read_safetensors(path: str | Path) -> dict[str, Any]:
    """Read every tensor of one ``.safetensors`` file (on CPU)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = _existing(path)
    if path.suffix in PICKLE_SUFFIXES:
        raise WeightFileError(f"{path} is a pickle checkpoint; {_NEVER_UNPICKLED}")
    check_safetensors_file(path)
    try:
        return load_file(str(path), device="cpu")
    except SafetensorError as exc:
        raise WeightFileError(f"{path} could not be read as safetensors: {exc}; re-download or re-save it") from None


def load_weights(path: str | Path) -> Weights:
    """Read a ``.safetensors`` file, or a folder holding ``config.json`` and
    ``model.safetensors`` (or a sharded ``model.safetensors.index.json``)."""
    path = _existing(path)
    if not path.is_dir():
        return Weights(read_safetensors(path), {}, str(path))
    config = _read_json(path / "config.json") if (path / "config.json").exists() else {}
    if (path / SINGLE_FILE).exists():
        return Weights(read_safetensors(path / SINGLE_FILE), config, str(path))
    if (path / SHARD_INDEX).exists():
        weight_map = _read_json(path / SHARD_INDEX).get("weight_map")
        if not isinstance(weight_map, dict):
            raise WeightFileError(f"{path / SHARD_INDEX} has no 'weight_map' object; re-save the model")
        for tensor, shard in weight_map.items():
            _check_shard_name(path / SHARD_INDEX, tensor, shard)
        tensors: dict[str, Any] = {}
        elsewhere: list[str] = []  # a tensor in a shard the index does not name for it
        for shard in sorted(set(weight_map.values())):
            if not (path / shard).exists():
                raise WeightFileError(f"{path / SHARD_INDEX} names shard {shard!r}, which is not in {path}; "
                                      "copy the whole folder again or re-save the model")
            for name, tensor in read_safetensors(path / shard).items():
                if weight_map.get(name) == shard:
                    tensors[name] = tensor
                else:
                    elsewhere.append(f"{name} in {shard} (index: {weight_map.get(name) or 'not listed'})")
        if elsewhere:  # read anyway, a second copy of a tensor would replace the first by shard order
            raise WeightFileError(f"{path}: the shards hold tensors where the index does not put them, so which "
                                  f"copy is the model's is unknown: {', '.join(elsewhere[:10])}"
                                  f"{f' and {len(elsewhere) - 10} more' if len(elsewhere) > 10 else ''}; "
                                  "re-save the model (save_pretrained) or fix the index")
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise WeightFileError(f"{path}: the shards lack tensors listed in the index: {missing[:10]}")
        return Weights(tensors, config, str(path))
    found = sorted(p.name for p in path.iterdir())
    pickles = [n for n in found if n.endswith(PICKLE_SUFFIXES)]
    hint = (
        f" It holds pickle checkpoints ({', '.join(pickles)}), which flops-fit never loads; convert them to safetensors."
        if pickles else ""
    )
    raise WeightFileError(f"{path} has neither {SINGLE_FILE} nor {SHARD_INDEX} (found: {found}).{hint}")


def _check_shard_name(index: Path, tensor: str, shard: Any) -> None:
    """A shard the index names is a file beside it: a path that leaves the folder (``..``, an
    absolute path) would read another model's (or any) file as this one's weights."""
    parts = PurePath(shard).parts if isinstance(shard, str) else ()
    if not parts or PurePath(shard).is_absolute() or PureWindowsPath(shard).is_absolute() or ".." in parts:
        raise WeightFileError(f"{index}: weight_map entry {tensor!r} names shard {shard!r}, which is not a file name "
                              "in the model's folder; re-save the model (save_pretrained) or fix the index")


def _existing(path: str | Path) -> Path:
    path = Path(path)
    if not path.exists():
        raise WeightFileError(f"no such weight file or folder: {path}")
    return path


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise WeightFileError(f"{path} is not readable JSON ({exc}); re-save the model") from None
    if not isinstance(data, dict):
        raise WeightFileError(f"{path} must hold a JSON object")
    return data
