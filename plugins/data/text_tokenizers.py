"""The tokenizers a text dataset can use: ``"bytes"``, ``"bpe:<vocab>"`` or a local tokenizer.

- ``"bytes"``: UTF-8 bytes, vocabulary 256 (no library needed).
- ``"bpe:<vocab>"``: a byte-level BPE (GPT-2's pre-tokenizer) that Hugging Face ``tokenizers``
  learns from the dataset's training split, at most ``<vocab>`` tokens. The trainer draws no
  random numbers, so the same text always gives the same tokenizer; ``seed`` only picks which
  documents it learns from when the split is larger than ``sample_bytes``.
- a path: a ``tokenizer.json`` file, or a Hugging Face tokenizer folder holding one (or a
  GPT-2-style ``vocab.json`` + ``merges.txt``).

Every tokenizer encodes raw text with no special tokens added, and knows how many UTF-8 bytes
each of its tokens stands for (``token_bytes``), which turns a loss per token into bits per byte.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from flops_fit.errors import DataError
from flops_fit.files import file_lock, write_atomically

BYTES = "bytes"
BYTE_VOCAB = 256
MIN_BPE_VOCAB = BYTE_VOCAB + 1  # the 256 byte symbols and at least one merge
_BPE = re.compile(r"^bpe:(\d+)$")
_BYTE_TOKEN = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")  # SentencePiece's byte-fallback tokens
CHUNK_CHARS = 1 << 18  # long documents are cut at line starts into pieces of about this size


def _spec_error(spec: Any) -> DataError:
    return DataError(
        f"tokenizer {spec!r} is not 'bytes', 'bpe:<vocab>' (e.g. 'bpe:8192') nor an existing tokenizer.json "
        "file or Hugging Face tokenizer folder"
    )


def parse(spec: Any) -> tuple[str, int | Path | None]:
    """``("bytes", None)``, ``("bpe", vocab)`` or ``("file", path)``; DataError for anything else."""
    if spec == BYTES:
        return BYTES, None
    if not isinstance(spec, (str, os.PathLike)):
        raise _spec_error(spec)
    match = _BPE.match(str(spec))
    if match:
        vocab = int(match.group(1))
        if not MIN_BPE_VOCAB <= vocab < 2**32:
            raise DataError(f"tokenizer {spec!r}: a BPE vocabulary holds the 256 bytes and at least one merge, "
                            f"so <vocab> must be at least {MIN_BPE_VOCAB} (e.g. 'bpe:8192')")
        return "bpe", vocab
    if str(spec).startswith("bpe:"):
        raise _spec_error(spec)
    return "file", _tokenizer_file(Path(spec), spec)


def _tokenizer_file(path: Path, spec: Any) -> Path:
    """The file that defines the tokenizer at ``path``: itself, its tokenizer.json, or its vocab.json."""
    if path.is_file():
        return path
    if path.is_dir():
        for name in ("tokenizer.json", "vocab.json"):
            if (path / name).is_file() and (name == "tokenizer.json" or (path / "merges.txt").is_file()):
                return path / name
        raise DataError(f"tokenizer folder {str(spec)!r} holds no tokenizer.json (nor vocab.json + merges.txt); "
                        "save one with the tokenizer's save_pretrained(...) or Tokenizer.save('tokenizer.json')")
    raise _spec_error(spec)


def vocab_size(spec: Any) -> int:
    """The vocabulary the model needs for ``spec`` (every token id is below it), without training."""
    kind, value = parse(spec)
    if kind == BYTES:
        return BYTE_VOCAB
    if kind == "bpe":
        return int(value)
    return HFTokenizer(_load_file(value), _digest_file(value)).vocab_size


class ByteTokenizer:
    """UTF-8 bytes, one token per byte."""

    name = BYTES
    identity = BYTES
    vocab_size = BYTE_VOCAB

    def encode(self, texts: list[str | bytes]) -> list[np.ndarray]:
        return [np.frombuffer(t if isinstance(t, bytes) else t.encode("utf-8"), dtype=np.uint8) for t in texts]

    def token_bytes(self) -> np.ndarray:
        return np.ones(BYTE_VOCAB, dtype=np.int64)


class HFTokenizer:
    """A Hugging Face ``tokenizers.Tokenizer``; ``identity`` is a digest of its definition."""

    def __init__(self, tokenizer: Any, identity: str, name: str = "") -> None:
        self.tokenizer, self.identity = tokenizer, identity
        self.name = name or f"tokenizer {identity[:12]}"
        ids = list(tokenizer.get_vocab(with_added_tokens=True).values())
        if not ids:
            raise DataError(f"{self.name} has an empty vocabulary")
        self.vocab_size = max(ids) + 1

    def encode(self, texts: list[str | bytes]) -> list[np.ndarray]:
        """Token ids of each text, no special tokens added (the Rust encoder uses every core)."""
        texts = [t.decode("utf-8", errors="replace") if isinstance(t, bytes) else t for t in texts]
        return [np.asarray(e.ids, dtype=np.uint32) for e in self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)]

    def token_bytes(self) -> np.ndarray:
        """UTF-8 bytes each token id stands for: exact for byte-level tokenizers (each symbol is
        one byte); otherwise read from the token's text, SentencePiece's '▁' counting as a space
        and its ``<0xNN>`` tokens as one byte. Special tokens stand for no text: 0."""
        definition = json.loads(self.tokenizer.to_str())
        byte_level = "ByteLevel" in json.dumps([definition.get("decoder"), definition.get("pre_tokenizer")])
        special = {i for i, t in self.tokenizer.get_added_tokens_decoder().items() if t.special}
        symbol_bytes = {c: 1 for c in _byte_symbols()}
        out = np.zeros(self.vocab_size, dtype=np.int64)
        for token, i in self.tokenizer.get_vocab(with_added_tokens=True).items():
            if i in special:
                continue
            if byte_level:
                out[i] = sum(symbol_bytes.get(c, len(c.encode("utf-8"))) for c in token)
            elif _BYTE_TOKEN.match(token):
                out[i] = 1
            else:
                out[i] = len(token.replace("\u2581", " ").encode("utf-8"))
        return out


def _byte_symbols() -> list[str]:
    """The 256 printable characters byte-level BPE writes the bytes 0..255 as (GPT-2's table)."""
    from tokenizers import pre_tokenizers

    return pre_tokenizers.ByteLevel.alphabet()


def _tokenizers_library() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise DataError("this tokenizer needs the `tokenizers` library: pip install 'flops-fit[data]'") from None
    return tokenizers


def _digest_file(path: Path) -> str:
    h = hashlib.sha256()
    for part in ([path, path.with_name("merges.txt")] if path.name == "vocab.json" else [path]):
        h.update(part.read_bytes())
    return h.hexdigest()


def _load_file(path: Path) -> Any:
    tokenizers = _tokenizers_library()
    try:
        if path.name == "vocab.json":
            tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE.from_file(str(path), str(path.with_name("merges.txt"))))
            tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
            tokenizer.decoder = tokenizers.decoders.ByteLevel()
            return tokenizer
        return tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # the library's parse errors are plain Exceptions
        raise DataError(f"tokenizer {str(path)!r} cannot be read by the `tokenizers` library: {exc}") from None


def chunks(text: str | bytes, size: int = CHUNK_CHARS) -> Iterator[str | bytes]:
    """``text`` cut into pieces of about ``size`` characters, each cut at the start of a line that
    begins with a non-space character, where byte-level BPE's pre-tokenizer splits anyway."""
    newline = b"\n" if isinstance(text, bytes) else "\n"
    start = 0
    while len(text) - start > size:
        cut = text.find(newline, start + size)
        while cut != -1 and cut + 1 < len(text) and text[cut + 1:cut + 2].isspace():
            cut = text.find(newline, cut + 1)
        if cut == -1 or cut + 1 >= len(text):
            break
        yield text[start:cut + 1]
        start = cut + 1
    yield text[start:]


def sample(pieces: Iterable[str | bytes], max_chars: int, seed: int) -> list[str | bytes]:
    """A seeded uniform sample of the pieces (documents cut by ``chunks``) of at most about
    ``max_chars`` characters in all; every piece when they fit. One pass, memory ~ ``max_chars``."""
    heap: list[tuple[int, int, str | bytes]] = []  # (-priority, index, piece): the largest priority on top
    total = 0
    for index, piece in enumerate(p for whole in pieces for p in chunks(whole)):
        digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
        heapq.heappush(heap, (-int.from_bytes(digest, "big"), index, piece))
        total += len(piece)
        while total > max_chars and len(heap) > 1:
            total -= len(heapq.heappop(heap)[2])
    return [piece for _, _, piece in sorted(heap, key=lambda item: item[1])]


def train_bpe(texts: Iterable[str | bytes], vocab: int) -> Any:
    """A byte-level BPE of at most ``vocab`` tokens learnt from ``texts`` (deterministic)."""
    tokenizers = _tokenizers_library()
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab, initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(
        (t.decode("utf-8", errors="replace") if isinstance(t, bytes) else t for t in texts), trainer)
    return tokenizer


def load_ready(spec: Any) -> ByteTokenizer | HFTokenizer | None:
    """The tokenizer ``spec`` names if it needs no training (bytes, a tokenizer file); None for a BPE."""
    kind, value = parse(spec)
    if kind == BYTES:
        return ByteTokenizer()
    if kind == "file":
        return HFTokenizer(_load_file(value), _digest_file(value), name=f"tokenizer {str(value)!r}")
    return None


def load(spec: Any, train_texts: Any, train_identity: Any, root: Path, *, sample_bytes: int, seed: int):
    """The tokenizer ``spec`` names. A BPE is learnt from ``train_texts()`` (an iterable of the
    training split's text) once, saved under ``root/tokenizers`` keyed by the training text's
    identity, the vocabulary, the sample size and the seed, and loaded from there afterwards."""
    ready = load_ready(spec)
    if ready is not None:
        return ready
    _, value = parse(spec)
    key = hashlib.sha256(json.dumps(["bpe", value, sample_bytes, seed, train_identity], sort_keys=True,
                                    default=str).encode()).hexdigest()[:24]
    path = Path(root) / "tokenizers" / f"bpe{value}-{key}.json"
    with file_lock(path.with_suffix(".lock")):
        if not path.is_file():
            tokenizer = train_bpe(sample(train_texts(), sample_bytes, seed), value)
            write_atomically(path, lambda temporary: tokenizer.save(str(temporary)))
    return HFTokenizer(_load_file(path), _digest_file(path), name=f"tokenizer {spec!r}")
