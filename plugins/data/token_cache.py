"""Tokenised text on disk: one memory-mapped token file per (text, tokenizer), built once.

A file's name carries a digest of what decides its tokens: the source's identity (each file's
path, size and modification time, or the dataset's options) and the tokenizer's (a digest of
its definition). Every run of a sweep, every worker and every later sweep on the same text
and tokenizer maps the same file. The first to need it builds it under a file lock (the
others wait, then map it), streaming the tokens into a temporary file that is renamed into
place when complete, so a killed build leaves nothing half-written. Token ids are uint8 for
bytes, uint16 when the vocabulary fits (at most 65,536 tokens), else uint32.

The cache lives in ``$FLOPS_FIT_CACHE`` (default ``~/.cache/flops-fit``, or under
``$XDG_CACHE_HOME``), or a dataset's ``cache_dir``; files may be deleted at any time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from flops_fit.plugins.data.text_tokenizers import chunks

from flops_fit.files import file_lock, write_atomically

log = logging.getLogger(__name__)
FORMAT = 1  # bump when the tokens a source gives change for the same identity
BATCH_CHARS = 1 << 23  # text handed to the encoder at once: enough for every core


@dataclass(frozen=True)
class TextSource:
    """One split of a text corpus: what decides its text (JSON-able ``identity``) and the text
    itself, piece by piece (``pieces()``; their concatenation is the split's text stream)."""

    name: str
    identity: Any
    pieces: Callable[[], Iterable[str | bytes]]
    size: int | None = None  # bytes, when known (the progress bar's total)


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type that holds every id below ``vocab_size``."""
    return np.dtype(np.uint8 if vocab_size <= 2**8 else np.uint16 if vocab_size <= 2**16 else np.uint32)


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:24]


def cache_path(source: TextSource, tokenizer: Any, root: Path) -> Path:
    dtype = token_dtype(tokenizer.vocab_size)
    label = re.sub(r"[^A-Za-z0-9_.-]+", "-", source.name)
    return Path(root) / "tokens" / f"{label}-{digest([FORMAT, source.identity, tokenizer.identity])}.{dtype.name}"


def cached_tokens(source: TextSource, tokenizer: Any, root: Path) -> np.ndarray:
    """The source's tokens, read-only and memory-mapped; built (once, under a lock) if missing."""
    path = cache_path(source, tokenizer, root)
    dtype = token_dtype(tokenizer.vocab_size)
    if not path.is_file():
        with file_lock(path.with_name(path.name + ".lock")):
            if not path.is_file():
                log.info("tokenizing %s with %s into %s", source.name, tokenizer.name, path)
                write_atomically(path, lambda temporary: encode_to_file(
                    temporary, source.pieces(), tokenizer, dtype, total=source.size, desc=source.name))
    if path.stat().st_size == 0:
        return np.empty(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def batches(pieces: Iterable[str | bytes], batch_chars: int = BATCH_CHARS) -> Iterator[list[str | bytes]]:
    """Pieces cut at line starts (``text_tokenizers.chunks``) and grouped ``batch_chars`` at a time."""
    batch, size = [], 0
    for piece in pieces:
        for chunk in chunks(piece):
            batch.append(chunk)
            size += len(chunk)
            if size >= batch_chars:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


def encode_to_file(path: Path, pieces: Iterable[str | bytes], tokenizer: Any, dtype: np.dtype,
                   total: int | None = None, desc: str = "") -> int:
    """Write the tokens of ``pieces`` to ``path`` as one flat ``dtype`` array; the token count."""
    count = 0
    with open(path, "wb") as out, _progress(total, f"tokenizing {desc}") as bar:
        for batch in batches(pieces):
            encoded = tokenizer.encode(batch)
            ids = np.concatenate(encoded) if encoded else np.empty(0, dtype=dtype)
            ids.astype(dtype, copy=False).tofile(out)
            count += len(ids)
            bar.update(sum(map(len, batch)))
    return count


class _NoBar:
    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def update(self, n: int) -> None:
        pass


def _progress(total: int | None, desc: str) -> Any:
    """A tqdm bar on a terminal (none when stderr is not one, or tqdm is not installed)."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, disable=None, leave=False)
