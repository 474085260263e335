"""Text datasets for causal language models: local files, the standard library, token files.

Every text dataset is a ``TokenWindows``: a flat token stream cut into non-overlapping
windows of ``seq_len`` tokens; ``get_batch`` gathers a batch with one vectorised index,
so loading is never the bottleneck. Splits are decided before windowing (by file, or by
position in one stream), so held-out windows never share a byte with training ones.

Text is tokenised by the dataset's ``tokenizer`` (``text_tokenizers``: ``"bytes"``, the
default, ``"bpe:<vocab>"`` learnt from the training split, or a local tokenizer); anything
but bytes is encoded once into a memory-mapped token file (``token_cache``) that every run
reuses. ``configure_text`` sets ``vocab_size`` from the tokenizer, so the model follows it.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flops_fit.plugins.data import text_tokenizers
from flops_fit.plugins.data.text_tokenizers import BYTES, ByteTokenizer
from flops_fit.plugins.data.token_cache import TextSource, cached_tokens, digest

from flops_fit.checks import held_out_share
from flops_fit.errors import DataError
from flops_fit.files import cache_root

SPLITS = ("train", "validation")
# A BPE learns from at most about this much of the training split (a seeded sample of it).
TOKENIZER_SAMPLE_BYTES = 1 << 28


class TokenWindows:
    """Non-overlapping ``seq_len`` windows of a 1-D token array (numpy array or memmap).

    ``token_bytes[id]``, when known, is the number of UTF-8 bytes token ``id`` stands for:
    ``target_bytes`` then gives the bytes a window's predicted tokens cover (bits per byte).
    """

    def __init__(self, tokens: np.ndarray, seq_len: int, name: str = "text",
                 token_bytes: np.ndarray | None = None) -> None:
        if seq_len < 2:
            raise DataError(f"{name}: seq_len must be at least 2, got {seq_len}")
        if len(tokens) < seq_len:
            raise DataError(f"{name}: {len(tokens)} tokens cannot fill one window of seq_len={seq_len}; give it "
                            "more text (the held-out split: a larger validation_fraction) or a shorter seq_len")
        self.tokens, self.seq_len, self.token_bytes = tokens, seq_len, token_bytes
        self._offsets = np.arange(seq_len, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.tokens) // self.seq_len

    @property
    def unique_tokens(self) -> int:
        """The tokens its windows hold, each once: a training split's data budget (the contract's
        ``unique_tokens``); a run that trains on more sees some of them again."""
        return len(self) * self.seq_len

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.get_batch(np.array([index])).items()}

    @functools.cached_property
    def fingerprint(self) -> str:
        """A digest of the tokens (the contract's ``fingerprint``): a corpus edited under a sweep's resume
        keeps its length but not this, so the done runs' data and the rest's are told apart."""
        return content_digest(self.tokens)

    def _rows(self, indices: np.ndarray) -> np.ndarray:
        return np.asarray(indices, dtype=np.int64)[:, None] * self.seq_len + self._offsets

    def get_batch(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        return {"tokens": torch.from_numpy(self.tokens[self._rows(indices)].astype(np.int64))}

    def target_bytes(self, indices: np.ndarray) -> np.ndarray | None:
        """UTF-8 bytes of the tokens the next-token loss predicts in each window (all but its
        first token); None when the tokenizer is unknown (a bare token file)."""
        if self.token_bytes is None:
            return None
        return self.token_bytes[self.tokens[self._rows(indices)[:, 1:]]].sum(axis=1)


def content_digest(tokens: np.ndarray, chunk: int = 1 << 26) -> str:
    """sha256 of a token array's bytes and dtype, read ``chunk`` bytes at a time (a memory-mapped corpus
    is not copied whole)."""
    hasher = hashlib.sha256(np.dtype(tokens.dtype).str.encode())
    flat = np.ascontiguousarray(tokens).reshape(-1).view(np.uint8)
    for start in range(0, len(flat), chunk):
        hasher.update(flat[start:start + chunk])
    return hasher.hexdigest()[:24]


def in_validation(key: str, fraction: float) -> bool:
    """A stable per-file coin: the same file is always on the same side of the split."""
    return int.from_bytes(hashlib.sha1(key.encode()).digest()[:8], "big") / 2**64 < fraction


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; text datasets have {SPLITS}")


def split_files(files: Sequence[Path], root: Path | None, split: str, fraction: float) -> list[Path]:
    """The files of one split, chosen by a hash of each file's path relative to ``root``."""
    keys = [str(f.relative_to(root)) if root else f.name for f in files]
    return [f for f, k in zip(files, keys, strict=True) if in_validation(k, fraction) == (split == "validation")]


def _split_stream(tokens: np.ndarray, split: str, fraction: float) -> np.ndarray:
    """Train is the first ``1 - fraction`` of the stream, validation the rest."""
    cut = int(len(tokens) * (1 - fraction))
    return tokens[:cut] if split == "train" else tokens[cut:]


def configure_text(config: dict[str, Any]) -> dict[str, Any]:
    """A text dataset's configuration with ``vocab_size`` set by its tokenizer (256 for bytes,
    ``<vocab>`` for ``bpe:<vocab>``, a tokenizer file's largest id + 1): the model follows it."""
    spec = config.get("tokenizer", BYTES)
    vocab = text_tokenizers.vocab_size(spec)
    given = config.get("vocab_size")
    if given is not None and given != vocab:
        raise DataError(f"tokenizer {spec!r} has a vocabulary of {vocab} tokens, but vocab_size={given} was given; "
                        "leave vocab_size out: it follows the tokenizer")
    return {**config, "vocab_size": vocab}


def configure_token_file(config: dict[str, Any]) -> dict[str, Any]:
    """token-file's ``vocab_size`` follows the tokenizer that made its tokens, when it names one."""
    return configure_text(config) if config.get("tokenizer") is not None else config


def file_identity(files: Iterable[Path]) -> list[tuple[str, int, int]]:
    """What decides the files' text: each one's absolute path, size and modification time."""
    paths = [os.path.abspath(f) for f in files]  # not resolve(): it costs a readlink per path component
    return [(path, st.st_size, st.st_mtime_ns) for path, st in zip(paths, map(os.stat, paths), strict=True)]


def _files_source(name: str, files: Sequence[Path]) -> TextSource:
    """The files' bytes, one file after the other."""
    identity = file_identity(files)
    return TextSource(name, ["files", identity], lambda: (Path(f).read_bytes() for f in files),
                      sum(size for _, size, _ in identity))


def _stream_source(name: str, files: Sequence[Path], split: str, fraction: float) -> TextSource:
    """One split of the files' bytes taken as one stream (``_split_stream``)."""
    identity = file_identity(files)
    return TextSource(name, ["stream", split, fraction, identity],
                      lambda: [bytes(_split_stream(_read_bytes(files), split, fraction))])


def _read_bytes(files: Iterable[Path]) -> np.ndarray:
    return np.frombuffer(b"".join(Path(f).read_bytes() for f in files), dtype=np.uint8)


_CACHE: dict[tuple, np.ndarray] = {}


def windows(name: str, sources: dict[str, TextSource], split: str, seq_len: int, vocab_size: int | None,
             tokenizer: str, cache_dir: str | None, tokenizer_sample_bytes: int, tokenizer_seed: int,
             bytes_in_memory: bool = True) -> TokenWindows:
    """The windows of ``sources[split]`` under ``tokenizer`` (a BPE learns from ``sources["train"]``).

    Bytes of local files are read into memory (as fast as mapping a cache of them); every
    other tokenizer's tokens come from the token cache, built once."""
    root = cache_root(cache_dir)
    train = sources["train"]
    encoder = text_tokenizers.load(tokenizer, train.pieces, train.identity, root,
                                   sample_bytes=tokenizer_sample_bytes, seed=tokenizer_seed)
    if vocab_size is not None and encoder.vocab_size > vocab_size:
        raise DataError(f"{name}: tokenizer {tokenizer!r} has {encoder.vocab_size} tokens, more than "
                        f"vocab_size={vocab_size}; leave vocab_size out: it follows the tokenizer")
    source = sources[split]
    if isinstance(encoder, ByteTokenizer) and bytes_in_memory:
        key = ("bytes", digest(source.identity))
        if key not in _CACHE:
            _CACHE[key] = np.frombuffer(b"".join(source.pieces()), dtype=np.uint8)
        tokens = _CACHE[key]
    else:
        tokens = cached_tokens(source, encoder, root)
    return TokenWindows(tokens, seq_len, name, token_bytes=encoder.token_bytes())


def stdlib_files(root: str | None = None) -> tuple[Path, list[Path]]:
    """The standard library's own ``.py`` files (no site-packages), sorted."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    return base, _walk(base)[0]


def _walk(base: Path) -> tuple[list[Path], list[tuple[str, int]]]:
    """The ``.py`` files under ``base`` (no site-packages), sorted, and each folder walked with its modification
    time, which a file added, removed or renamed in it changes (``_listed``)."""
    files, folders = [], []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "dist-packages", "__pycache__"))
        folders.append((dirpath, _mtime(dirpath)))
        files += [Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py")]
    if not files:
        raise DataError(f"python-stdlib: no .py files under {base}; pass root=... pointing at a Python lib folder")
    return files, folders


def _mtime(folder: str) -> int | None:
    try:
        return os.stat(folder).st_mtime_ns
    except OSError:  # gone meanwhile
        return None


def _listed(folders: list[tuple[str, int | None]]) -> bool:
    """Whether every folder walked still has the modification time it had: no file added, removed or renamed
    since (a file rewritten in place, or a change within the file system's timestamp tick of the walk, is not
    seen before a new process). One stat per folder: 125 for the standard library, 0.4 ms."""
    return all(mtime is not None and _mtime(folder) == mtime for folder, mtime in folders)


# The standard library's splits per (folder, fraction), walked, split and stat'ed once per process while its folders
# list the same files: a run builds its training and held-out splits, and a worker process trains run after run
# (the bytes themselves are read once too: ``_CACHE``). A file added under root= after the first call was not seen.
_STDLIB: dict[tuple[str | None, float], tuple[list[tuple[str, int | None]], dict[str, TextSource]]] = {}


def _stdlib_sources(root: str | None, validation_fraction: float) -> dict[str, TextSource]:
    key = (root and os.path.abspath(root), float(validation_fraction))
    if key not in _STDLIB or not _listed(_STDLIB[key][0]):
        base = Path(root or sysconfig.get_paths()["stdlib"])
        files, folders = _walk(base)
        _STDLIB[key] = (folders, {s: _files_source("python-stdlib", split_files(files, base, s, validation_fraction))
                                  for s in SPLITS})
    return _STDLIB[key][1]


def build_python_stdlib(
    split: str, seq_len: int = 256, root: str | None = None, validation_fraction: float = 0.05,
    vocab_size: int | None = None, tokenizer: str = BYTES, cache_dir: str | None = None,
    tokenizer_sample_bytes: int = TOKENIZER_SAMPLE_BYTES, tokenizer_seed: int = 0,
) -> TokenWindows:
    """The standard library's source, split by file, as bytes (vocabulary 256) or ``tokenizer``'s tokens."""
    check_split(split)
    held_out_share(validation_fraction, "python-stdlib", DataError)
    sources = _stdlib_sources(root, validation_fraction)
    return windows("python-stdlib", sources, split, seq_len, vocab_size, tokenizer, cache_dir,
                    tokenizer_sample_bytes, tokenizer_seed)


def expand(paths: str | Sequence[str], name: str = "text-files") -> list[Path]:
    """The files that ``paths`` (files, folders, glob patterns) name, each pattern's sorted."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    found: list[Path] = []
    for p in paths:
        p = str(p)
        if os.path.isdir(p):
            inside = sorted(q for q in Path(p).rglob("*") if q.is_file())
            if not inside:  # an empty folder: said here, not as a path computation's error downstream
                raise DataError(f"{name}: the folder {p!r} holds no file; put the text files in it, or name them")
            found += inside
        else:
            matches = sorted(glob.glob(p, recursive=True))
            files = [Path(m) for m in matches if os.path.isfile(m)]
            if not files:
                raise DataError(f"{name}: {p!r} matches no file" + (" (only folders)" if matches else ""))
            found += files
    return found


def build_text_files(
    split: str, paths: str | Sequence[str] | None = None, seq_len: int = 256,
    validation_fraction: float = 0.05, vocab_size: int | None = None, tokenizer: str = BYTES,
    cache_dir: str | None = None, tokenizer_sample_bytes: int = TOKENIZER_SAMPLE_BYTES, tokenizer_seed: int = 0,
) -> TokenWindows:
    """Any local text files, as bytes or ``tokenizer``'s tokens. With enough files the split is by
    file; otherwise the last ``validation_fraction`` of the concatenated bytes is held out."""
    check_split(split)
    held_out_share(validation_fraction, "text-files", DataError)
    if not paths:
        raise DataError("text-files needs paths=[...]: files, folders or glob patterns of text")
    files = expand(paths)
    root = Path(os.path.commonpath([str(f.parent) for f in files]))
    by_file = [split_files(files, root, s, validation_fraction) for s in SPLITS]
    if all(by_file):
        sources = {s: _files_source("text-files", chosen) for s, chosen in zip(SPLITS, by_file, strict=True)}
    else:
        sources = {s: _stream_source("text-files", files, s, validation_fraction) for s in SPLITS}
    return windows("text-files", sources, split, seq_len, vocab_size, tokenizer, cache_dir,
                    tokenizer_sample_bytes, tokenizer_seed)


TOKEN_DTYPES = ("uint16", "uint32")
WIDTH_SAMPLE = 4096  # leading uint32 slots looked at for the other width's signature


def _check_width(tokens: np.ndarray, source: str, dtype: str) -> None:
    """Refuse a file that is plainly of the other width. uint32 ids read as uint16 have a zero high half in every
    other slot (a model then trained on ids interleaved with 0s, or was told to grow its vocabulary); uint16 ids
    read as uint32 put the next id in each high half (ids of millions). Judged on the file's first slots."""
    head = np.asarray(tokens[:2 * WIDTH_SAMPLE])
    if dtype == "uint16" and len(head) >= 2 and head[0::2].any() and not head[1::2].any():
        other, why = "uint32", "every other uint16 in it is 0, as the high halves of uint32 ids are"
    elif dtype == "uint32" and len(head) and (head >= 1 << 16).all():
        other, why = "uint16", "every uint32 in it is 65,536 or more, as two uint16 ids read as one are"
    else:
        return
    raise DataError(f"token-file: {source!r} looks like {other} ids, not {dtype}: {why}; set dtype = {other!r}")


def build_token_file(
    split: str, path: str | None = None, validation_path: str | None = None, dtype: str = "uint16",
    seq_len: int = 256, vocab_size: int | None = None, validation_fraction: float = 0.05,
    tokenizer: str | None = None,
) -> TokenWindows:
    """A pre-tokenised flat binary file of ``dtype`` token ids, read through a memory map.

    With ``validation_path`` that file is the validation split; otherwise the last
    ``validation_fraction`` of ``path`` is. ``tokenizer`` (a tokenizer file, or ``"bytes"``)
    names what made the tokens: then runs record bits per byte and ``vocab_size`` follows it.
    """
    check_split(split)
    encoder = None
    if tokenizer is not None:
        encoder = text_tokenizers.load_ready(tokenizer)
        if encoder is None:
            raise DataError(f"token-file: tokenizer={tokenizer!r} would have to be learnt from text this file does "
                            "not have; name the tokenizer file that made its tokens, or leave tokenizer out")
    if dtype not in TOKEN_DTYPES:
        raise DataError(f"token-file: dtype must be one of {TOKEN_DTYPES}, got {dtype!r}")
    if not path:
        raise DataError("token-file needs path=...: a flat binary file of uint16/uint32 token ids")
    if not validation_path:
        held_out_share(validation_fraction, "token-file", DataError)
    source = validation_path if (split == "validation" and validation_path) else path
    if not os.path.isfile(source):
        raise DataError(f"token-file: {source!r} does not exist")
    if os.path.getsize(source) == 0:  # numpy cannot map it ("cannot mmap an empty file")
        raise DataError(f"token-file: {source!r} is empty: it holds no token ids")
    if os.path.getsize(source) % np.dtype(dtype).itemsize:
        raise DataError(f"token-file: the size of {source!r} is not a multiple of {dtype}; wrong dtype?")
    tokens = np.memmap(source, dtype=dtype, mode="r")
    _check_width(tokens, source, dtype)
    if not validation_path:
        tokens = _split_stream(tokens, split, validation_fraction)
    if vocab_size is not None and len(tokens) and int(tokens.max()) >= vocab_size:
        raise DataError(f"token-file: {source!r} holds token id {int(tokens.max())} >= vocab_size {vocab_size}; the "
                        f"model's vocabulary must hold every id: set vocab_size = {int(tokens.max()) + 1} or more "
                        "(in [dataset]; the model follows it)")
    return TokenWindows(tokens, seq_len, "token-file", token_bytes=encoder.token_bytes() if encoder else None)
