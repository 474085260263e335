"""Bits per byte: the held-out loss on the scale of the text, recorded beside the loss per
token, stored, and fitted with ``metric="bpb"`` so sweeps with different tokenizers compare."""

import dataclasses
import math
import sqlite3

import numpy as np
import pytest
import torch
from flops_fit.plugins.losses import next_token

import flops_fit
from flops_fit.fitting import FitInputError, fit, load_runs
from flops_fit.fitting.synthetic import synthetic_runs
from flops_fit.store.run_store import SCHEMA, RunStore
from flops_fit.store.runs import RunResult
from flops_fit.training.data import eval_indices
from flops_fit.training.loop import train
from flops_fit.training.steps import evaluate

ASCII_WORDS = "the cat sat on a mat and then the dog ran home while birds sang in trees\n".split(" ")


def write_corpus(folder, documents=30):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(documents):
        lines = [" ".join(rng.choice(ASCII_WORDS, size=10)) for _ in range(20)]
        (folder / f"doc{i:02d}.txt").write_text(f"doc {i}\n" + "\n".join(lines) + "\n")
    return folder


def small_plan(corpus, tokenizer):
    return flops_fit.plan(model="gpt", dataset="text-files", budgets=[3e7], sizes=[4, 8, 12], seq_len=16, batch_size=4,
                          model_config={"n_layer": 1, "head_dim": 4}, min_steps=2, eval_tokens=16 * 24,
                          device="cpu", dataset_config={"paths": [str(corpus)], "tokenizer": tokenizer})


def test_bytes_tokenizer_bits_per_byte_is_the_loss_over_ln_2(tmp_path):
    spec = small_plan(write_corpus(tmp_path / "corpus"), "bytes").runs[-1]
    result = train(spec)
    assert result.status == "done" and math.isfinite(result.loss)
    assert result.bpb == pytest.approx(result.loss / math.log(2), rel=1e-12)


def test_bpe_bits_per_byte_counts_the_bytes_its_tokens_decode_to(tmp_path):
    tokenizers = pytest.importorskip("tokenizers", reason="needs the `tokenizers` library (pip install 'flops-fit[data]')")
    spec = small_plan(write_corpus(tmp_path / "corpus"), "bpe:300").runs[0]
    config = {**spec.dataset_config, "cache_dir": str(tmp_path / "cache")}
    spec = dataclasses.replace(spec, run_id="", eval_tokens=16 * 10, batch_size=3, dataset_config=config)
    torch.manual_seed(0)
    model = flops_fit.create_model("gpt", spec.size, **spec.model_config)
    data = flops_fit.create_dataset("text-files", "validation", **config)
    no_autocast = torch.autocast("cpu", enabled=False)
    loss, bpb, _ = evaluate(model, data, next_token, "tokens", spec, torch.device("cpu"), no_autocast, 16)

    # by hand: each window's summed loss over its 15 predicted tokens, and the UTF-8 bytes the
    # learnt tokenizer decodes those tokens to
    [saved] = (tmp_path / "cache" / "tokenizers").glob("bpe300-*.json")
    tokenizer = tokenizers.Tokenizer.from_file(str(saved))
    nats, text_bytes = 0.0, 0
    model.eval()
    with torch.no_grad():
        for index in eval_indices(len(data), 10):
            window = torch.from_numpy(np.asarray(data.tokens[index * 16:(index + 1) * 16], dtype=np.int64))[None]
            nats += float(next_token(model(window), {"tokens": window})) * 15
            text_bytes += len(tokenizer.decode(window[0, 1:].tolist()).encode("utf-8"))
    assert text_bytes > 15 * 10 * 1.5  # well over a byte per token: the merges at work
    assert bpb == pytest.approx(nats / text_bytes / math.log(2), rel=1e-6)
    assert loss == pytest.approx(nats / 15 / 10, rel=1e-6)


def test_the_store_keeps_bits_per_byte_and_old_stores_gain_the_column(tmp_path):
    import sweep_support

    old = sqlite3.connect(tmp_path / "runs.sqlite")  # a store from before the bpb column existed
    old.executescript(SCHEMA)
    old.close()
    swept = flops_fit.plan(host=sweep_support.host(), **sweep_support.small_plan_options())
    a, b = swept.runs[:2]
    with RunStore(tmp_path) as store:
        store.add_plan(swept, spec=swept.settings)
        store.record(RunResult(a.run_id, "done", loss=2.0, bpb=1.25, tokens=a.tokens, flops=a.flops))
        store.record(RunResult(b.run_id, "done", loss=2.1, tokens=b.tokens, flops=b.flops))  # no bpb: NULL
        frame = store.runs_frame()
        stored = dict(store.db.execute("SELECT run_id, bpb FROM runs WHERE status = 'done'").fetchall())
    assert stored == {a.run_id: 1.25, b.run_id: None}
    assert frame.set_index("run_id").loc[a.run_id, "bpb"] == 1.25 and math.isnan(frame.set_index("run_id").loc[b.run_id, "bpb"])


def sweep_with_bpb(scale=0.3):
    """A synthetic sweep whose bits per byte are its losses times ``scale`` (a fixed tokens per byte)."""
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7)
    frame["bpb"] = frame["loss"] * scale
    return frame


def test_fitting_bits_per_byte_moves_the_loss_scale_not_the_optimum():
    frame = sweep_with_bpb(0.3)
    per_token = fit(frame, method="isoflop", bootstrap=20)
    per_byte = fit(frame, method="isoflop", bootstrap=20, metric="bpb")
    a, b = per_token.predict([1e21]).iloc[0], per_byte.predict([1e21]).iloc[0]
    assert b["N_opt"] == pytest.approx(a["N_opt"], rel=1e-6)
    assert b["loss"] == pytest.approx(0.3 * a["loss"], rel=1e-6)
    assert "fitted metric: held-out bits per byte" in per_byte.summary()
    assert "loss (bits per byte)" in per_byte.summary() and "loss (nats)" in per_token.summary()
    assert per_byte.to_dict()["metric"] == "bpb"
    runs = load_runs(frame, metric="bpb")  # training curves on the same scale, by each run's bpb / loss
    assert np.allclose(runs.frame["curve"][0][:, 1], 0.3 * np.asarray(frame["curve"][0])[:, 1])
    assert fit(runs, method="envelope", bootstrap=10).runs.metric == "bpb"


def test_the_report_says_which_metric_it_fitted(tmp_path):
    fitted = fit(sweep_with_bpb(), method="isoflop", bootstrap=10, metric="bpb")
    text = flops_fit.write_report(fitted, tmp_path / "report.html").read_text()
    assert "fitted metric: held-out bits per byte" in text and "<th>loss (bits per byte)</th>" in text


def test_bits_per_byte_missing_is_refused_with_the_fix():
    frame = sweep_with_bpb()
    with pytest.raises(FitInputError, match="no bits-per-byte column 'bpb'.*metric='loss'"):
        fit(frame.drop(columns=["bpb"]), metric="bpb")
    frame.loc[[3, 5], "bpb"] = np.nan  # runs trained before bpb was recorded
    with pytest.raises(FitInputError, match="2 of 21 finished runs have no bits per byte"):
        fit(frame, metric="bpb")
    with pytest.raises(FitInputError, match="unknown metric 'perplexity'"):
        fit(frame, metric="perplexity")
    with pytest.raises(FitInputError, match="loaded with metric='loss'"):
        fit(load_runs(frame), metric="bpb")


def test_the_command_line_fits_either_metric(tmp_path, capsys):
    from flops_fit.cli.main import main

    frame = sweep_with_bpb()
    frame.drop(columns=["curve"]).to_csv(tmp_path / "runs.csv", index=False)
    assert main(["fit", str(tmp_path / "runs.csv"), "--method", "isoflop", "--bootstrap", "10", "--metric", "bpb"]) == 0
    assert "fitted metric: held-out bits per byte" in capsys.readouterr().out
    frame.drop(columns=["curve", "bpb"]).to_csv(tmp_path / "old.csv", index=False)
    assert main(["fit", str(tmp_path / "old.csv"), "--metric", "bpb"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("flops-fit: error:") and "--metric loss" in err and "\n" not in err


def test_a_token_file_counts_bytes_when_it_names_the_tokenizer_that_made_it(tmp_path):
    pytest.importorskip("tokenizers", reason="needs the `tokenizers` library (pip install 'flops-fit[data]')")
    from flops_fit.plugins.data.text_tokenizers import train_bpe

    text = "".join(open(f).read() for f in sorted(write_corpus(tmp_path / "corpus").iterdir()))
    tokenizer = train_bpe([text], 300)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    np.asarray(tokenizer.encode(text).ids, dtype=np.uint16).tofile(tmp_path / "tokens.bin")
    config = {"path": str(tmp_path / "tokens.bin"), "tokenizer": str(tmp_path / "tokenizer.json"), "seq_len": 16}
    assert flops_fit.dataset_info("token-file").config(**config)["vocab_size"] == 300
    data = flops_fit.create_dataset("token-file", "validation", **config)
    windows = np.arange(len(data))
    by_hand = sum(len(tokenizer.decode(data.tokens[i * 16 + 1:(i + 1) * 16].tolist()).encode()) for i in windows)
    assert int(data.target_bytes(windows).sum()) == by_hand
    bare = flops_fit.create_dataset("token-file", "validation", path=str(tmp_path / "tokens.bin"), seq_len=16)
    assert bare.target_bytes(windows) is None  # no tokenizer, no bytes: such runs record no bits per byte
    with pytest.raises(flops_fit.FlopsFitError, match="would have to be learnt from text"):
        flops_fit.create_dataset("token-file", "train", path=str(tmp_path / "tokens.bin"), tokenizer="bpe:300")
