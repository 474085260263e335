"""Tokenising a corpus into the token cache vs the tokenizer's own batch encoder, same text.

A byte-level BPE (``bpe:<vocab>``) is learnt from a sample of the Python standard library's
source; then, side by side in this process, on the same documents:

- reference: ``tokenizers.Tokenizer.encode_batch(documents)``, ids collected into one array;
- also ``encode_batch_fast(documents)`` (no offsets), to show where the difference comes from;
- flops-fit: ``token_cache.encode_to_file`` (documents cut at line starts, batched through
  ``encode_batch_fast``, written as uint16), the path every cache build takes;
- a cache hit: ``create_dataset`` mapping the finished token file.

The three encoders are timed in turn, best of ``--repeats`` each, and their tokens checked
equal. Prints tokens/s of each and the ratios.

    python benchmarks/bench_tokenize.py [--vocab 8192] [--megabytes 16] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def best_of(repeats: int, fn):
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return min(times), value


def interleaved(repeats: int, **fns):
    """Best time and last value of each function, timed in turn ``repeats`` times, so that a
    change in the machine's load falls on all of them alike."""
    times = {name: [] for name in fns}
    values = {}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            values[name] = fn()
            times[name].append(time.perf_counter() - start)
    return {name: (min(times[name]), values[name]) for name in fns}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--megabytes", type=float, default=16.0, help="text to encode (from the stdlib's files)")
    parser.add_argument("--repeats", type=int, default=5, help="best of this many timings each")
    args = parser.parse_args()

    from flops_fit.plugins.data import text_data, text_tokenizers, token_cache

    import flops_fit

    base, files = text_data.stdlib_files()
    chosen, size = [], 0
    for f in files:
        if size >= args.megabytes * 1e6:
            break
        chosen.append(f)
        size += f.stat().st_size
    documents = [f.read_bytes().decode("utf-8", errors="replace") for f in chosen]
    chars = sum(map(len, documents))
    print(f"{len(documents)} documents, {chars / 1e6:.1f} M characters; CPUs visible: {os.cpu_count()}; "
          f"load average: {os.getloadavg()[0]:.1f}")

    start = time.perf_counter()
    tokenizer = text_tokenizers.train_bpe(documents[: max(1, len(documents) // 4)], args.vocab)
    print(f"trained bpe:{args.vocab} on a quarter of them in {time.perf_counter() - start:.1f} s")
    encoder = text_tokenizers.HFTokenizer(tokenizer, "bench")

    def reference(encode=tokenizer.encode_batch) -> np.ndarray:
        return np.concatenate([np.asarray(e.ids, dtype=np.uint16) for e in encode(documents)])

    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "tokens.uint16"

        def ours() -> int:
            return token_cache.encode_to_file(out, documents, encoder, np.dtype(np.uint16))

        timed = interleaved(args.repeats, reference=reference, fast=lambda: reference(tokenizer.encode_batch_fast),
                            ours=ours)
        (ref_s, ref_ids), (fast_s, _), (our_s, count) = timed["reference"], timed["fast"], timed["ours"]
        same = np.array_equal(np.fromfile(out, dtype=np.uint16), ref_ids)

        tokenizer.save(str(Path(folder) / "tokenizer.json"))
        text = Path(folder) / "corpus"
        text.mkdir()
        for i, doc in enumerate(documents):
            (text / f"{i:05d}.py").write_text(doc)
        config = {"paths": [str(text)], "tokenizer": str(Path(folder) / "tokenizer.json"), "cache_dir": folder,
                  "seq_len": 256}
        build_s, _ = best_of(1, lambda: flops_fit.create_dataset("text-files", "train", **config))
        hit_s, data = best_of(args.repeats, lambda: flops_fit.create_dataset("text-files", "train", **config))

    print(f"reference Tokenizer.encode_batch:       {len(ref_ids) / ref_s / 1e6:7.3f} M tokens/s ({ref_s:.2f} s)")
    print(f"Tokenizer.encode_batch_fast:            {len(ref_ids) / fast_s / 1e6:7.3f} M tokens/s ({fast_s:.2f} s)")
    print(f"flops-fit encode_to_file (uint16 file): {count / our_s / 1e6:7.3f} M tokens/s ({our_s:.2f} s); "
          f"same tokens: {same}")
    print(f"ratio flops-fit / encode_batch: {ref_s / our_s:.2f}x; flops-fit / encode_batch_fast: {fast_s / our_s:.2f}x")
    print(f"text-files dataset: first build {build_s:.2f} s (split, cache write), then a cache hit maps "
          f"{len(data.tokens):,} tokens in {hit_s * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
