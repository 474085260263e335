"""Loading runs for a fit: column mapping, derived columns and every bad-input error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from flops_fit.cli.main import main
from flops_fit.errors import NoFitError
from flops_fit.fitting import FitInputError, fit, load_runs
from flops_fit.fitting.inputs import check_varies
from flops_fit.fitting.synthetic import synthetic_runs


def _table(**overrides):
    frame = pd.DataFrame({"params": [1e6, 2e6, 4e6, 8e6], "tokens": [1e8, 5e7, 2.5e7, 1.25e7],
                          "loss": [3.1, 3.0, 3.05, 3.2]})
    for k, v in overrides.items():
        frame[k] = v
    return frame


def test_tokens_derived_from_flops_and_flops_from_tokens():
    runs = load_runs(pd.DataFrame({"N": [1e6, 2e6], "C": [6e14, 1.2e15], "L": [3.0, 2.9]}),
                     params_col="N", flops_col="C", loss_col="L")
    assert np.allclose(runs.frame["tokens"], [1e8, 1e8])
    runs = load_runs(_table())
    assert np.allclose(runs.frame["flops"], 6 * runs.frame["params"] * runs.frame["tokens"])
    runs = load_runs(_table(), flops_per_param_token=8.0)
    assert np.allclose(runs.frame["flops"], 8 * runs.frame["params"] * runs.frame["tokens"])


def test_csv_and_dataframe_give_the_same_runs(tmp_path):
    frame = synthetic_runs(budgets=(1e17,), sizes_per_budget=4).drop(columns=["curve"])
    frame.to_csv(tmp_path / "runs.csv", index=False)
    a, b = load_runs(frame), load_runs(tmp_path / "runs.csv")
    pd.testing.assert_frame_equal(a.frame, b.frame)
    assert b.source == str(tmp_path / "runs.csv")


def test_a_table_as_json_lines_json_records_or_parquet_gives_the_csvs_runs(tmp_path, monkeypatch):
    """A lab's runs table in the forms pandas writes (it said "unknown file type; give a .csv file")."""
    frame = synthetic_runs(budgets=(1e17,), sizes_per_budget=4).drop(columns=["curve"])
    frame["total_flops"] = 9456351902178213888  # an integer past int64, as (Mis)Fitting's C: pandas' reader refused it
    frame.to_csv(tmp_path / "runs.csv", index=False)
    frame.to_json(tmp_path / "runs.jsonl", orient="records", lines=True)
    frame.to_json(tmp_path / "runs.json", orient="records")
    written = ["runs.jsonl", "runs.json"]
    try:
        frame.to_parquet(tmp_path / "runs.parquet")
        written.append("runs.parquet")
    except ImportError:  # no pyarrow here: the refusal below still runs
        pass
    expected = load_runs(tmp_path / "runs.csv").frame
    for name in written:
        runs = load_runs(tmp_path / name)
        pd.testing.assert_frame_equal(runs.frame, expected, check_dtype=False)
        assert runs.source == str(tmp_path / name)
    (tmp_path / "columns.json").write_text('{"params": [1e6, 2e6], "loss": [3.1, 3.0]}')
    with pytest.raises(FitInputError, match=r"columns.json: not a readable json table of runs \(expected one JSON "
                       r"object a run\)"):
        load_runs(tmp_path / "columns.json")
    (tmp_path / "other.parquet").write_bytes(b"PAR1")

    def no_engine(*args, **kwargs):  # pandas without pyarrow or fastparquet raises this
        raise ImportError("Unable to find a usable engine; tried using: 'pyarrow', 'fastparquet'.")

    monkeypatch.setattr(pd, "read_parquet", no_engine)
    with pytest.raises(FitInputError, match=r"other.parquet: reading parquet needs pyarrow: pip install pyarrow"):
        load_runs(tmp_path / "other.parquet")


def test_a_csvs_schedule_column_is_read_as_the_same_table_as_json_lines_reads_it(tmp_path, capsys):
    """`fit tests/data/demo_runs.csv --method curve` refused the CSV's schedule column (JSON text) as "no
    schedule", while the same runs as JSON lines fitted: both now give the curve law the same answer."""
    demo = Path(__file__).parent / "data" / "demo_runs.csv"
    frame = pd.read_csv(demo)
    for column in ("schedule", "curve"):
        frame[column] = frame[column].map(json.loads)
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in frame.to_dict("records")))
    from_csv, from_json = load_runs(demo), load_runs(tmp_path / "runs.jsonl")
    assert list(from_csv.frame["schedule"]) == list(frame["schedule"]) == list(from_json.frame["schedule"])
    assert fit(demo, "curve", bootstrap=0, tracking=False).params == \
        fit(tmp_path / "runs.jsonl", "curve", bootstrap=0, tracking=False).params
    assert main(["fit", str(demo), "--method", "curve", "--bootstrap", "0"]) == 0
    assert "schedule" not in capsys.readouterr().err
    plain = pd.DataFrame({"params": [1e6, 2e6], "tokens": [2e7, 1e7], "loss": [3.1, 3.0],
                          "schedule": ["cosine", "{not json"]})  # a schedule named, not recorded: kept as it is
    assert list(load_runs(plain).frame["schedule"]) == ["cosine", "{not json"]


def test_a_semicolon_separated_table_with_decimal_commas_gives_the_csvs_runs(tmp_path):
    """A spreadsheet's export in a decimal-comma locale (it said "no params column 'params'; available
    columns: 'params;tokens;loss'" and told the user to name the column)."""
    frame = synthetic_runs(budgets=(1e17,), sizes_per_budget=4).drop(columns=["curve"])
    frame["name"] = [f"run {i}, seed 0" for i in range(len(frame))]  # text with commas stays text
    frame.to_csv(tmp_path / "runs.csv", index=False)
    frame.to_csv(tmp_path / "semi.csv", index=False, sep=";")
    frame.to_csv(tmp_path / "excel.csv", index=False, sep=";", decimal=",")
    assert "," in (tmp_path / "excel.csv").read_text().splitlines()[1]
    expected = load_runs(tmp_path / "runs.csv", keep=("name",)).frame
    for name in ("semi.csv", "excel.csv"):
        pd.testing.assert_frame_equal(load_runs(tmp_path / name, keep=("name",)).frame, expected)


def test_a_csv_of_tabs_or_a_tsv_of_commas_gives_the_csvs_runs(tmp_path):
    """A tab-separated .csv said "no params column 'params'; available columns: 'params\\ttokens\\tloss'"
    (a comma-separated .tsv the same, with commas)."""
    frame = synthetic_runs(budgets=(1e17,), sizes_per_budget=4).drop(columns=["curve"])
    frame.to_csv(tmp_path / "runs.csv", index=False)
    frame.to_csv(tmp_path / "tabs.csv", index=False, sep="\t")
    frame.to_csv(tmp_path / "commas.tsv", index=False)
    expected = load_runs(tmp_path / "runs.csv").frame
    for name in ("tabs.csv", "commas.tsv"):
        pd.testing.assert_frame_equal(load_runs(tmp_path / name).frame, expected)


def test_a_hand_written_table_with_spaces_after_its_commas_gives_the_csvs_runs(tmp_path):
    """"params, tokens, loss" (it said "no loss column 'loss'; available columns: 'params', ' tokens', ' loss'")."""
    frame = synthetic_runs(budgets=(1e17,), sizes_per_budget=4)[["params", "tokens", "loss", "budget"]]
    frame.to_csv(tmp_path / "runs.csv", index=False)
    lines = [", ".join(frame.columns) + " "] + [", ".join(f"{v!r}" for v in row) for row in frame.itertuples(index=False)]
    (tmp_path / "typed.csv").write_text("\n".join(lines) + "\n")
    pd.testing.assert_frame_equal(load_runs(tmp_path / "typed.csv").frame, load_runs(tmp_path / "runs.csv").frame)


def test_a_table_a_windows_tool_saved_with_a_bom_and_crlf_gives_the_csvs_runs(tmp_path):
    """JSON lines with a UTF-8 BOM (PowerShell, Notepad) were refused: "not a readable json table of runs
    (Unexpected UTF-8 BOM ...)"; a CSV with one was read."""
    frame = synthetic_runs(budgets=(1e17,), sizes_per_budget=4).drop(columns=["curve"])
    frame.to_csv(tmp_path / "runs.csv", index=False)
    expected = load_runs(tmp_path / "runs.csv").frame
    for name, orient, lines in (("runs.jsonl", "records", True), ("runs.json", "records", False), ("runs.csv", None, None)):
        text = frame.to_csv(index=False) if orient is None else frame.to_json(orient=orient, lines=lines)
        windows = tmp_path / f"windows-{name}"
        windows.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
        pd.testing.assert_frame_equal(load_runs(windows).frame, expected, check_dtype=False)


def test_a_budget_or_curve_column_named_by_hand_must_be_there(tmp_path, capsys):
    """`--budget-col nobudget` on a table without it fitted budgets rounded from FLOPs, saying nothing of
    the column asked for; the defaults stay optional."""
    from flops_fit.cli.main import main

    frame = synthetic_runs(budgets=(1e17, 1e18), sizes_per_budget=4).drop(columns=["curve"])
    frame.to_csv(tmp_path / "runs.csv", index=False)
    assert main(["fit", str(tmp_path / "runs.csv"), "--budget-col", "C_nominal", "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "runs.csv: no budget column 'C_nominal'; available columns: " in err \
        and "--budget-col" in err, err
    with pytest.raises(FitInputError, match="no curve column 'history'; available columns: .* curve_col="):
        load_runs(frame, curve_col="history")
    assert len(load_runs(frame.drop(columns=["budget"]))) == len(frame)  # no budget column: optional


def test_a_tokens_or_flops_column_named_by_hand_must_be_there(capsys):
    """`--tokens-col tokens_seen` on a table without it (a typo, or a column of another export) fitted tokens
    derived from its FLOPs as FLOPs / 6N: where its FLOPs count more than 6 N D (attention, here 1.3x), every
    run's tokens were 1.3x too many, and nothing said the column was not read. The defaults stay optional."""
    frame = synthetic_runs(budgets=(1e17, 1e18), sizes_per_budget=4).drop(columns=["curve"])
    frame["flops"] = 1.3 * 6 * frame["params"] * frame["tokens"]
    with pytest.raises(FitInputError, match=r"DataFrame: no tokens column 'tokens_seen'; available columns: .* "
                                            r"\(CLI: --tokens-col\)$"):
        load_runs(frame, tokens_col="tokens_seen")
    with pytest.raises(FitInputError, match="no flops column 'C'; available columns: .* flops_col="):
        load_runs(frame, flops_col="C")
    assert load_runs(frame.drop(columns=["tokens"])).frame["tokens"].tolist() == \
        pytest.approx((1.3 * frame["tokens"]).tolist())  # no tokens column: derived from the FLOPs, as documented


def test_a_broken_line_of_json_lines_is_named_by_its_line_in_the_file(tmp_path):
    """The fifth line broken said "(Expecting property name ...: line 1 column 14 (char 13))": every line
    is line 1 to json."""
    frame = synthetic_runs(budgets=(1e17,), sizes_per_budget=6).drop(columns=["curve"])
    lines = frame.to_json(orient="records", lines=True).splitlines()
    lines[4] = '{"params": 5,'
    (tmp_path / "runs.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(FitInputError, match=r"runs.jsonl: not a readable json table of runs \(line 5, column 14: "
                                            r"Expecting property name enclosed in double quotes\)"):
        load_runs(tmp_path / "runs.jsonl")


def test_curves_as_json_strings_are_parsed():
    frame = _table(curve=['[[1, 4.0], [2, 3.5]]'] * 4)
    runs = load_runs(frame)
    assert runs.has_curves and runs.frame["curve"][0].shape == (2, 2)


def test_curves_as_parquets_lists_are_read_and_a_broken_one_is_named(tmp_path):
    """A parquet table whose curve column holds lists of pairs (parquet's own form, read back as arrays of
    arrays) ended in a traceback: "ValueError: setting an array element with a sequence"; so did a curve
    that is no JSON."""
    frame = synthetic_runs(budgets=(1e17, 1e18), sizes_per_budget=4)
    frame["curve"] = [[[float(t), float(v)] for t, v in c] for c in frame["curve"]]
    as_json = frame.assign(curve=[json.dumps(c) for c in frame["curve"]])
    as_json.to_csv(tmp_path / "runs.csv", index=False)
    expected = load_runs(tmp_path / "runs.csv").frame
    try:
        frame.to_parquet(tmp_path / "runs.parquet")
    except ImportError:
        pytest.skip("no pyarrow here to write parquet")
    read = load_runs(tmp_path / "runs.parquet").frame
    assert all(np.array_equal(a, b) for a, b in zip(read["curve"], expected["curve"], strict=True))
    as_json.loc[2, "curve"] = as_json.loc[2, "curve"][:-3]
    as_json.to_csv(tmp_path / "broken.csv", index=False)
    with pytest.raises(FitInputError, match=r"broken.csv: run b1e\+17-s2's 'curve' is no list of \[tokens_seen, loss\] pairs "
                                            r"\(.*\); fix it, or drop the column"):
        load_runs(tmp_path / "broken.csv")


def test_exclude_top_drops_highest_losses_and_records_why():
    runs = load_runs(_table(), exclude_top=1)
    assert len(runs) == 3 and runs.frame["loss"].max() == 3.1
    assert runs.excluded == [{"run_id": "run3", "reason": "among the 1 highest losses (exclude_top)"}]


def test_an_exact_repeat_counts_once_and_seeds_are_kept():
    # A row pasted twice would weigh its run twice and narrow every bootstrap interval.
    frame = pd.concat([_table(), _table().iloc[[2]]], ignore_index=True).assign(lr=np.nan)  # NaN fields match
    frame.loc[len(frame)] = [1e6, 1e8, 3.12, np.nan]  # a second seed of the first cell: another measurement
    runs = load_runs(frame)
    assert len(runs) == 5 and runs.frame["run_id"].tolist() == ["run0", "run1", "run2", "run3", "run5"]
    assert runs.excluded == [{"run_id": "run4", "reason": "a repeat of run2 (the same size, tokens and loss): "
                                                          "counted once"}]
    assert runs.notes == ["1 run(s) repeat another run exactly (the same size, tokens and loss) and were counted once"]
    assert load_runs(_table()).notes == []


def test_exclude_top_counts_runs_not_copies():
    # The highest loss pasted twice: counted once first, so exclude_top=1 leaves that run out entirely.
    runs = load_runs(pd.concat([_table(), _table().iloc[[3]]], ignore_index=True), exclude_top=1)
    assert runs.frame["run_id"].tolist() == ["run0", "run1", "run2"]
    assert [x["run_id"] for x in runs.excluded] == ["run4", "run3"]


def test_a_doubled_table_fits_as_the_table_and_says_so():
    frame = synthetic_runs(budgets=(1e17, 1e18), sizes_per_budget=4, noise=0.01, seed=3).drop(columns=["curve"])
    once = fit(frame, "vpnls", bootstrap=20, tracking=False)
    twice = fit(pd.concat([frame, frame], ignore_index=True), "vpnls", bootstrap=20, tracking=False)
    pd.testing.assert_frame_equal(once.intervals(), twice.intervals())
    assert "note: 8 run(s) repeat another run exactly" in twice.summary()
    assert "repeat" not in once.summary()


def test_a_table_of_several_settings_says_so_and_where_fits_one():
    # Two training corpora at the same sizes in one table: one law fitted to both mixes their losses.
    frame = pd.concat([_table().assign(corpus="c4"), _table(loss=[3.3, 3.2, 3.25, 3.4]).assign(corpus="rpj")],
                      ignore_index=True)
    both = load_runs(frame)
    assert len(both) == 8 and both.notes == [
        "the table holds 2 settings by column 'corpus' (c4 (4), rpj (4)), at overlapping sizes, and one law is "
        "fitted to all of them; to fit one alone: where={'corpus': VALUE} (CLI: --where corpus=VALUE)"]
    one = load_runs(frame, where={"corpus": "rpj"})
    assert one.notes == [] and one.frame["loss"].tolist() == [3.3, 3.2, 3.25, 3.4]
    # a text column that names each size (a model name per size) is one ladder, not settings
    assert load_runs(_table().assign(name=["s", "s", "l", "l"])).notes == []
    with pytest.raises(FitInputError, match="no column 'corpora' to select rows by; the columns are 'params'"):
        load_runs(frame, where={"corpora": "rpj"})
    with pytest.raises(FitInputError, match="no row has corpus='c5'; its values are 'c4', 'rpj'"):
        load_runs(frame, where={"corpus": "c5"})


def test_runs_flagged_as_outliers_are_said_and_their_reasons_are_not_settings():
    # Open-Athena's IsoFLOP table: an `outlier` flag and its `reason` ("none" on every unflagged run). The
    # reasons once read as "6 settings by column 'reason'"; the flag itself went unsaid.
    frame = pd.concat([_table().assign(corpus="c4"), _table(loss=[3.3, 3.2, 3.25, 3.4]).assign(corpus="rpj")],
                      ignore_index=True)
    frame["outlier"] = [False, True, False, False, False, False, True, False]
    frame["reason"] = ["none", "off_center", "none", "none", "none", "none", "exact_duplicate", "none"]
    assert load_runs(frame).notes == [
        "column 'outlier' flags 2 of 8 runs (True); they are fitted with the others; to leave them out: "
        "where={'outlier': False} (CLI: --where outlier=False)",
        "the table holds 2 settings by column 'corpus' (c4 (4), rpj (4)), at overlapping sizes, and one law is "
        "fitted to all of them; to fit one alone: where={'corpus': VALUE} (CLI: --where corpus=VALUE)"]
    kept = load_runs(frame, where={"outlier": False, "corpus": "c4"})
    assert kept.notes == [] and kept.frame["loss"].tolist() == [3.1, 3.05, 3.2]
    # a true/false column that is no flag of runs to leave out (tied embeddings) is not called one
    assert load_runs(_table().assign(tied=[True, False, True, False])).notes == []


def test_a_repeat_is_a_row_of_the_table_repeated_not_only_its_fitted_columns():
    # Two runs alike in size, tokens and loss but at two rates (a column the fit does not read) are two runs.
    frame = _table().assign(peak_lr=[1e-3, 2e-3, 3e-3, 4e-3])
    frame.loc[4] = [1e6, 1e8, 3.1, 9e-3]
    assert len(load_runs(frame)) == 5
    frame.loc[5] = [1e6, 1e8, 3.1, 9e-3]
    assert len(load_runs(frame)) == 5 and load_runs(frame).excluded[0]["run_id"] == "run5"


def test_a_diverged_run_is_refused_with_the_fix():
    frame = _table(loss=[3.1, 3.0, 3.05, 4e4])
    with pytest.raises(FitInputError) as info:
        load_runs(frame)
    assert str(info.value) == ("DataFrame: 1 run(s) have a loss over 10x the runs' median 3.075: run3 (4e+04); a "
                               "diverged or unfinished run? Drop it, or leave out the highest losses with "
                               "exclude_top=1 (CLI: --exclude-top 1)")
    assert load_runs(frame, exclude_top=1).frame["loss"].max() == 3.1
    assert len(load_runs(_table(loss=[3.1, 3.0, 3.05, 30.0]))) == 4  # under 10x the median: a bad run, not refused
    # a learning-rate sweep read whole (``flops-fit tune --from``): a rate too high to train is the sweep's data
    assert len(load_runs(frame.assign(lr=[1e-3, 1e-3, 1e-3, 1.0]), all_rates=True)) == 4


def test_unfinished_runs_are_excluded_with_their_status():
    # A sweep store keeps failed runs with loss NaN: they are left out before validation.
    runs = load_runs(_table(status=["done", "failed", "done", "done"], loss=[3.1, np.nan, 3.0, 3.2]))
    assert len(runs) == 3
    assert runs.excluded == [{"run_id": "run1", "reason": "status 'failed'"}]
    assert ("1 run(s) are not finished or have no finite loss, and are left out (run1: status 'failed')"
            in runs.notes)  # said with the answer
    with pytest.raises(FitInputError, match="no finished runs to fit"):
        load_runs(_table(status=["failed"] * 4))


def test_a_finished_status_is_read_in_any_case_and_an_unread_one_is_named():
    """MLflow's own tables say FINISHED (and a lab's may say Done): every such run was dropped as unfinished,
    and the fit stopped with "every run failed". A status that reads as unfinished everywhere is now named."""
    runs = load_runs(_table(status=["FINISHED", "FAILED", "Done", " completed "], loss=[3.1, np.nan, 3.0, 3.2]))
    assert len(runs) == 3 and runs.excluded == [{"run_id": "run1", "reason": "status 'FAILED'"}]
    assert len(load_runs(_table(status=["succeeded"] * 4))) == 4
    for column in ("state", "State", "Status"):  # a lab's own name for it: its crashed run was fitted as finished
        runs = load_runs(_table(**{column: ["finished", "crashed", "finished", "finished"]}))
        assert len(runs) == 3 and runs.excluded == [{"run_id": "run1", "reason": "status 'crashed'"}]
    with pytest.raises(FitInputError, match="the runs' status 'passed' read as not finished: a finished run's "
                                            "status is one of done, finished"):
        load_runs(_table(status=["passed"] * 4))


@pytest.mark.parametrize(("kwargs", "frame_change", "message"), [
    ({}, {"drop": "params"}, "no params column 'params'; available columns: 'tokens', 'loss'. Name the right one with params_col="),
    ({"loss_col": "val"}, {}, "no loss column 'val'; available columns: 'params', 'tokens', 'loss'. Name the right one with loss_col= (CLI: --loss-col)"),
    ({}, {"drop": "tokens"}, "neither a tokens column 'tokens' nor a flops column 'flops'"),
    ({}, {"set": ("params", [1e6, np.nan, 4e6, 8e6])}, "column 'params' has 1 missing or non-numeric value(s) (runs run1: empty)"),
    ({}, {"set": ("loss", [3.0, "x", 3.0, 3.0])}, "column 'loss' has 1 missing or non-numeric value(s) (runs run1: 'x')"),
    ({}, {"set": ("params", [1e6, 0.0, -1.0, 8e6])}, "column 'params' must hold finite positive values; 2 do not (run1: 0, run2: -1)"),
    ({}, {"set": ("tokens", [np.inf, 1.0, 1.0, 1.0])}, "column 'tokens' must hold finite positive values; 1 do not (run0: inf)"),
    ({"exclude_top": 4}, {}, "exclude_top=4 would drop all 4 runs"),
    ({"exclude_top": -1}, {}, "exclude_top must be a non-negative integer"),
    ({"flops_per_param_token": 0}, {}, "flops_per_param_token must be positive"),
])
def test_bad_tables_are_refused_with_the_fix(kwargs, frame_change, message):
    frame = _table()
    if "drop" in frame_change:
        frame = frame.drop(columns=[frame_change["drop"]])
    if "set" in frame_change:
        column, values = frame_change["set"]
        frame[column] = values
    with pytest.raises(FitInputError) as info:
        load_runs(frame, **kwargs)
    assert message in str(info.value)


def test_a_value_that_is_no_number_is_shown_as_written(tmp_path):
    """Sizes written with thousands separators ("2,952") were refused as "40 missing or non-numeric
    value(s) (runs run0, run1, ...)", which did not show what was wrong with them."""
    frame = _table()
    frame["params"] = [f"{v:,.0f}" for v in frame["params"]]
    frame.to_csv(tmp_path / "runs.csv", index=False)
    with pytest.raises(FitInputError, match=r"column 'params' has 4 missing or non-numeric value\(s\) \(runs run0: "
                                            r"'1,000,000', run1: '2,000,000', run2: '4,000,000', run3: '8,000,000'\)"):
        load_runs(tmp_path / "runs.csv")


def test_runs_without_a_finite_loss_are_left_out_and_text_is_refused_by_name(tmp_path):
    """A W&B runs-table export: the crashed run is left out by its State, and a run W&B calls finished
    whose loss is NaN (diverged: common at a learning-rate sweep's high rates) or inf is left out too,
    each said by name; they refused the whole fit. Text where a number belongs is still refused, by the
    run's Name (it was a row number of the table after the filtering)."""
    export = _table(Name=["a", "diverged", "crashed", "d"], State=["finished", "finished", "crashed", "finished"])
    export["loss"] = [3.1, np.nan, np.nan, 3.2]
    export.loc[4] = [16e6, 6.25e6, np.inf, "blew-up", "finished"]
    export.to_csv(tmp_path / "export.csv", index=False)
    runs = load_runs(tmp_path / "export.csv")
    assert runs.frame["run_id"].tolist() == ["a", "d"]
    assert runs.notes == ["3 run(s) are not finished or have no finite loss, and are left out (crashed: status "
                          "'crashed'; diverged: no finite loss (nan); blew-up: no finite loss (inf))"]
    export["loss"] = export["loss"].astype(object)
    export.loc[1, "loss"] = "unknown"
    export.to_csv(tmp_path / "export.csv", index=False)
    with pytest.raises(FitInputError, match=r"column 'loss' has 1 missing or non-numeric value\(s\) \(runs diverged: 'unknown'\); "
                                            "drop or fix those runs"):
        load_runs(tmp_path / "export.csv")


def test_runs_that_all_diverged_are_refused_as_diverged_not_as_unfinished():
    """Every run's loss blew up (a tune's rates all too high): the refusal listed each run's status 'failed'
    cut at 80 characters and said 'a finished run's status is one of done, ...', as if the status were misspelt;
    it now says every run diverged, names one, and the fix."""
    failed = _table(status=["failed"] * 4, loss=[np.nan] * 4,
                    error=[f"diverged: train loss {v} exceeds 3 x its first value 5.5" for v in (20, 30, 40, 50)])
    for table in (failed, _table(loss=[np.nan, np.inf, np.nan, np.nan])):
        for all_rates in (False, True):
            with pytest.raises(FitInputError) as caught:
                load_runs(table, all_rates=all_rates)
            message = str(caught.value)
            assert message.startswith("DataFrame: no finished runs to fit: every run diverged (4 run(s) with no "
                                      "finite loss or one that blew up; run0: ")
            assert message.endswith("): train them at lower learning rates") and "status is one of" not in message
    crashed = _table(status=["failed"] * 4, loss=[np.nan] * 4, error=["CUDA out of memory"] * 4)
    with pytest.raises(FitInputError, match="read as not finished"):  # a crash is no divergence: as before
        load_runs(crashed, all_rates=True)


def test_empty_table_is_refused(tmp_path):
    with pytest.raises(FitInputError, match="no finished runs to fit"):
        load_runs(_table().iloc[:0])
    # an empty JSON lines file or JSON array said "no params column 'params'; available columns: ."
    (tmp_path / "runs.jsonl").write_text("")
    (tmp_path / "runs.json").write_text("[]\n")
    for empty in (tmp_path / "runs.jsonl", tmp_path / "runs.json", pd.DataFrame()):
        with pytest.raises(FitInputError, match=r"^.*(runs.jsonl|runs.json|DataFrame): no finished runs to fit \(the table "
                           r"is empty\)$"):
            load_runs(empty)


def test_bad_sources_are_refused(tmp_path):
    with pytest.raises(FitInputError, match=r"no such file or folder; give a table of runs \(\.csv, .*\.parquet\)"):
        load_runs(tmp_path / "missing.csv")  # it offered "a CSV file" only, though JSON and parquet tables are read
    with pytest.raises(FitInputError, match="no runs.sqlite in this folder"):
        load_runs(tmp_path)
    (tmp_path / "runs.xlsx").write_bytes(b"x")
    with pytest.raises(FitInputError, match=r"unknown file type; give a table of runs \(.csv, .txt, .tsv, .jsonl"):
        load_runs(tmp_path / "runs.xlsx")
    (tmp_path / "runs.parquet").write_bytes(b"x")
    with pytest.raises(FitInputError, match="runs.parquet: not a readable parquet table of runs"):
        load_runs(tmp_path / "runs.parquet")
    (tmp_path / "runs.jsonl").write_text('{"params": 1e6, "tokens": 1e8, "loss": 3.1}\n{"params": 2e6,\n')
    with pytest.raises(FitInputError, match="runs.jsonl: not a readable json table of runs"):
        load_runs(tmp_path / "runs.jsonl")
    with pytest.raises(FitInputError, match="cannot read runs from a list"):
        load_runs([1, 2])


@pytest.mark.parametrize(("given", "message"), [
    ({"seed": "a"}, "seed must be a non-negative integer"), ({"seed": 1.5}, "seed must be"),
    ({"seed": -1}, "seed must be"), ({"level": "0.95"}, "level must lie strictly between 0 and 1"),
    ({"level": None}, "level must lie"), ({"bootstrap": True}, "bootstrap must be a non-negative number")])
def test_fit_refuses_a_bad_seed_level_or_bootstrap_by_name(given, message):
    frame = synthetic_runs(budgets=(1e17, 1e18), sizes_per_budget=5)
    with pytest.raises(FitInputError, match=message):
        fit(frame, method="isoflop", **{"bootstrap": 5, **given})


def test_fit_refuses_bad_arguments():
    frame = synthetic_runs(budgets=(1e17, 1e18), sizes_per_budget=5)
    with pytest.raises(FitInputError, match="unknown method 'chinchilla'; choose one of envelope, isoflop"):
        fit(frame, method="chinchilla")
    with pytest.raises(FitInputError, match="unknown option\\(s\\) param_col; fit\\(\\) accepts params_col"):
        fit(frame, param_col="N")
    with pytest.raises(FitInputError, match="level must lie strictly between 0 and 1"):
        fit(frame, level=95)
    with pytest.raises(FitInputError, match="bootstrap must be a non-negative number of resamples"):
        fit(frame, method="isoflop", bootstrap=-5)
    with pytest.raises(FitInputError, match="curve must be one of slice, parabola, huber, akima"):
        fit(frame, method="isoflop", curve="cubic")



def test_too_few_runs_after_the_rates_not_best_are_left_out_says_so():
    """Twelve runs of a sweep over rates (three cells, four rates each): fit kept each cell's best and refused with
    "needs at least 6 runs; got 3", not saying where the other nine went nor how to keep them."""
    rows = [{"params": n, "tokens": 20 * n, "lr": lr, "loss": 3 + 30 / n ** 0.3 + 0.02 * np.log(lr / 3e-3) ** 2}
            for n in (1e6, 2e6, 4e6) for lr in (1e-3, 3e-3, 1e-2, 3e-2)]
    with pytest.raises(FitInputError, match=r"needs at least 6 runs; got 3; 9 more run\(s\) read were left out \(9 "
                                            r"like run\d+: lr 0\.0\d+ is not its cell's best \(lr 0\.003\): .*--all-rates "
                                            r"keeps every run\)\)$"):
        fit(pd.DataFrame(rows), method="vpnls", bootstrap=0)


def test_methods_refuse_too_few_runs_or_missing_structure():
    with pytest.raises(FitInputError, match="needs at least 6 runs; got 4"):
        fit(_table(), method="parametric", bootstrap=0)
    # --method vpnls on five runs was told "the parametric fit needs at least 6 runs": a method not asked for
    with pytest.raises(FitInputError, match=r"^a law over \(N, D\) \(parametric, vpnls, interaction, data-limited\) "
                                            "needs at least 6 runs; got 4$"):
        fit(_table(), method="vpnls", bootstrap=0)
    one_size = pd.DataFrame({"params": [1e6] * 6, "tokens": np.geomspace(1e7, 1e9, 6), "loss": np.linspace(3, 2.5, 6)})
    with pytest.raises(FitInputError, match="all runs share one size or one token count"):
        fit(one_size, method="vpnls", bootstrap=0)
    with pytest.raises(FitInputError, match="Approach 1 needs a training curve"):
        fit(_table(), method="envelope", bootstrap=0)
    # Grids shifted far off the optimum: every budget's lowest run is on the edge.
    edge = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, span=0.5, offset=1.5, noise=0)
    with pytest.raises(FitInputError, match="Approach 2 needs an interior loss minimum at 2 or more budgets; "
                       "found 0 of 3 \\(edge minimum: the smallest size has the lowest loss: 3 budgets \\(1e\\+17, 1e\\+18, 1e\\+19\\)\\)"):
        fit(edge, method="isoflop", bootstrap=0)
    curves = synthetic_runs(budgets=(1e17,), sizes_per_budget=2)
    with pytest.raises(FitInputError, match="Approach 1 needs curves from at least 3 model sizes; got 2"):
        fit(curves, method="envelope", bootstrap=0)


def test_budgets_without_a_minimum_are_told_by_reason_not_one_by_one():
    """A table that is not an IsoFLOP sweep (one run a budget, as Gadre et al.'s 26 budgets) is one clause."""
    budgets = tuple(np.geomspace(1e16, 1e20, 8))
    single = synthetic_runs(budgets=budgets, sizes_per_budget=5, noise=0).groupby("budget").head(1)
    with pytest.raises(FitInputError) as refused:
        fit(single, method="isoflop", bootstrap=0)
    said = str(refused.value)
    assert "found 0 of 8 (fewer than 3 model sizes: 8 budgets (1e+16, 3.73e+16, ..., 1e+20)). Add sizes" in said
    assert said.count("e+") == 3


def test_one_budget_is_told_to_sweep_more_budgets_not_to_add_sizes():
    """One budget with an interior minimum said "found 1 of 1 (no budgets). Add sizes around each budget's
    optimum": no size added to one budget gives Approach 2 its second one."""
    one = synthetic_runs(budgets=(1e18,), sizes_per_budget=5, noise=0)
    with pytest.raises(FitInputError) as refused:
        fit(one, method="isoflop", bootstrap=0)
    assert str(refused.value) == ("Approach 2 needs an interior loss minimum at 2 or more budgets; these runs have one "
                                  "budget (1e+18 FLOPs). Sweep more budgets, or use method='parametric'.")


def test_no_method_fitting_reads_as_one_sentence_per_method():
    """The reasons were joined as they ended: "... or use method='parametric'.; parametric: ..."."""
    one = synthetic_runs(budgets=(1e18,), sizes_per_budget=4, noise=0).drop(columns=["curve"])
    with pytest.raises(NoFitError) as refused:
        fit(one, method="all", bootstrap=0, workers=1)
    said = str(refused.value)
    assert ".;" not in said and "or use method='parametric'; parametric: a law over (N, D) (parametric, vpnls" in said


def test_a_refusal_names_the_column_that_splits_the_runs_into_settings():
    """Runs of two projects read as one sweep (a W&B folder, a TensorBoard tree) may be why no law fits them,
    and the note naming the column that tells them apart was printed only beside an answer, not a refusal."""
    one = synthetic_runs(budgets=(1e18,), sizes_per_budget=4, noise=0).drop(columns=["curve"])
    two = one.sort_values("params").assign(project=["a", "b", "a", "b"])  # overlapping sizes: 1 and 3, 2 and 4
    with pytest.raises(NoFitError) as refused:
        fit(two, method="all", bootstrap=0, workers=1)
    assert str(refused.value).startswith("no method could fit these runs: ")
    assert str(refused.value).endswith("; note: the table holds 2 settings by column 'project' (a (2), b (2)), at "
                                       "overlapping sizes, and one law is fitted to all of them; to fit one alone: "
                                       "where={'project': VALUE} (CLI: --where project=VALUE)")
    with pytest.raises(NoFitError) as alone:
        fit(one, method="all", bootstrap=0, workers=1)
    assert "note:" not in str(alone.value)


def test_a_law_over_n_and_d_counts_runs_of_different_size_and_tokens_not_seeds():
    """Two seeds of 4 runs at one budget passed "at least 6 runs", and parametric, vpnls and interaction
    each fitted 5 parameters to 4 points: N_opt 195M, a = 0.543, printed as answers."""
    one = synthetic_runs(budgets=(1e18,), sizes_per_budget=4, noise=0).drop(columns=["curve"])
    seeds = pd.concat([one.assign(seed=0), one.assign(seed=1, loss=one.loss * 1.01)], ignore_index=True)
    with pytest.raises(NoFitError) as refused:
        fit(seeds, method="all", bootstrap=0, workers=1)
    assert ("parametric: a law over (N, D) (parametric, vpnls, interaction, data-limited) needs at least 6 runs of "
            "different (size, tokens); got 4 among 8 runs (repeats of a run, such as seeds, measure its noise, not "
            "the law's shape): sweep more sizes or budgets") in str(refused.value)
    three = synthetic_runs(budgets=(1e17, 1e18), sizes_per_budget=3, noise=0).drop(columns=["curve"])
    assert fit(pd.concat([three, three.assign(loss=three.loss * 1.01)], ignore_index=True), method="vpnls",
               bootstrap=0).params["a"] > 0  # 6 different points, each run twice: the law answers


def test_all_records_methods_that_cannot_run():
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=7).drop(columns=["curve"])
    fitted = fit(frame, method="all", bootstrap=0)
    assert set(fitted.results) == {"isoflop", "parametric", "vpnls", "interaction"}
    assert "Approach 1 needs a training curve" in fitted.skipped["envelope"]


def test_predict_refuses_bad_budgets():
    fitted = fit(synthetic_runs(budgets=(1e17, 1e18, 1e19)), method="isoflop", bootstrap=0)
    with pytest.raises(FitInputError, match="budgets must be finite positive FLOP counts"):
        fitted.predict([1e20, -1.0])


def test_a_fit_says_its_notes_about_the_runs_before_it_starts():
    # A fit of a mixed table can take minutes: its progress hears the note first, not only its summary.
    one = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, noise=0.01, seed=3, curve_points=0)
    two = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, noise=0.01, seed=4, curve_points=0)
    heard = []
    fitted = fit(pd.concat([one.assign(corpus="a"), two.assign(corpus="b", run_id=two["run_id"] + "b")]), "isoflop",
                 bootstrap=0, tracking=False, progress=heard.append)
    assert heard[0] == f"note: {fitted.runs.notes[0]}" and "2 settings by column 'corpus'" in heard[0]
    assert heard[1].startswith("fitting 1 method(s) to 30 runs")


def test_open_athenas_table_says_its_outlier_flag_and_its_studies_not_its_reasons():
    # the figure docs/guide/fit.md quotes; the table is the shared reference data
    from pathlib import Path

    data = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "isoflops_public.csv"
    notes = load_runs(data).notes
    assert notes[0].startswith("column 'outlier' flags 143 of 423 runs (True)")
    assert notes[1].startswith("the table holds 3 settings by column 'source'") and "'reason'" not in notes[1]


@pytest.mark.parametrize(("model", "unit"), [("vit", "samples"), ("gpt", "tokens")])
def test_tables_name_what_d_counts_from_the_sweeps_plan(tmp_path, capsys, model, unit):
    """An image sweep's D is images seen: its tables, forecast and planned runs say samples, a text
    sweep's say tokens (the unit the store's plan recorded)."""
    import flops_fit
    from flops_fit.fitting.inputs import store_metadata
    from flops_fit.store.run_store import RunStore
    from flops_fit.store.runs import RunResult

    planned = flops_fit.plan(model=model, budgets=[1e12], sizes=[32, 64, 96], batch_size=4, min_steps=1,
                             **({"dataset": "digits"} if model == "vit" else {}))
    assert any(line.startswith("budget") and f"{unit}/param" in line for line in planned.table().splitlines())
    if unit == "samples":  # these sizes train on fewer images per parameter than the target's optimum
        assert any("fewer samples per parameter" in note for note in planned.notes)
    with RunStore(tmp_path, create=True) as store:
        store.add_plan(planned)
        spec = planned.runs[0]
        store.record(RunResult(run_id=spec.run_id, status="done", loss=2.5, tokens=spec.tokens, steps=spec.steps))
        metadata = store_metadata(store)
    from flops_fit.cli.main import main

    assert main(["status", str(tmp_path)]) == 0
    header = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("run "))
    assert header.split()[3:5] == ["params", unit]
    runs = load_runs(synthetic_runs(sizes_per_budget=7))
    runs = runs.derived(runs.frame, metadata=metadata)
    assert runs.unit == unit
    fitted = fit(runs, method="all", bootstrap=0, holdout="forward", workers=1)
    assert f"] {unit}, loss" in fitted.forecast.summary() and fitted.to_dict()["forecast"]["unit"] == unit
    other = "tokens" if unit == "samples" else "samples"
    parametric = fitted["parametric"]
    table = parametric.summary().split("\n\n")[2].splitlines()[0]
    assert f"{unit} D_opt" in table and f"{unit}/param" in table and other not in table
    assert f"D_opt ({unit})" in fitted.answer_table() and f"{unit} / parameter" in fitted.answer_table()
    assert f"{unit} D" in parametric.loss_at(1e9, 2e10).summary()


def test_a_loss_column_of_text_names_the_numeric_columns_named_like_a_loss(tmp_path, capsys):
    """A tracker export's `loss` is often the loss function's name: the error said "15 missing or
    non-numeric values ... drop or fix those runs", which no run could fix."""
    from flops_fit.cli.main import main

    path = tmp_path / "runs.csv"
    path.write_text("params,tokens,loss,eval/loss,train_loss,lr\n1e6,2e7,xent,3.1,3.0,1e-3\n2e6,4e7,xent,2.9,2.8,1e-3\n")
    assert main(["fit", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"flops-fit: error: {path}: column 'loss' holds no numbers (e.g. 'xent'); name the column with each run's "
        "loss with loss_col= (CLI: --loss-col); numeric columns named like a loss: 'eval/loss', 'train_loss'")


def test_params_tokens_and_flops_in_other_units_are_refused(tmp_path, capsys):
    """A lab's table with parameters in millions and tokens in billions beside FLOPs was fitted as given:
    `flops-fit fit` printed an N_opt of 51.7 parameters and a D_opt of 0.3 tokens. The three columns that
    cannot all be counts are now one line naming them (exit 2); counts that agree (a sparse model's, an image
    model's per sample) still load."""
    from flops_fit.cli.main import main

    runs = synthetic_runs(budgets=(1e17, 1e18, 1e19), seed=1).drop(columns=["curve", "budget"])
    frame = runs.assign(N=runs.params / 1e6, D_B=runs.tokens / 1e9)[["N", "D_B", "flops", "loss"]]
    csv = tmp_path / "runs.csv"
    frame.to_csv(csv, index=False)
    assert main(["fit", str(csv), "--params-col", "N", "--tokens-col", "D_B", "--method", "isoflop",
                 "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the columns 'N', 'D_B', 'flops' disagree: FLOPs are 1e+15 x 6 x params x " \
                                    "tokens" in err and "millions of parameters" in err
    with pytest.raises(FitInputError, match="FLOPs are 1e-06 x"):
        load_runs(runs.assign(flops=runs.flops / 1e6))
    for factor in (0.05, 250):  # a sparse model by its total parameters; an image model's FLOPs per sample
        assert len(load_runs(runs.assign(flops=runs.flops * factor))) == len(runs)


def test_sizes_tokens_or_budgets_in_other_units_without_flops_to_disagree_are_refused(tmp_path, capsys):
    """A table with only params, tokens and budget, one of them in millions or billions: the fit read
    them as counts and blamed the method ("vpnls: failed: ... the N_opt interval at 60 FLOPs is [0.0315,
    2.4], below one parameter; the runs do not pin this method down"). Now one line names the column."""
    from flops_fit.cli.main import main

    runs = synthetic_runs(budgets=(1e17, 1e18, 1e19), seed=1)[["params", "tokens", "budget", "loss"]]
    for column, factor, message in (("params", 1e-12, "column 'params' holds 27 value(s) below one parameter"),
                                    ("tokens", 1e-12, "column 'tokens' holds 27 value(s) below one token"),
                                    ("budget", 1e-9, "the budget column 'budget' is 1e-09 x the runs' FLOPs")):
        csv = tmp_path / f"{column}.csv"
        runs.assign(**{column: runs[column] * factor}).to_csv(csv, index=False)
        assert main(["fit", str(csv), "--method", "vpnls", "--bootstrap", "0"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and "other units" in err, err
    flops_only = runs.drop(columns=["tokens"]).assign(flops=6 * runs.params * runs.tokens / 1e18)
    with pytest.raises(FitInputError, match=r"tokens \(from column 'flops'\) holds 27 value\(s\) below one"):
        load_runs(flops_only.drop(columns=["budget"]))
    with pytest.raises(FitInputError, match="no finished runs to fit"):  # a header alone: nothing to compare
        load_runs(runs.iloc[:0])
    for factor in (1 / 250, 20.0):  # an image model's FLOPs per sample beside 6 N D; a budget the runs fall short of
        assert len(load_runs(runs.assign(budget=runs.budget * factor))) == len(runs)


def test_sizes_in_millions_beside_tokens_with_nothing_to_check_them_against_are_cautioned(tmp_path, capsys):
    """params in millions, tokens as counts, no flops or budget column: nothing disagreed, and the fit answered
    N_opt 576 'parameters' at 1.2e7 tokens each. The runs' tokens per parameter (5.25e6 here) say so in a note
    under the answer; plain counts (20-ish tokens per parameter) and a tiny sweep's 7e5 are not cautioned."""
    from flops_fit.cli.main import main

    runs = synthetic_runs(budgets=(1e17, 1e18, 1e19), seed=1)[["params", "tokens", "loss"]]
    assert load_runs(runs).notes == []
    assert load_runs(Path(__file__).parent / "data" / "weak_sweep.csv").notes == []
    millions = runs.assign(params=runs.params / 1e6)
    (note,) = load_runs(millions).notes
    assert note.startswith("the runs train 5.25e+06 tokens") and "if column 'params' counts millions or billions" in note
    millions.to_csv(tmp_path / "runs.csv", index=False)
    assert main(["fit", str(tmp_path / "runs.csv"), "--method", "vpnls", "--bootstrap", "0"]) == 0
    assert "tokens per parameter (median), where real runs train" in capsys.readouterr().out


def test_where_reads_a_number_written_another_way_in_a_numeric_column(tmp_path, capsys):
    """`--where budget=6e10` on a table whose budgets read 60000000000 said "no row has budget='6e10'; its
    values are '60000000000', ..."."""
    from flops_fit.cli.main import main

    frame = synthetic_runs(budgets=(6e10, 1.2e11), sizes_per_budget=4).drop(columns=["curve"])
    frame["budget"] = frame["budget"].astype("int64")
    frame.to_csv(tmp_path / "runs.csv", index=False)
    for written in ("6e10", "6.0e+10", "60000000000"):
        kept = load_runs(tmp_path / "runs.csv", where={"budget": written})
        assert kept.frame["budget"].tolist() == [6e10] * 4
    assert main(["fit", str(tmp_path / "runs.csv"), "--method", "isoflop", "--where", "budget=5e10"]) == 2
    assert "no row has budget='5e10'; its values are '120000000000', '60000000000'" in capsys.readouterr().err


def test_where_given_as_text_names_the_mapping_it_takes():
    frame = synthetic_runs(budgets=(1e17, 1e18), sizes_per_budget=5)
    with pytest.raises(FitInputError, match=r"where must map columns to values, e.g. where=\{'recipe': 'muon'\}"):
        load_runs(frame, where="recipe=muon")


def test_a_progress_that_is_not_a_function_is_refused_by_name():
    """fit(..., progress="yes") failed at its first stage with "'str' object is not callable"."""
    with pytest.raises(FitInputError, match=r"^progress must be a function that takes each stage's line"):
        fit(synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5), "isoflop", bootstrap=0, progress="yes")


def test_fit_refuses_a_bootstrap_too_small_to_read_an_interval_from(tmp_path, capsys):
    """`fit --bootstrap 1` on the demo's runs printed N_opt 32.1k [32.4k, 32.4k] (an interval of one draw) and
    refused four sound methods as "the runs do not pin this method down": the number of resamples is refused."""
    frame = synthetic_runs(budgets=(1e17, 1e18), sizes_per_budget=5)
    for few in (1, 9):
        with pytest.raises(FitInputError, match=f"^bootstrap must be 0 \\(no intervals\\) or at least 10 resamples "
                                                f"\\(e\\.g\\. 1000\\): .*; got {few}$"):
            fit(frame, method="isoflop", bootstrap=few)
    demo = Path(__file__).parent / "data" / "demo_runs.csv"
    assert main(["fit", str(demo), "--bootstrap", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bootstrap must be 0 (no intervals) or at least 10 resamples" in err


@pytest.mark.parametrize("command", ["fit", "compare", "report"])
def test_a_bootstrap_too_large_to_hold_is_one_line_before_any_fitting(tmp_path, capsys, command):
    """`--bootstrap 99999999999999999999` ended in numpy's "Maximum allowed dimension exceeded" (a traceback) and
    1e9 asked for gigabytes of resample weights: more than 100,000 resamples is refused by name."""
    demo = str(Path(__file__).parent / "data" / "demo_runs.csv")
    sources = [demo, demo] if command == "compare" else [demo]
    out = tmp_path / "report.html"
    for huge in ("99999999999999999999", "100001"):
        code = main([command, *sources, "--bootstrap", huge, *(["--out", str(out)] if command == "report" else [])])
        err = capsys.readouterr().err
        assert code == 2 and err == f"flops-fit: error: bootstrap must be at most 100000 resamples (e.g. 1000, which " \
                                    f"reads each end of a 95% interval to within half a percentile point); got {huge}\n"
    assert not out.exists()


def test_runs_whose_losses_are_all_equal_are_refused_naming_the_column(tmp_path, capsys):
    """A loss column holding one value (a constant column mapped as the loss): the interaction law still
    "fitted" it, and fit and the report answered N_opt 3.57B at 1e20 FLOPs, with an exponent a of 0.92
    [0.91, 0.924] and the other methods failed or at the grid's edge: numbers with no meaning."""
    frame = synthetic_runs(budgets=(1e17, 1e18, 1e19), seed=1).drop(columns="curve")
    frame["loss"] = 3.0
    with pytest.raises(FitInputError, match=r"all 27 runs have the same loss \(3\)"):
        fit(frame, "interaction", bootstrap=0)
    csv = tmp_path / "runs.csv"
    frame.to_csv(csv, index=False)
    assert main(["fit", str(csv), "--method", "all", "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--loss-col" in err and "Traceback" not in err
    assert len(load_runs(frame)) == 27  # read, as a table, as before (a rescaling reads any losses)
    frame.loc[0, "loss"] = 3.5  # one run differs: no longer refused
    assert check_varies(load_runs(frame)) is None
