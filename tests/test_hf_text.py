"""Text corpora through Hugging Face ``datasets``: local parquet, jsonl, arrow and
``save_to_disk`` folders the tests write, records joined into one stream per split, a held-out
share of the records when the data has no validation split, and the shared token cache."""

import json

import numpy as np
import pytest

import flops_fit
from flops_fit.errors import FlopsFitError

datasets = pytest.importorskip("datasets", reason="needs the `datasets` library (pip install 'flops-fit[data]')")

STORIES = [f"Story {i}: once upon a time a {'cat dog bird fox'.split()[i % 4]} found {i} shiny stones." for i in range(60)]


def write_parquet(path, texts, field="text"):
    datasets.Dataset.from_dict({field: texts, "id": list(range(len(texts)))}).to_parquet(str(path))
    return path


def write_jsonl(path, texts, field="text"):
    path.write_text("".join(json.dumps({field: t, "source": "test"}) + "\n" for t in texts))
    return path


def stream(data):
    return bytes(np.asarray(data.tokens)).decode("utf-8")


def test_one_parquet_file_holds_out_a_stable_share_of_its_records(tmp_path):
    write_parquet(tmp_path / "corpus.parquet", STORIES)
    config = {"data_files": str(tmp_path / "*.parquet"), "seq_len": 8, "validation_fraction": 0.2}
    train = flops_fit.create_dataset("hf-text", "train", **config)
    held = flops_fit.create_dataset("hf-text", "validation", **config)
    train_stories, held_stories = stream(train).split("\n\n"), stream(held).split("\n\n")
    assert sorted(train_stories + held_stories) == sorted(STORIES)  # every record once, on one side
    assert 3 <= len(held_stories) <= 24
    assert [STORIES.index(s) for s in train_stories] == sorted(STORIES.index(s) for s in train_stories)
    assert isinstance(train.tokens, np.memmap) and train.tokens.dtype == np.uint8
    again = flops_fit.create_dataset("hf-text", "validation", **config)
    assert stream(again) == stream(held)


def test_jsonl_with_another_text_field_streamed_or_loaded_gives_the_same_text(tmp_path):
    files = {"train": str(write_jsonl(tmp_path / "train.jsonl", STORIES[:50], field="body")),
             "validation": str(write_jsonl(tmp_path / "valid.jsonl", STORIES[50:], field="body"))}
    texts = []
    for streaming in (True, False):
        data = flops_fit.create_dataset("hf-text", "validation", data_files=files, text_field="body", separator="\n",
                                        streaming=streaming, seq_len=4, cache_dir=str(tmp_path / f"cache-{streaming}"))
        texts.append(stream(data))
    assert texts[0] == texts[1] == "\n".join(STORIES[50:])  # the dataset's own validation split
    with pytest.raises(FlopsFitError, match=r"records have no field 'text'; their fields are \['body', 'source'\]"):
        flops_fit.create_dataset("hf-text", "train", data_files=files, seq_len=4)


def test_arrow_files_and_save_to_disk_folders(tmp_path):
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": STORIES[:40]}),
                                   "validation": datasets.Dataset.from_dict({"text": STORIES[40:]})})
    splits.save_to_disk(str(tmp_path / "saved"))
    held = flops_fit.create_dataset("hf-text", "validation", path=str(tmp_path / "saved"), seq_len=4)
    assert stream(held) == "\n\n".join(STORIES[40:])
    [arrow] = (tmp_path / "saved" / "train").glob("*.arrow")
    train = flops_fit.create_dataset("hf-text", "train", data_files=str(arrow), seq_len=4, validation_fraction=0.1)
    assert set(stream(train).split("\n\n")) < set(STORIES[:40])


def test_a_dataset_without_a_train_split_is_refused_naming_its_splits(tmp_path):
    datasets.DatasetDict({"test": datasets.Dataset.from_dict({"text": STORIES[:5]})}).save_to_disk(str(tmp_path / "saved"))
    with pytest.raises(FlopsFitError, match=r"the dataset has no 'train' split; its splits are \['test'\]"):
        flops_fit.create_dataset("hf-text", "validation", path=str(tmp_path / "saved"), seq_len=4)


def test_a_local_folder_of_split_files_loads_like_a_hub_dataset(tmp_path):
    (tmp_path / "data").mkdir()
    write_jsonl(tmp_path / "data" / "train.jsonl", STORIES[:45])
    write_jsonl(tmp_path / "data" / "validation.jsonl", STORIES[45:])
    held = flops_fit.create_dataset("hf-text", "validation", path=str(tmp_path / "data"), seq_len=4)
    assert stream(held) == "\n\n".join(STORIES[45:])


def test_tinystories_from_local_parquet_with_a_learnt_bpe(tmp_path):
    pytest.importorskip("tokenizers", reason="needs the `tokenizers` library (pip install 'flops-fit[data]')")
    files = {"train": str(write_parquet(tmp_path / "train.parquet", STORIES[:50])),
             "validation": str(write_parquet(tmp_path / "validation.parquet", STORIES[50:]))}
    config = {"data_files": files, "tokenizer": "bpe:320", "seq_len": 8, "cache_dir": str(tmp_path / "cache")}
    assert flops_fit.dataset_info("tinystories").config(**config)["vocab_size"] == 320
    held = flops_fit.create_dataset("tinystories", "validation", **config)
    assert held.tokens.dtype == np.uint16 and int(held.tokens.max()) < 320
    [learnt] = (tmp_path / "cache" / "tokenizers").glob("bpe320-*.json")
    from tokenizers import Tokenizer

    assert Tokenizer.from_file(str(learnt)).decode(held.tokens.tolist()) == "\n\n".join(STORIES[50:])
    capped = flops_fit.create_dataset("tinystories", "validation", data_files=files, max_stories=3, seq_len=4)
    assert stream(capped) == "\n\n".join(STORIES[50:53])


@pytest.mark.parametrize("config, message", [
    ({}, "needs data_files=... .* or path=..."),
    ({"data_files": "/nonexistent/*.parquet"}, "matches no file"),
    ({"data_files": {"test": "x.parquet"}}, "maps the splits"),
    ({"max_documents": 0}, "must be a positive integer"),
    ({"data_files": "x.jsonl", "separator": 3},  # these two failed as a TypeError joining the records, or no field None
     r"^hf-text: separator is the text put between records \(default a blank line, \"\\n\\n\"\), got 3$"),
    ({"data_files": "x.jsonl", "text_field": None}, r"^hf-text: text_field names the records' field that holds the text"),
])
def test_bad_configurations_are_refused_with_the_fix(config, message):
    with pytest.raises(FlopsFitError, match=message):
        flops_fit.create_dataset("hf-text", "train", **config)


def test_files_of_mixed_kinds_are_refused(tmp_path):
    write_parquet(tmp_path / "a.parquet", STORIES[:5])
    write_jsonl(tmp_path / "b.jsonl", STORIES[5:10])
    with pytest.raises(FlopsFitError, match="must all be one of the kinds"):
        flops_fit.create_dataset("hf-text", "train", data_files=[str(tmp_path / "a.parquet"), str(tmp_path / "b.jsonl")])


@pytest.mark.parametrize("streaming", [True, False])
def test_a_damaged_jsonl_line_is_one_line_naming_the_file(tmp_path, streaming, caplog):
    """A jsonl with one line that is not JSON: pyarrow's ArrowInvalid came out of the first batch as a traceback
    (streamed), or as "An error occurred while generating the dataset", naming no file (loaded)."""
    path = write_jsonl(tmp_path / "stories.jsonl", STORIES)
    path.write_text(path.read_text() + "{not json\n")
    with pytest.raises(FlopsFitError, match=r"hf-text: cannot (read the records|load split) .*stories\.jsonl: "
                                            r"ArrowInvalid: JSON parse error"):
        flops_fit.create_dataset("hf-text", "train", data_files=str(path), seq_len=8, tokenizer="bytes",
                                 streaming=streaming, cache_dir=str(tmp_path / "cache"))
    assert not [r for r in caplog.records if "Failed to load JSON" in r.getMessage()]  # datasets' log of it, then its raise


@pytest.fixture
def probed_afresh(monkeypatch):
    """The hub probe forgotten, offline mode as before the test afterwards."""
    import huggingface_hub.constants
    from flops_fit.plugins.data import hub

    monkeypatch.setattr(hub, "_probed", [])
    for name in hub.SKIP_PROBE:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", huggingface_hub.constants.HF_HUB_OFFLINE)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setattr(datasets.config, name, getattr(datasets.config, name))
    return hub


def test_a_hub_that_does_not_answer_switches_offline_mode_on_and_says_so(probed_afresh, monkeypatch):
    """Without network, `datasets` retried each hub call for about 25 s (`flops-fit plan` of
    TinyStories took 27 s); one refused connection now switches offline mode on, for this process
    and its workers, and the refusal says why only the local cache was read."""
    import os

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    with pytest.raises(FlopsFitError, match=r"hf-text: cannot list the splits of 'nobody/nothing': .*; the hub "
                       r"\(127.0.0.1\) does not answer from here \(.+\), so only the local cache was read"):
        flops_fit.create_dataset("hf-text", "train", path="nobody/nothing")
    assert os.environ["HF_HUB_OFFLINE"] == "1" and datasets.config.HF_HUB_OFFLINE is True


def test_a_proxy_or_offline_mode_already_asked_for_is_not_probed(probed_afresh, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")  # the hub may answer through it
    assert probed_afresh.unreachable() is None
    monkeypatch.delenv("HTTPS_PROXY")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the hub kept on, unprobed
    assert probed_afresh.unreachable() is None


@pytest.mark.parametrize("streaming", [True, False])
def test_a_text_field_of_numbers_is_refused_naming_the_field_and_its_type(tmp_path, streaming):
    """Records whose text field holds numbers: the token cache failed with "object of type 'int' has no len()",
    naming neither the field nor the fix."""
    path = tmp_path / "numbers.jsonl"
    path.write_text("".join(json.dumps({"text": i, "story": s}) + "\n" for i, s in enumerate(STORIES)))
    with pytest.raises(FlopsFitError, match=r"hf-text: the field 'text' holds int values \(the first: 0\), not text; "
                                            r"their fields are \['story', 'text'\]: pass text_field="):
        flops_fit.create_dataset("hf-text", "train", data_files=str(path), seq_len=8, streaming=streaming,
                                 cache_dir=str(tmp_path / "cache"))
    data = flops_fit.create_dataset("hf-text", "train", data_files=str(path), text_field="story", seq_len=8,
                                    streaming=streaming, cache_dir=str(tmp_path / "cache"))
    assert stream(data).startswith("Story ")


@pytest.mark.parametrize("streaming", [True, False])
def test_an_empty_jsonl_is_refused_as_empty_and_one_beside_records_adds_nothing(tmp_path, streaming):
    """An empty jsonl: datasets' reader raised a bare StopIteration ("cannot load split 'train' of ...: StopIteration: "),
    alone or first among files that hold records."""
    empty = tmp_path / "a-empty.jsonl"
    empty.write_text("")
    with pytest.raises(FlopsFitError, match=r"hf-text: .*a-empty\.jsonl is empty: it holds no records; name files"):
        flops_fit.create_dataset("hf-text", "train", data_files=str(empty), seq_len=8, streaming=streaming,
                                 cache_dir=str(tmp_path / "cache"))
    full = write_jsonl(tmp_path / "b-stories.jsonl", STORIES)
    both = flops_fit.create_dataset("hf-text", "train", data_files=[str(empty), str(full)], seq_len=8,
                                    streaming=streaming, cache_dir=str(tmp_path / "cache"))
    alone = flops_fit.create_dataset("hf-text", "train", data_files=str(full), seq_len=8, streaming=streaming,
                                     cache_dir=str(tmp_path / "cache"))
    assert stream(both) == stream(alone)
