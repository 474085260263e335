"""Image classifiers record their held-out top-1 error beside the loss, and the laws can fit it."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from flops_fit.plugins.data.image_data import ImageTensors

import flops_fit
from flops_fit.errors import FitInputError
from flops_fit.fitting import fit, load_runs
from flops_fit.fitting.synthetic import synthetic_runs
from flops_fit.store.run_store import RunStore
from flops_fit.store.runs import RunResult
from flops_fit.training.steps import evaluate


class AlwaysClass(torch.nn.Module):
    """Predicts one class for every image: its top-1 error is the share of other labels."""

    def __init__(self, label: int, classes: int) -> None:
        super().__init__()
        self.label, self.classes = label, classes

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(len(images), self.classes)
        logits[:, self.label] = 1.0
        return logits


def test_the_top1_error_is_the_share_of_images_whose_best_logit_is_not_the_label():
    labels = torch.tensor([0, 1, 2, 0, 0, 3, 1, 0, 2, 0])
    data = ImageTensors(torch.zeros(10, 1, 4, 4), labels, mean=[0.0], std=[1.0])
    spec = flops_fit.plan(model="vit", dataset="digits", budgets=[1e12], sizes=[32, 64, 96],
                          eval_tokens=10, batch_size=3, min_steps=1).runs[0]
    loss_fn = flops_fit.get_loss("cross-entropy")
    _, bpb, error = evaluate(AlwaysClass(0, 4), data, loss_fn, "images", spec, torch.device("cpu"),
                             contextlib.nullcontext(), 1)
    assert error == pytest.approx(5 / 10) and math.isnan(bpb)


def test_a_vit_run_records_it_and_the_store_keeps_it(tmp_path):
    plan = flops_fit.plan(model="vit", dataset="digits", budgets=[1e12], sizes=[32, 64, 96], batch_size=16,
                          min_steps=1, eval_tokens=64)
    spec = dataclasses.replace(plan.runs[0], steps=5, tokens=5 * 16, run_id="")
    plan.runs[:] = [spec]
    result = flops_fit.train(spec)
    assert result.status == "done" and 0.0 <= result.top1_error <= 1.0
    assert result.top1_error * 64 == pytest.approx(round(result.top1_error * 64))  # a share of 64 images
    with RunStore(tmp_path, create=True) as store:
        store.add_plan(plan)
        store.record(result)
        frame = store.runs_frame()
    assert frame["top1_error"].tolist() == [result.top1_error]
    text = flops_fit.plan(model="gpt", budgets=[1e11], span=16, tokens_per_param=100, seq_len=64,
                          model_config={"n_layer": 2, "head_dim": 4}).runs[0]
    assert math.isnan(RunResult(run_id=text.run_id, status="done").top1_error)  # not an image classifier


def test_fitting_the_error_reads_its_column_and_leaves_the_loss_curves_out():
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7)
    frame["top1_error"] = frame["loss"] / 10  # any positive metric with a minimum per budget
    fitted = fit(frame, method="all", metric="error", bootstrap=0)
    assert "envelope" in fitted.skipped and fitted.runs.label == "top-1 error"
    assert fitted["isoflop"].predict(1e19).iloc[0].loss == pytest.approx(
        fit(frame, method="isoflop", bootstrap=0).predict(1e19).iloc[0].loss / 10, rel=1e-6)
    with pytest.raises(FitInputError, match="no top-1 error column 'top1_error'.*metric='loss'"):
        fit(frame.drop(columns=["top1_error"]), method="isoflop", metric="error")
    assert np.isfinite(fitted["parametric"].params["E"])


def test_runs_that_made_no_mistake_are_named_as_such_not_as_a_wrong_column():
    """A small held-out split of an easy image folder scored top-1 error 0 for most runs; `fit --metric error`
    said the column "must hold finite positive values ... drop those runs or map the right column", though the
    column was right and dropping them left too few runs."""
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7)
    frame["top1_error"] = frame["loss"] / 10
    frame["run_id"] = [f"r{i}" for i in range(len(frame))]
    frame.loc[[2, 5], "top1_error"] = 0.0
    with pytest.raises(FitInputError, match=r"^DataFrame: 2 run\(s\) made no mistake on the held-out images \(top-1 error "
                                            r"0: r2, r5\).*hold out more \(or harder\) images.*--metric loss"):
        fit(frame, method="isoflop", metric="error", bootstrap=0)


def test_bits_per_byte_asked_of_image_runs_points_at_the_error_not_at_retraining():
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7)
    frame["top1_error"], frame["bpb"] = frame["loss"] / 10, np.nan  # a sweep's store: image runs have no bpb
    # it said bpb "is recorded ... not for sweeps trained before flops-fit recorded it; fit with metric='loss'"
    with pytest.raises(FitInputError, match=r"have no bits per byte: these are image-classification runs .*"
                                            r"metric='error' or metric='loss'"):
        fit(frame, method="isoflop", metric="bpb")


def test_the_summary_names_the_fitted_error_in_its_r2_not_the_loss():
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7)
    frame["top1_error"] = frame["loss"] / 10
    error = fit(frame, method="parametric", metric="error", bootstrap=0)
    assert error.diagnostics.r2_of == "log top-1 error, per run"  # it read "log loss, per run"
    assert "R^2 (log top-1 error, per run)" in error.summary()
    assert fit(frame, method="parametric", bootstrap=0).diagnostics.r2_of == "log loss, per run"


def test_the_error_law_recovers_a_known_frontier_and_the_report_plots_it(tmp_path):
    from flops_fit.fitting.laws.error_law import error_frontier, fit_error_law
    from flops_fit.fitting.report.html_report import write_report

    law = {"a": 40.0, "b": 0.35, "d": 2e9, "c": 0.08}
    flops = np.geomspace(1e10, 1e14, 12)
    best = law["a"] * (flops + law["d"]) ** -law["b"] + law["c"]
    worse = best * 1.3  # runs off the frontier do not move it
    c, e = error_frontier(np.concatenate([flops, flops * 1.01]), np.concatenate([best, worse]))
    assert c.tolist() == flops.tolist()
    fitted = fit_error_law(np.concatenate([flops, flops * 1.01]), np.concatenate([best, worse]), bootstrap=20)
    assert fitted.params["b"] == pytest.approx(law["b"], rel=0.02) and fitted.params["c"] == pytest.approx(0.08, abs=0.005)
    assert fitted.error(np.array([1e15]))[0] == pytest.approx(law["a"] * (1e15 + law["d"]) ** -law["b"] + law["c"],
                                                               rel=0.01)
    assert "withheld" not in fitted.summary() and "b = 0.35 [0.35" in fitted.summary()
    noisy = best * (1 + 0.01 * np.random.default_rng(3).standard_normal(best.size))
    vague = fit_error_law(flops, noisy, bootstrap=20)  # a noisy frontier trades a against d and b
    assert not vague.determined("a") and vague.intervals["a"][1] / vague.intervals["a"][0] > 1e3
    assert "a = " in vague.summary() and "(interval withheld: the resamples do not determine it)" in vague.summary()
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19, 1e20), sizes_per_budget=5).drop(columns=["curve"])
    frame["top1_error"] = 40.0 * (frame["flops"] * frame["loss"] / frame["loss"].min()) ** -0.3 + 0.05
    text = write_report(fit(frame, method="isoflop", bootstrap=0), tmp_path / "r.html").read_text()
    assert "Top-1 error against compute" in text and "alt='top1_error'" in text
    assert (tmp_path / "r_plots" / "top1_error.svg").is_file()


def test_the_command_line_fits_the_top1_error(tmp_path, capsys):
    from flops_fit.cli.main import main

    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7).drop(columns=["curve"])
    frame["top1_error"] = frame["loss"] / 10
    frame.to_csv(tmp_path / "runs.csv", index=False)
    assert main(["fit", str(tmp_path / "runs.csv"), "--method", "isoflop", "--bootstrap", "10",
                 "--metric", "error", "--json", "--predict", "1e19"]) == 0
    out = json.loads(capsys.readouterr().out)
    loss = fit(frame, method="isoflop", bootstrap=0).predict(1e19).iloc[0].loss  # the same runs' loss
    assert out["metric"] == "error" and out["table"][0]["budget"] == 1e19
    assert out["table"][0]["loss"] == pytest.approx(loss / 10, rel=1e-6)
    frame.drop(columns=["top1_error"]).to_csv(tmp_path / "loss-only.csv", index=False)
    assert main(["fit", str(tmp_path / "loss-only.csv"), "--metric", "error"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("flops-fit: error:") and "top-1 error" in err and "\n" not in err


def test_an_image_sweeps_inference_sizing_speaks_of_samples_and_its_error():
    """`fit --metric error --inference-tokens 1e9` on an image sweep said "inference tokens", "per token
    served", "tokens/param" and "loss to reach"."""
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7)
    frame["top1_error"] = frame["loss"] / 10
    runs = load_runs(frame, metric="error")
    runs = runs.derived(runs.frame, metadata={"plan": {"unit": "sample"}})  # as an image sweep's store records it
    text = fit(runs, method="parametric", bootstrap=0).sizing_summary([1e19], 1e9, totals=[1e21])
    assert "sizing for 1B inference samples" in text and "per sample served" in text
    assert "top-1 error to reach" in text and "samples/param" in text and "the lowest top-1 error for a total" in text
    assert "token" not in text and "loss" not in text


def test_a_forecast_of_the_top1_error_names_the_error_not_a_loss():
    """`fit --metric error --holdout forward` printed the forecast's top-1 error as "loss 0.6532 [...]" and its
    source as "loss from the weighted average ...", in the text and the report."""
    from flops_fit.fitting.report.html_report import _forecast

    runs = synthetic_runs(budgets=(1e17, 3e17, 1e18, 3e18, 1e19), sizes_per_budget=6, seed=1).drop(columns="curve")
    runs["top1_error"] = np.exp(-1 / runs["loss"])  # an error in (0, 1) that falls as the loss does
    forecast = fit(runs, "all", metric="error", holdout="forward", bootstrap=20, tracking=False).forecast
    head = forecast.summary().splitlines()[1:4]
    assert ", top-1 error 0." in head[0] and "loss" not in head[0], head
    assert head[2].startswith("  top-1 error from "), head
    page = _forecast(forecast)
    assert ", top-1 error 0." in page and "<li>top-1 error from " in page


def test_a_forecast_of_the_top1_error_says_its_interval_is_calibrated_on_losses(tmp_path, capsys):
    """`fit --metric error` forecast the top-1 error with an interval sized by the reach law and prior learned on
    public sweeps' losses, and said only "the reach law of public sweeps' answers". The text (short and verbose),
    the JSON and the report now say it; a loss forecast says nothing of it."""
    from flops_fit.cli.main import main

    runs = synthetic_runs(budgets=(1e17, 3e17, 1e18, 3e18, 1e19), sizes_per_budget=6, seed=1).drop(columns="curve")
    runs["top1_error"] = np.exp(-1 / runs["loss"])
    runs.to_csv(tmp_path / "runs.csv", index=False)
    args = ["fit", str(tmp_path / "runs.csv"), "--method", "all", "--holdout", "forward", "--bootstrap", "20",
            "--tracking", "off"]
    said = "interval is sized by the prior and the reach law learned on public sweeps' losses, not top-1 errors"
    assert main([*args, "--metric", "error"]) == 0
    assert f"Note: the top-1 error's {said}" in capsys.readouterr().out
    fitted = fit(runs, "all", metric="error", holdout="forward", bootstrap=20, tracking=False)
    assert f"  note: the top-1 error's {said}" in fitted.forecast.summary()
    assert any(said in n for n in json.loads(fitted.to_json())["forecast"]["notes"])
    from html import escape

    from flops_fit.fitting.report.html_report import _forecast
    assert escape(said) in _forecast(fitted.forecast)
    assert main(args) == 0
    assert "public sweeps' losses, not" not in capsys.readouterr().out
