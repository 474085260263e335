"""The report read as a lab lead reads it before acting: it says which runs it fitted and how, and
its sections agree with one another."""

from __future__ import annotations

import html
import json
import re

import pandas as pd

from flops_fit.cli.main import main
from flops_fit.fitting.synthetic import synthetic_runs


def _provenance(text: str) -> dict:
    found = re.search(r"<h2 id='provenance'>Provenance</h2><pre>(.*?)</pre>", text, re.S)
    assert found, "the page has no provenance"
    return json.loads(html.unescape(found.group(1)))


def test_a_report_on_one_study_of_a_table_says_which_rows_and_how_it_was_written(tmp_path, capsys):
    # Two studies in one table (as isoflops_public.csv holds three): the page on one of them said
    # only the table's name, its provenance neither the selection nor the command nor the settings.
    one = synthetic_runs(budgets=(1e17, 1e18, 1e19), sizes_per_budget=5, curve_points=0).assign(study="small")
    other = synthetic_runs(budgets=(1e18, 1e19, 1e20), sizes_per_budget=5, curve_points=0, seed=1).assign(study="big")
    csv = tmp_path / "two.csv"
    pd.concat([one, other]).drop(columns=["curve"]).to_csv(csv, index=False)
    out = tmp_path / "r.html"
    argv = ["report", str(csv), "--method", "isoflop", "--bootstrap", "12", "--seed", "3", "--holdout", "none",
            "--where", "study=small", "--out", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    text = out.read_text()
    lead = re.search(r"<p class=lead>(.*?)</p>", text).group(1)
    assert f"{len(one)} runs from" in lead and "the rows with study=small" in lead
    given = _provenance(text)
    assert given["source"] == str(csv) and given["rows selected"] == "study=small" and given["runs"] == len(one)
    assert given["command"].split() == ["flops-fit", *argv]
    assert given["methods"] == ["isoflop"] and given["seed"] == 3 and given["level"] == 0.95
    kept = re.search(r"(\d+) bootstrap resamples \(seed 3\)", text).group(1)  # the method section's count
    assert given["bootstrap resamples kept"] == {"isoflop": int(kept)} and 0 < int(kept) <= 12
    assert given["versions"]["numpy"] and given["versions"]["python"]
