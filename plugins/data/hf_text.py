"""Text corpora through Hugging Face ``datasets``: local parquet / jsonl / json / arrow / csv /
txt files, a folder saved with ``save_to_disk``, or a hub dataset (with network access; without
it, from the local cache at once: ``hub``).

Records are read in batches (streamed by default: nothing is copied into the ``datasets``
cache), their ``text_field`` joined with ``separator`` into one text stream per split, and
tokenised into the token cache (``token_cache``) once, then memory-mapped by every run. The
validation split is the dataset's own ``validation`` split when it has one; otherwise a
stable ``validation_fraction`` of the training records, chosen by a hash of each record's
position, is held out (and never trained on).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from flops_fit.plugins.data import hub
from flops_fit.plugins.data.text_data import (
    SPLITS,
    TOKENIZER_SAMPLE_BYTES,
    TokenWindows,
    check_split,
    expand,
    file_identity,
    in_validation,
    windows,
)
from flops_fit.plugins.data.text_tokenizers import BYTES
from flops_fit.plugins.data.token_cache import TextSource

from flops_fit.checks import held_out_share
from flops_fit.errors import DataError

# file extension -> the `datasets` builder that reads it
BUILDERS = {"parquet": "parquet", "jsonl": "json", "json": "json", "arrow": "arrow", "csv": "csv", "txt": "text"}
BATCH_RECORDS = 1000


def _datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise DataError("this dataset reads through the `datasets` library: pip install 'flops-fit[data]'") from None
    # its JSON reader logs each file it cannot parse and then raises: the raise becomes one line (``_reason``)
    logging.getLogger("datasets.packaged_modules.json.json").setLevel(logging.CRITICAL)
    return datasets


def _builder(name: str, files: Sequence[Path]) -> str:
    kinds = {BUILDERS.get(f.suffix.lower().lstrip(".")) for f in files}
    if None in kinds or len(kinds) != 1:
        raise DataError(f"{name}: data_files must all be one of the kinds {sorted(BUILDERS)} (by extension); "
                        f"got {sorted({f.suffix or f.name for f in files})}")
    return kinds.pop()


def _local_files(name: str, data_files: Any) -> dict[str, list[Path]]:
    """``data_files`` (files, folders, globs; or a dict split -> those) as split -> files."""
    if isinstance(data_files, dict):
        unknown = sorted(set(data_files) - set(SPLITS))
        if unknown or "train" not in data_files:
            raise DataError(f"{name}: data_files as a dict maps the splits {list(SPLITS)} to files "
                            f"(train required); got the keys {sorted(data_files)}")
        return {split: expand(files, name) for split, files in data_files.items()}
    return {"train": expand(data_files, name)}


def _saved_folder(path: str | None) -> bool:
    """True for a folder written by ``Dataset(Dict).save_to_disk``."""
    return bool(path) and any(os.path.isfile(os.path.join(path, f)) for f in ("state.json", "dataset_dict.json"))


class _Corpus:
    """Where the records come from and how each split of them is opened."""

    def __init__(self, name: str, path: str | None, data_files: Any, config: str | None, revision: str | None,
                 streaming: bool) -> None:
        if (path is None) == (data_files is None):
            raise DataError(f"{name} needs data_files=... (local parquet/jsonl/json/arrow/csv/txt files, folders "
                            "or globs) or path=... (a hub dataset, or a folder saved with save_to_disk), not both")
        self.name, self.path, self.config, self.revision, self.streaming = name, path, config, revision, streaming
        self.files = _local_files(name, data_files) if data_files is not None else None
        if self.files is not None:
            self.builder = _builder(name, [f for files in self.files.values() for f in files])
        self.saved = _saved_folder(path)
        self.folder = bool(path) and os.path.isdir(path)  # local: a save_to_disk folder or a folder of data files
        if self.folder:
            self.path = str(Path(path).resolve())

    def identity(self) -> dict[str, Any]:
        """What decides the records: local files by path, size and modification time; a hub
        dataset by name, configuration and revision."""
        if self.files is not None:
            return {"files": {s: file_identity(fs) for s, fs in self.files.items()}}
        if self.folder:
            return {"folder": file_identity(f for f in sorted(Path(self.path).rglob("*")) if f.is_file()),
                    "config": self.config}
        return {"hub": self.path, "config": self.config, "revision": self.revision}

    @property
    def on_hub(self) -> bool:
        return self.files is None and not self.saved and not self.folder

    def _offline(self) -> str:
        """"; <why>: the local cache only" where the hub does not answer (offline mode is then on)."""
        reason = hub.unreachable() if self.on_hub else None
        return f"; {reason}, so only the local cache was read" if reason else ""

    def splits(self) -> list[str]:
        offline = self._offline()
        datasets = _datasets()
        if self.files is not None:
            return list(self.files)
        try:
            if self.saved:
                data = datasets.load_from_disk(self.path)
                return list(data) if isinstance(data, datasets.DatasetDict) else ["train"]
            return list(datasets.get_dataset_split_names(self.path, self.config, revision=self.revision))
        except Exception as exc:  # network, missing dataset: the library's own exception types
            raise DataError(f"{self.name}: cannot list the splits of {self.path!r}: {exc}{offline}") from None

    def open(self, split: str) -> Any:
        offline = self._offline()
        datasets = _datasets()
        try:
            if self.files is not None:
                files = [str(f) for f in self.files[split] if f.stat().st_size]  # an empty file holds no records
                if not files:  # datasets' readers raised a bare StopIteration
                    raise DataError(f"{self.name}: {self.where(split)} is empty: it holds no records; "
                                    "name files that hold the corpus")
                return datasets.load_dataset(self.builder, data_files={split: files},
                                             split=split, streaming=self.streaming)
            if self.saved:
                data = datasets.load_from_disk(self.path)
                data = data[split] if isinstance(data, datasets.DatasetDict) else data
                return data.to_iterable_dataset() if self.streaming else data
            return datasets.load_dataset(self.path, self.config, split=split, revision=self.revision,
                                         streaming=self.streaming)
        except DataError:
            raise
        except Exception as exc:  # missing or unreadable files, no network: the library's own exceptions
            raise DataError(f"{self.name}: cannot load split {split!r} of {self.where(split)}: {_reason(exc)}"
                            f"{offline}") from None

    def where(self, split: str) -> str:
        """The hub dataset or folder, or the split's files, for an error to name."""
        return self.path or ", ".join(map(str, (self.files or {}).get(split, []))) or "data_files"


def _reason(exc: BaseException) -> str:
    """A library's error by its first cause (datasets wraps a file's parse error in its own; what it
    tried after that, its context, says less)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {exc}"


def _texts(corpus: _Corpus, split: str, text_field: str) -> Iterator[str]:
    """The ``text_field`` of every record of ``split``, in order, read in batches."""
    data = corpus.open(split)
    batches = data.iter(batch_size=BATCH_RECORDS)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except Exception as exc:  # a record the library cannot parse (a damaged jsonl line, a cut file)
            raise DataError(f"{corpus.name}: cannot read the records of split {split!r} of {corpus.where(split)}: "
                            f"{_reason(exc)}") from None
        if text_field not in batch:
            raise DataError(f"{corpus.name}: the records have no field {text_field!r}; their fields are "
                            f"{sorted(batch)}: pass text_field=...")
        texts = [t for t in batch[text_field] if t is not None]  # a record without text adds none
        other = next((t for t in texts if not isinstance(t, str)), None)
        if other is not None:  # else it failed later as "object of type 'int' has no len()", naming nothing
            raise DataError(f"{corpus.name}: the field {text_field!r} holds {type(other).__name__} values "
                            f"(the first: {repr(other)[:40]}), not text; their fields are {sorted(batch)}: "
                            "pass text_field=... naming the field that holds the text")
        yield from texts


def _joined(texts: Iterable[str], separator: str, keep: Callable[[int], bool], limit: int | None) -> Iterator[str]:
    """The kept texts (``keep(position)``), at most ``limit`` of them, with ``separator`` between."""
    count = 0
    for position, text in enumerate(texts):
        if limit is not None and count >= limit:
            return
        if keep(position):
            yield text if count == 0 else separator + text
            count += 1


def _everything(position: int) -> bool:
    return True


def _held(split: str, fraction: float) -> Callable[[int], bool]:
    """Whether the record at a position belongs to ``split`` when ``fraction`` of them is held out."""
    return lambda position: in_validation(str(position), fraction) == (split == "validation")


def _sources(corpus: _Corpus, text_field: str, separator: str, max_documents: int | None,
             validation_fraction: float) -> dict[str, TextSource]:
    own = set(corpus.splits())
    if "train" not in own:
        raise DataError(f"{corpus.name}: the dataset has no 'train' split; its splits are {sorted(own)}")
    base = {"corpus": corpus.identity(), "text_field": text_field, "separator": separator,
            "max_documents": max_documents}
    sizes = {s: sum(f.stat().st_size for f in fs) for s, fs in (corpus.files or {}).items()}
    held_out = "validation" not in own
    if held_out:  # the corpus's own validation split needs no share held out
        held_out_share(validation_fraction, corpus.name, DataError)
    sources = {}
    for split in SPLITS:
        if held_out:  # a stable share of the training records, by position
            read, how, keep = "train", [split, "held out by record", validation_fraction], _held(split, validation_fraction)
        else:
            read, how, keep = split, split, _everything
        sources[split] = TextSource(
            corpus.name, {**base, "split": how},
            lambda read=read, keep=keep: _joined(_texts(corpus, read, text_field), separator, keep, max_documents),
            None if held_out else sizes.get(read))
    return sources


def build_hf_text(
    split: str, data_files: str | Sequence[str] | dict | None = None, path: str | None = None,
    config: str | None = None, revision: str | None = None, text_field: str = "text", separator: str = "\n\n",
    streaming: bool = True, max_documents: int | None = None, seq_len: int = 256, validation_fraction: float = 0.05,
    vocab_size: int | None = None, tokenizer: str = BYTES, cache_dir: str | None = None,
    tokenizer_sample_bytes: int = TOKENIZER_SAMPLE_BYTES, tokenizer_seed: int = 0,
) -> TokenWindows:
    """Any text corpus ``datasets`` reads: local ``data_files`` or ``path`` (a hub dataset or a
    ``save_to_disk`` folder), records' ``text_field`` joined by ``separator``, tokenised into the
    token cache. ``max_documents`` caps each split's records (a quick sweep on a big corpus)."""
    return _build("hf-text", split, locals())


def build_tinystories(
    split: str, seq_len: int = 256, data_files: str | Sequence[str] | dict | None = None,
    hub_name: str = "roneneldan/TinyStories", max_stories: int | None = None, streaming: bool = True,
    validation_fraction: float = 0.05, vocab_size: int | None = None, tokenizer: str = BYTES,
    cache_dir: str | None = None, tokenizer_sample_bytes: int = TOKENIZER_SAMPLE_BYTES, tokenizer_seed: int = 0,
) -> TokenWindows:
    """TinyStories, one blank line between stories: local ``data_files`` (the official release's
    parquet or json files, a dict split -> files, or files whose records are split) or
    ``hub_name`` from the hub. The official train/validation splits are disjoint."""
    options = {k: v for k, v in locals().items() if k not in ("hub_name", "max_stories")}
    return _build("tinystories", split, {**options, "path": None if data_files is not None else hub_name,
                                         "max_documents": max_stories, "text_field": "text", "separator": "\n\n"})


def _build(name: str, split: str, o: dict[str, Any]) -> TokenWindows:
    check_split(split)
    limit = o.get("max_documents")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
        raise DataError(f"{name}: the number of records to read must be a positive integer or None, got {limit!r}")
    if not isinstance(o["text_field"], str) or not o["text_field"]:
        raise DataError(f"{name}: text_field names the records' field that holds the text, got {o['text_field']!r}")
    if not isinstance(o["separator"], str):  # else a TypeError as the records were joined
        raise DataError(f"{name}: separator is the text put between records (default a blank line, \"\\n\\n\"), "
                        f"got {o['separator']!r}")
    corpus = _Corpus(name, o.get("path"), o.get("data_files"), o.get("config"), o.get("revision"), o["streaming"])
    sources = _sources(corpus, o["text_field"], o["separator"], limit, o["validation_fraction"])
    return windows(name, sources, split, o["seq_len"], o["vocab_size"], o["tokenizer"], o["cache_dir"],
                   o["tokenizer_sample_bytes"], o["tokenizer_seed"], bytes_in_memory=False)
