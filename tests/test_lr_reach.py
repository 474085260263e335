"""The guard on a tuned law's reach (sweeps.tuned): a run within `reach` of the tune's grid takes
the law's rate, beyond it the planner refuses, falls back to the tune's centre rule or
extrapolates (hparams.beyond), and says by what factor; an exponent the tune did not identify is
never extrapolated silently. Laws are written by hand here, not by the code under test."""

import json
import re

import pytest

import flops_fit
from flops_fit.cli.main import main
from flops_fit.errors import PlanError

MODEL = {"n_layer": 1, "n_head": 1}
# At batch 8 x 16 the planner gives width 8 21,696 tokens at 4e8 FLOPs, 86,800 at 1.6e9 and
# 173,600 at 3.2e9 (6N + attention FLOPs per token; checked below).
TOKENS_8 = {4e8: 21696, 1.6e9: 86800, 3.2e9: 173600}


def write_law(folder, tokens_interval=(-0.3, -0.1)):
    """lr = 0.5 tokens^-0.2 width^-1, tuned on tokens 8,000-22,000 and widths 8-16 at batch 8,
    around the inverse-width rule (0.01 x 8 / width) whose cells' best was half of it."""
    centre = {"lr": None, "lr_rule": "inverse-width", "base_lr": 0.01, "base_width": 8}
    cells = [{"size": w, "scale": float(w), "tokens": t, "batch_size": 8, "flops": 1.0, "in_law": True,
              "reason": None, "rates": [0.01 * 8 / w * m for m in (0.5, 1, 2)], "lr_opt": 0.005 * 8 / w}
             for w, t in ((8, 22000), (16, 8000))]
    data = {"format": "flops-fit-hparams/1", "model": "gpt", "beta2": 0.99,
            "setup": {"batch_size": 8, "hparams": centre}, "tune": {"multipliers": [0.5, 1, 2]}, "cells": cells,
            "law": {"scale": "width", "band": 0.3, "coefficients": {
                "m": {"value": 0.5, "lo": 0.1, "hi": 1.0, "fitted": True},
                "a": {"value": 0.2, "lo": -tokens_interval[1], "hi": -tokens_interval[0], "fitted": True},
                "b": {"value": 1.0, "lo": 0.8, "hi": 1.2, "fitted": True}, "c": None}}}
    folder.mkdir(exist_ok=True)
    (folder / "hparams.json").write_text(json.dumps(data))
    return folder


def plan(folder, budget, **hparams):
    return flops_fit.plan(model="gpt", budgets=[budget], sizes=[8, 12, 16], seq_len=16, batch_size=8, min_steps=5,
                          model_config=MODEL, hparams={"tuned": str(folder), **hparams})


def test_within_the_grid_runs_take_the_law_and_say_nothing_more(tmp_path):
    folder = write_law(tmp_path / "t")
    p = plan(folder, 4e8)
    assert next(r.tokens for r in p.runs if r.size == 8) == TOKENS_8[4e8]
    for r in p.runs:
        assert r.lr == pytest.approx(0.5 * r.tokens ** -0.2 / r.size, rel=1e-9)
        assert r.lr_source == f"tuned:{folder}"


def test_past_reach_the_planner_refuses_by_default_naming_the_factor(tmp_path):
    folder = write_law(tmp_path / "t")
    factor = TOKENS_8[3.2e9] / 22000  # 7.9: width 8's tokens over the grid's most
    with pytest.raises(PlanError, match=rf"beyond the tuned law's grid .* by tokens x{factor:.3g}.*past reach = 4"):
        plan(folder, 3.2e9)


def test_within_reach_but_beyond_the_grid_the_factor_is_said(tmp_path):
    folder = write_law(tmp_path / "t")
    p = plan(folder, 1.6e9)
    run = next(r for r in p.runs if r.size == 8)
    assert run.tokens == TOKENS_8[1.6e9]
    assert run.lr == pytest.approx(0.5 * run.tokens ** -0.2 / 8, rel=1e-9)
    assert run.lr_source == f"tuned:{folder} (beyond the tune: tokens x{TOKENS_8[1.6e9] / 22000:.3g})"
    assert f"beyond the tune: tokens x{TOKENS_8[1.6e9] / 22000:.3g}" in p.table()


def test_beyond_centre_falls_back_to_the_tunes_centre_rule_times_its_best_multiplier(tmp_path):
    folder = write_law(tmp_path / "t")
    p = plan(folder, 3.2e9, beyond="centre")
    for r in p.runs:
        factor = r.tokens / 22000
        if factor > 4:
            assert r.lr == pytest.approx(0.01 * 8 / r.size * 0.5, rel=1e-9)  # inverse-width x the cells' 0.5
            assert r.lr_source.startswith("centre:inverse-width x0.5 (beyond tuned:") and "tokens x" in r.lr_source
        else:
            assert r.lr == pytest.approx(0.5 * r.tokens ** -0.2 / r.size, rel=1e-9)
    assert "centre" in p.table() and str(folder) in p.table()


def test_beyond_extrapolate_uses_the_law_and_says_how_far(tmp_path):
    folder = write_law(tmp_path / "t")
    p = plan(folder, 3.2e9, beyond="extrapolate", reach=2.0)
    run = next(r for r in p.runs if r.size == 8)
    assert run.lr == pytest.approx(0.5 * TOKENS_8[3.2e9] ** -0.2 / 8, rel=1e-9)
    assert f"tokens x{TOKENS_8[3.2e9] / 22000:.3g}" in run.lr_source


def test_an_exponent_not_identified_is_not_extrapolated_silently(tmp_path):
    folder = write_law(tmp_path / "t", tokens_interval=(-0.3, 0.1))  # crosses zero
    p = plan(folder, 1.6e9)
    run = next(r for r in p.runs if r.size == 8)
    assert "exponent not identified for tokens" in run.lr_source
    assert "did not identify the exponent of tokens" in p.table()


@pytest.mark.parametrize("layout", ["coefficients", "exponents"])
def test_a_tokens_exponent_the_tune_could_not_fit_is_not_extrapolated_silently(tmp_path, layout):
    """A tune at one budget cannot tell the tokens' exponent from the width's: its law holds it at 0, not fitted.
    A sweep at 2x those tokens said only 'beyond the tune: tokens x2', and the header named no unidentified
    exponent, as though the law knew tokens did not matter; both now say the tokens' exponent is not identified."""
    folder = write_law(tmp_path / "t")
    data = json.loads((folder / "hparams.json").read_text())
    law = data["law"]
    law["coefficients"]["a"] = {"value": 0.0, "lo": None, "hi": None, "fitted": False}
    law["coefficients"]["m"] = {"value": 0.04, "lo": 0.01, "hi": 0.1, "fitted": True}  # the cells' 0.04 / width
    if layout == "exponents":  # as a tune writes it (format 2): signed exponents per variable
        data["format"] = "flops-fit-hparams/2"
        law["exponents"] = {"tokens": {"value": -0.0, "lo": None, "hi": None, "fitted": False, "identified": False},
                            "width": {"value": -1.0, "lo": -1.2, "hi": -0.8, "fitted": True, "identified": True}}
    (folder / "hparams.json").write_text(json.dumps(data))
    p = plan(folder, 1.6e9)  # width 8 at 86,800 tokens: 3.9x the grid's most, within reach
    run = next(r for r in p.runs if r.size == 8)
    assert run.lr == pytest.approx(0.04 / 8, rel=1e-9)  # the law's rate, tokens' exponent 0 as recorded
    assert f"beyond the tune: tokens x{TOKENS_8[1.6e9] / 22000:.3g}; exponent not identified for tokens" \
        in run.lr_source
    assert "the tune did not identify the exponent of tokens" in p.table()


@pytest.mark.parametrize("hparams, message", [
    ({"beyond": "ignore"}, "beyond must be one of ('refuse', 'centre', 'extrapolate')"),
    ({"reach": 0.5}, "reach must be a number >= 1"),
])
def test_bad_guard_options_are_one_line(tmp_path, capsys, hparams, message):
    folder = write_law(tmp_path / "t")
    spec = tmp_path / "sweep.toml"
    options = "\n".join(f"{k} = {json.dumps(v)}" for k, v in hparams.items())
    spec.write_text(f'[sweep]\nmodel = "gpt"\nbudgets = [4e8]\nsizes = [8, 12, 16]\nseq_len = 16\nbatch_size = 8\n'
                    f'min_steps = 5\n[model]\nn_layer = 1\nn_head = 1\n[hparams]\ntuned = "{folder}"\n{options}\n')
    code = main(["plan", str(spec)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err, err


def _edit(data, path, value):
    *keys, last = path
    for key in keys:
        data = data[key]
    data[last] = value


@pytest.mark.parametrize("path, value, message", [
    (("law", "coefficients", "m", "value"), float("inf"), "the law's scale or coefficients are invalid"),
    (("law", "exponents"), [1, 2], "missing or malformed entry"),
    (("beta2",), 1.5, "beta2 1.5 is not in [0, 1)"),
    (("law", "band"), float("nan"), "the law's band nan is not a finite width >= 0"),
    (("range",), {"tokens": [float("nan"), 22000]}, "the range of tokens [nan, 22000.0] is not 0 <= min <= max"),
    (("batch_law",), {"k": 0, "e": 0.3}, "the batch law (k, e) = (0.0, 0.3) needs a finite k > 0"),
    # width^+3 for width^-1: 0.5 * 22000^-0.2 * 8^3 = 34.7 against the cell's best 0.005, and
    # 0.5 * 8000^-0.2 * 16^3 = 339 against 0.0025: x6.94e3 and x1.36e5, median (geometric mean) x3.07e4
    (("law", "coefficients", "b", "value"), -3.0, "the law misses the best rates of the cells it was fitted on by "
     "x3.07e+04 (median), so it is not the law fitted to them (edited by hand?)"),
])
def test_a_hand_edited_hparams_json_with_impossible_numbers_is_one_line(tmp_path, capsys, path, value, message):
    """A law whose m is infinite planned every rate inf, a beta2 of 1.5 went to AdamW, a NaN range
    read as a run x638 beyond the grid, a list where a table belongs was a traceback, an exponent
    edited by hand planned rates its own cells never saw: each is
    now refused naming the entry, before anything is planned."""
    folder = write_law(tmp_path / "t")
    data = json.loads((folder / "hparams.json").read_text())
    _edit(data, path, value)
    (folder / "hparams.json").write_text(json.dumps(data))
    code = main(["plan", "--model", "gpt", "--budgets", "4e8", "--sizes", "8,12,16", "--seq-len", "16",
                 "--batch-size", "8", "--min-steps", "5", "--hparams", str(folder)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("flops-fit: error: hparams ") and message in err, err


@pytest.mark.parametrize("tuned_with, sweep_with, message", [
    ({}, {"parametrization": "per-layer", "base_width": 8}, "was tuned with the standard parametrization, this "
     "sweep's model has parametrization 'per-layer' at base_width 8: its rates would be scaled with the width twice"),
    ({"parametrization": "mup", "base_width": 8}, {}, "was tuned with parametrization 'mup' at base_width 8, this "
     "sweep's model has the standard parametrization"),
    ({"parametrization": "per-layer", "base_width": 8}, {"parametrization": "per-layer", "base_width": 16},
     "set [model] parametrization = \"per-layer\" and base_width = 8 as the tune had them"),
])
def test_a_law_tuned_under_another_parametrization_is_refused(tmp_path, tuned_with, sweep_with, message):
    """A law tuned on the standard GPT already falls with the width; a per-layer or muP sweep
    planned from it scaled its layers' rates by base_width / width a second time, silently."""
    folder = write_law(tmp_path / "t")
    data = json.loads((folder / "hparams.json").read_text())
    data["setup"]["model_config"] = {**MODEL, "head_dim": None, **tuned_with}
    (folder / "hparams.json").write_text(json.dumps(data))
    with pytest.raises(PlanError, match=re.escape(message)):
        flops_fit.plan(model="gpt", budgets=[4e8], sizes=[8, 12, 16], seq_len=16, batch_size=8, min_steps=5,
                       model_config={**MODEL, **sweep_with}, hparams={"tuned": str(folder)})
    same = flops_fit.plan(model="gpt", budgets=[4e8], sizes=[8, 12, 16], seq_len=16, batch_size=8, min_steps=5,
                          model_config={**MODEL, **tuned_with}, hparams={"tuned": str(folder)})
    assert [r.lr_source for r in same.runs] == [f"tuned:{folder}"] * 3


def test_the_fit_report_lists_runs_whose_rate_came_from_beyond_the_tune():
    import pandas as pd

    from flops_fit.fitting.inputs import Runs
    from flops_fit.fitting.report.rate_notes import reach_note

    sources = ["tuned:t", "tuned:t (beyond the tune: tokens x2.3)", "centre:marin x0.2 (beyond tuned:t: tokens x7.9)"]
    text = "".join(reach_note(Runs(pd.DataFrame({"lr_source": sources}), "a store")))
    assert "2 of 3 runs took their rate from a tuned law past its tune's grid" in text
    assert "tokens x2.3" in text and "tokens x7.9" in text
    assert reach_note(Runs(pd.DataFrame({"lr_source": ["tuned:t", "marin"]}), "a store")) == []


def test_the_forecast_says_how_far_its_target_carries_the_tuned_law(tmp_path):
    """A tune's hparams.json records the most tokens it saw (range) and its cells: the forecast's
    D_opt over the most tokens, and over the most any cell of N_opt's size or larger got, are the
    factors the report prints; a forecast inside both says nothing."""
    from types import SimpleNamespace

    import pandas as pd

    from flops_fit.fitting.inputs import Runs
    from flops_fit.fitting.report.rate_notes import target_rate_note

    law = tmp_path / "hparams.json"
    cells = [{"params": 1e3, "tokens": 2.0e6, "in_law": True}, {"params": 1e4, "tokens": 4.0e5, "in_law": True},
             {"params": 1e5, "tokens": 1.0e5, "in_law": True}, {"params": 1e6, "tokens": 9.0e9, "in_law": False}]
    law.write_text(json.dumps({"format": "flops-fit-hparams/2", "range": {"tokens": [1e5, 2.0e6]}, "cells": cells}))
    runs = Runs(pd.DataFrame({"lr_source": [f"tuned:{law}", f"tuned:{law} (beyond the tune: tokens x1.5)"]}),
                "a store")

    def note(n_opt, d_opt):
        return "".join(target_rate_note(runs, SimpleNamespace(n_opt=(n_opt, 0, 0), d_opt=(d_opt, 0, 0))))

    far = note(5e3, 5.0e7)  # past every cell: 25x the most tokens, 125x what sizes >= 5e3 got (4e5 at 1e4)
    assert "25x the most tokens it was tuned on" in far and "125x beyond the most it gave a model" in far
    assert str(law) in far
    inside_range = note(5e4, 1.0e6)  # within the tokens' range, but 10x what the 1e5-parameter cell got
    assert "0.5x the most tokens" in inside_range and "10x beyond the most it gave a model" in inside_range
    assert note(2e6, 5e4) == ""  # past the largest cell's size, inside what it got: the largest cell decides
    assert note(5e2, 1.0e6) == ""
    images = Runs(runs.frame, "an image sweep's store", metadata={"plan": {"unit": "sample"}})
    said = "".join(target_rate_note(images, SimpleNamespace(n_opt=(5e3, 0, 0), d_opt=(5.0e7, 0, 0))))
    assert "D_opt 50M samples" in said and "25x the most samples it was tuned on" in said and "tokens" not in said
    moved = Runs(pd.DataFrame({"lr_source": [f"tuned:{tmp_path / 'gone.json'}", "marin"]}), "a store")
    assert target_rate_note(moved, SimpleNamespace(n_opt=(5e3, 0, 0), d_opt=(5.0e7, 0, 0))) == []


def test_runs_read_from_a_table_keep_where_each_rate_came_from():
    """The report's rate notes read ``lr_source``: reading a store's (or any table's) runs keeps it."""
    import pandas as pd

    from flops_fit.fitting.inputs import load_runs
    from flops_fit.fitting.report.rate_notes import reach_note

    sources = ["tuned:t", "tuned:t (beyond the tune: tokens x2.3)"] * 4
    frame = pd.DataFrame({"params": [1e4, 2e4, 4e4, 8e4] * 2, "tokens": [1e6, 5e5, 2.5e5, 1.25e5] * 2,
                          "loss": [3.0, 2.9, 2.95, 3.1, 3.01, 2.91, 2.96, 3.11], "lr_source": sources})
    runs = load_runs(frame)
    assert list(runs.frame["lr_source"]) == sources
    assert "4 of 8 runs took their rate from a tuned law past its tune's grid" in "".join(reach_note(runs))


def test_an_image_sweeps_rates_name_samples_not_tokens():
    """The ViT demo's plan said "lr = 0.7729 * tokens^-0.243 ...", "beyond the tune: tokens x1.18" of a sweep
    that counts samples (its tables said samples since stop 53)."""
    import copy

    from flops_fit.sweeps.demo import DEMOS

    config = copy.deepcopy(DEMOS["vit"])
    plan = flops_fit.plan(**config["sweep"], model_config=config["model"], dataset_config=config["dataset"],
                          hparams=config["hparams"])
    head = plan.headline()
    assert "lr = 0.7729 * samples^-0.243 * width^-0.456" in head and "beyond the tune: samples x" in head
    assert "exponent of samples, width" in head and "its branches' samples" in head and "tokens" not in head
    assert all("tokens" not in r.lr_source for r in plan.runs)
