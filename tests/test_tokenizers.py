"""Tokenizers for text datasets and the token cache: BPE learnt from the training split,
local tokenizer files, one memory-mapped token file per (text, tokenizer) built once, and the
model's vocabulary following the tokenizer. Corpora are written by the tests."""

import json
import multiprocessing

import numpy as np
import pytest

import flops_fit
from flops_fit.errors import FlopsFitError

tokenizers = pytest.importorskip("tokenizers", reason="needs the `tokenizers` library (pip install 'flops-fit[data]')")
from flops_fit.plugins.data import text_tokenizers, token_cache  # noqa: E402

WORDS = ("the cat sat on a mat and then the dog ran home while birds sang in trees near the café; "
         "naïve coders wrote def main(): return 42 # 日本語 comments\n").split(" ")


def write_corpus(folder, documents=40, seed=0):
    """``documents`` small text files of seeded word salad, multi-byte characters included."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(documents):
        lines = [" ".join(rng.choice(WORDS, size=12)) for _ in range(30)]
        (folder / f"doc{i:03d}.txt").write_text(f"document {i}\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return folder


def text_of(data_split_files):
    return "".join(f.read_text(encoding="utf-8") for f in data_split_files)


def split_texts(folder, fraction=0.2):
    files = sorted(folder.iterdir())
    return {s: text_of(flops_fit.plugins.data.text_data.split_files(files, folder, s, fraction)) for s in ("train", "validation")}


def test_bpe_is_learnt_from_the_training_split_and_round_trips_the_text(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    config = {"paths": [str(corpus)], "tokenizer": "bpe:300", "seq_len": 16, "validation_fraction": 0.2,
              "cache_dir": str(tmp_path / "cache")}
    train = flops_fit.create_dataset("text-files", "train", **config)
    held = flops_fit.create_dataset("text-files", "validation", **config)
    [learnt] = (tmp_path / "cache" / "tokenizers").glob("bpe300-*.json")
    tokenizer = tokenizers.Tokenizer.from_file(str(learnt))
    assert tokenizer.get_vocab_size() == 300
    texts = split_texts(corpus)
    for data, split in ((train, "train"), (held, "validation")):
        assert isinstance(data.tokens, np.memmap) and data.tokens.dtype == np.uint16
        assert int(data.tokens.max()) < 300
        assert tokenizer.decode(data.tokens.tolist()) == texts[split]  # lossless, multi-byte characters too
        assert len(data.tokens) < 0.6 * len(texts[split].encode())  # merges shorten the stream
    # learnt from the training files only: the same tokenizer comes from a corpus of just those files
    only_train = tmp_path / "only-train"
    only_train.mkdir()
    files = sorted(corpus.iterdir())
    for f in flops_fit.plugins.data.text_data.split_files(files, corpus, "train", 0.2):
        (only_train / f.name).write_bytes(f.read_bytes())
    again = text_tokenizers.train_bpe([f.read_text() for f in sorted(only_train.iterdir())], 300)
    assert again.to_str() == tokenizer.to_str()


def test_bpe_training_is_deterministic_and_the_seed_picks_the_sample():
    docs = [f"story {i}: " + " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(40)) for i in range(200)]
    assert text_tokenizers.train_bpe(docs, 400).to_str() == text_tokenizers.train_bpe(docs, 400).to_str()
    everything = text_tokenizers.sample(docs, 10**9, seed=0)
    assert everything == docs
    one = text_tokenizers.sample(docs, 5000, seed=1)
    assert one == text_tokenizers.sample(docs, 5000, seed=1)
    assert one != text_tokenizers.sample(docs, 5000, seed=2)
    assert 4000 < sum(map(len, one)) <= 5000
    assert [docs.index(d) for d in one] == sorted(docs.index(d) for d in one)  # in corpus order


def test_chunks_cut_only_at_line_starts_and_keep_byte_level_bpe_tokens():
    text = "".join(f"line {i} {WORDS[i % len(WORDS)]}\n{'    indented' if i % 3 else ''}\n" for i in range(400))
    pieces = list(text_tokenizers.chunks(text, size=100))
    assert len(pieces) > 10 and "".join(pieces) == text
    assert all(p.endswith("\n") and not nxt[0].isspace() for p, nxt in zip(pieces, pieces[1:]))
    tokenizer = text_tokenizers.train_bpe([text], 320)
    whole = tokenizer.encode(text).ids
    assert [i for p in pieces for i in tokenizer.encode(p).ids] == whole


def test_the_token_file_is_built_once_and_reused_until_the_text_changes(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", documents=12)
    cache = tmp_path / "cache"
    config = {"paths": [str(corpus)], "tokenizer": "bpe:280", "seq_len": 8, "cache_dir": str(cache)}
    first = flops_fit.create_dataset("text-files", "train", **config)
    files = sorted((cache / "tokens").glob("text-files-*.uint16"))
    assert len(files) == 1 and str(first.tokens.filename) == str(files[0])
    stamp = files[0].stat().st_mtime_ns
    again = flops_fit.create_dataset("text-files", "train", **config)
    assert str(again.tokens.filename) == str(files[0]) and files[0].stat().st_mtime_ns == stamp
    assert not list(cache.rglob(".*.tmp"))  # nothing half-written left behind
    # an edited training file is new text: a new token file (and tokenizer), the old one untouched
    trained_on = flops_fit.plugins.data.text_data.split_files(sorted(corpus.iterdir()), corpus, "train", 0.05)
    trained_on[0].write_text("a different first document\n" * 50)
    edited = flops_fit.create_dataset("text-files", "train", **config)
    assert str(edited.tokens.filename) != str(files[0]) and files[0].stat().st_mtime_ns == stamp
    assert len(list((cache / "tokens").glob("*.uint16"))) == 2


@pytest.mark.e2e
def test_parallel_workers_build_the_token_file_once(tmp_path):
    from token_tasks import build_dataset

    corpus = write_corpus(tmp_path / "corpus", documents=12)
    config = {"paths": [str(corpus)], "tokenizer": "bpe:280", "seq_len": 8, "cache_dir": str(tmp_path / "cache")}
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.map(build_dataset, [config] * 2)
    assert sum(builds for builds, _ in results) == 1
    assert results[0][1] == results[1][1]
    assert len(list((tmp_path / "cache" / "tokens").glob("*.uint16"))) == 1


def test_a_local_tokenizer_file_or_folder_gives_the_same_tokens(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", documents=12)
    docs = [f.read_text() for f in sorted(corpus.iterdir())]
    tokenizer = text_tokenizers.train_bpe(docs, 290)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    folder = tmp_path / "hf-folder"
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    gpt2_style = tmp_path / "gpt2-style"
    gpt2_style.mkdir()
    tokenizer.model.save(str(gpt2_style))  # vocab.json + merges.txt
    expected = [i for d in flops_fit.plugins.data.text_data.split_files(sorted(corpus.iterdir()), corpus, "train", 0.05)
                for i in tokenizer.encode(d.read_text()).ids]
    for spec in (tmp_path / "tokenizer.json", folder, gpt2_style):
        config = {"paths": [str(corpus)], "tokenizer": str(spec), "seq_len": 8}
        assert flops_fit.dataset_info("text-files").config(**config)["vocab_size"] == 290
        data = flops_fit.create_dataset("text-files", "train", **config)
        assert data.tokens.tolist() == expected


def test_the_model_vocabulary_follows_the_tokenizer(tmp_path):
    corpus = write_corpus(tmp_path / "corpus", documents=8)
    common = {"model": "gpt", "dataset": "text-files", "budgets": [2e9], "seq_len": 16, "batch_size": 4,
              "model_config": {"n_layer": 1, "head_dim": 4}, "min_steps": 1}
    for tokenizer, vocab in (("bytes", 256), ("bpe:1000", 1000), ("bpe:70000", 70000)):
        plan = flops_fit.plan(**common, dataset_config={"paths": [str(corpus)], "tokenizer": tokenizer})
        run = plan.runs[0]
        assert run.model_config["vocab_size"] == vocab == run.dataset_config["vocab_size"]
        assert run.params == flops_fit.model_info("gpt").params(run.size, **run.model_config)
        assert run.params == flops_fit.create_model("gpt", run.size, **run.model_config).num_params()
    assert token_cache.token_dtype(256) == np.uint8
    assert token_cache.token_dtype(65536) == np.uint16 and token_cache.token_dtype(65537) == np.uint32


@pytest.mark.parametrize("tokenizer, message", [
    ("bpe:abc", "is not 'bytes', 'bpe:<vocab>'"),
    ("bpe:200", "must be at least 257"),
    ("/no/such/tokenizer.json", "nor an existing tokenizer.json"),
    (42, "is not 'bytes'"),
])
def test_bad_tokenizers_are_refused_with_the_fix(tokenizer, message):
    with pytest.raises(FlopsFitError, match=message):
        flops_fit.create_dataset("python-stdlib", "train", tokenizer=tokenizer)


def test_a_folder_without_a_tokenizer_and_an_unreadable_file_are_refused(tmp_path):
    with pytest.raises(FlopsFitError, match="holds no tokenizer.json"):
        flops_fit.create_dataset("python-stdlib", "train", tokenizer=str(tmp_path))
    broken = tmp_path / "tokenizer.json"
    broken.write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(FlopsFitError, match="cannot be read by the `tokenizers` library"):
        flops_fit.create_dataset("python-stdlib", "train", tokenizer=str(broken))
    with pytest.raises(FlopsFitError, match="vocabulary of 300 tokens, but vocab_size=256"):
        flops_fit.plan(model="gpt", dataset="python-stdlib", budgets=[1e11],
                       dataset_config={"tokenizer": "bpe:300", "vocab_size": 256})
