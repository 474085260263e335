"""Byte-level and pre-tokenised text datasets for causal language models.

Every text dataset is a ``TokenWindows``: a flat token stream cut into non-overlapping
windows of ``seq_len`` tokens; ``get_batch`` gathers a batch with one vectorised index,
so loading is never the bottleneck. Splits are decided before windowing (by file, or by
position in one stream), so held-out windows never share a byte with training ones.
"""

from __future__ import annotations

import glob
import hashlib
import os
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

from flops_fit.errors import DataError

BYTE_VOCAB = 256
SPLITS = ("train", "validation")


class TokenWindows:
    """Non-overlapping ``seq_len`` windows of a 1-D token array (numpy array or memmap)."""

    def __init__(self, tokens: np.ndarray, seq_len: int, name: str = "text") -> None:
        if seq_len < 2:
            raise DataError(f"{name}: seq_len must be at least 2, got {seq_len}")
        if len(tokens) < seq_len:
            raise DataError(f"{name}: {len(tokens)} tokens cannot fill one window of seq_len={seq_len}")
        self.tokens, self.seq_len = tokens, seq_len
        self._offsets = np.arange(seq_len, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.tokens) // self.seq_len

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.get_batch(np.array([index])).items()}

    def get_batch(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        rows = np.asarray(indices, dtype=np.int64)[:, None] * self.seq_len + self._offsets
        return {"tokens": torch.from_numpy(self.tokens[rows].astype(np.int64))}


def _in_validation(key: str, fraction: float) -> bool:
    """A stable per-file coin: the same file is always on the same side of the split."""
    return int.from_bytes(hashlib.sha1(key.encode()).digest()[:8], "big") / 2**64 < fraction


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; text datasets have {SPLITS}")


def split_files(files: Sequence[Path], root: Path | None, split: str, fraction: float) -> list[Path]:
    """The files of one split, chosen by a hash of each file's path relative to ``root``."""
    keys = [str(f.relative_to(root)) if root else f.name for f in files]
    return [f for f, k in zip(files, keys, strict=True) if _in_validation(k, fraction) == (split == "validation")]


def _read_bytes(files: Iterable[Path]) -> np.ndarray:
    return np.frombuffer(b"".join(Path(f).read_bytes() for f in files), dtype=np.uint8)


def _split_stream(tokens: np.ndarray, split: str, fraction: float) -> np.ndarray:
    """Train is the first ``1 - fraction`` of the stream, validation the rest."""
    cut = int(len(tokens) * (1 - fraction))
    return tokens[:cut] if split == "train" else tokens[cut:]


def _check_vocab(vocab_size: int | None, name: str) -> None:
    if vocab_size not in (None, BYTE_VOCAB):
        raise DataError(f"{name} is byte-level: its vocab_size is {BYTE_VOCAB}, got {vocab_size}")


_CACHE: dict[tuple, np.ndarray] = {}


def stdlib_files(root: str | None = None) -> tuple[Path, list[Path]]:
    """The standard library's own ``.py`` files (no site-packages), sorted."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    files = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "dist-packages", "__pycache__"))
        files += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py")]
    if not files:
        raise DataError(f"python-stdlib: no .py files under {base}; pass root=... pointing at a Python lib folder")
    return base, files


def build_python_stdlib(
    split: str, seq_len: int = 256, root: str | None = None, validation_fraction: float = 0.05,
    vocab_size: int | None = BYTE_VOCAB,
) -> TokenWindows:
    """The standard library's source as bytes (vocabulary 256), split by file."""
    _check_split(split)
    _check_vocab(vocab_size, "python-stdlib")
    key = ("stdlib", root, split, validation_fraction)
    if key not in _CACHE:
        base, files = stdlib_files(root)
        _CACHE[key] = _read_bytes(split_files(files, base, split, validation_fraction))
    return TokenWindows(_CACHE[key], seq_len, "python-stdlib")


def _expand(paths: str | Sequence[str]) -> list[Path]:
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    found: list[Path] = []
    for p in paths:
        p = str(p)
        if os.path.isdir(p):
            found += sorted(q for q in Path(p).rglob("*") if q.is_file())
        else:
            matches = sorted(glob.glob(p, recursive=True))
            if not matches:
                raise DataError(f"text-files: {p!r} matches no file")
            found += [Path(m) for m in matches if os.path.isfile(m)]
    return found


def build_text_files(
    split: str, paths: str | Sequence[str] | None = None, seq_len: int = 256,
    validation_fraction: float = 0.05, vocab_size: int | None = BYTE_VOCAB,
) -> TokenWindows:
    """Any local text files as bytes. With enough files the split is by file; otherwise the
    last ``validation_fraction`` of the concatenated bytes is held out."""
    _check_split(split)
    _check_vocab(vocab_size, "text-files")
    if not paths:
        raise DataError("text-files needs paths=[...]: files, folders or glob patterns of text")
    files = _expand(paths)
    root = Path(os.path.commonpath([str(f.parent) for f in files]))
    by_file = [split_files(files, root, s, validation_fraction) for s in SPLITS]
    if all(by_file):
        tokens = _read_bytes(by_file[SPLITS.index(split)])
    else:
        tokens = _split_stream(_read_bytes(files), split, validation_fraction)
    return TokenWindows(tokens, seq_len, "text-files")


TOKEN_DTYPES = ("uint16", "uint32")


def build_token_file(
    split: str, path: str | None = None, validation_path: str | None = None, dtype: str = "uint16",
    seq_len: int = 256, vocab_size: int | None = None, validation_fraction: float = 0.05,
) -> TokenWindows:
    """A pre-tokenised flat binary file of ``dtype`` token ids, read through a memory map.

    With ``validation_path`` that file is the validation split; otherwise the last
    ``validation_fraction`` of ``path`` is.
    """
    _check_split(split)
    if dtype not in TOKEN_DTYPES:
        raise DataError(f"token-file: dtype must be one of {TOKEN_DTYPES}, got {dtype!r}")
    if not path:
        raise DataError("token-file needs path=...: a flat binary file of uint16/uint32 token ids")
    source = validation_path if (split == "validation" and validation_path) else path
    if not os.path.isfile(source):
        raise DataError(f"token-file: {source!r} does not exist")
    if os.path.getsize(source) % np.dtype(dtype).itemsize:
        raise DataError(f"token-file: the size of {source!r} is not a multiple of {dtype}; wrong dtype?")
    tokens = np.memmap(source, dtype=dtype, mode="r")
    if not validation_path:
        tokens = _split_stream(tokens, split, validation_fraction)
    if vocab_size is not None and len(tokens) and int(tokens.max()) >= vocab_size:
        raise DataError(f"token-file: {source!r} holds token id {int(tokens.max())} >= vocab_size {vocab_size}")
    return TokenWindows(tokens, seq_len, "token-file")


def build_tinystories(
    split: str, seq_len: int = 256, data_files: str | dict | None = None,
    hub_name: str = "roneneldan/TinyStories", max_stories: int | None = None,
    vocab_size: int | None = BYTE_VOCAB,
) -> TokenWindows:
    """TinyStories through the ``datasets`` library, byte-level, one blank line between stories.

    ``data_files`` loads local JSON/JSONL/Parquet/text files (a dict maps split -> files);
    otherwise ``hub_name`` is loaded from the Hugging Face cache or the hub. The official
    train/validation splits are disjoint.
    """
    _check_split(split)
    _check_vocab(vocab_size, "tinystories")
    try:
        import datasets
    except ImportError:
        raise DataError("tinystories needs the `datasets` library: pip install 'flops-fit[data]'") from None
    key = ("tinystories", str(data_files), hub_name, split, max_stories)
    if key not in _CACHE:
        if data_files is not None:
            any_file = next(iter(data_files.values())) if isinstance(data_files, dict) else data_files
            any_file = any_file[0] if isinstance(any_file, (list, tuple)) else any_file
            ext = Path(str(any_file)).suffix.lstrip(".")
            builder = {"jsonl": "json", "txt": "text"}.get(ext, ext)
            data = datasets.load_dataset(builder, data_files=data_files, split=split)
        else:
            data = datasets.load_dataset(hub_name, split=split)
        if max_stories is not None:
            data = data.select(range(min(max_stories, len(data))))
        text = "\n\n".join(data["text"]).encode("utf-8")
        _CACHE[key] = np.frombuffer(text, dtype=np.uint8)
    return TokenWindows(_CACHE[key], seq_len, "tinystories")
