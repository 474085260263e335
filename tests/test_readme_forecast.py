"""The README quotes the shipped demo's forecast as its stored result has it (issue 34, item 6):
benchmarks/readme_forecast.py writes the block; this checks its numbers against the result file."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _writer():
    """benchmarks/readme_forecast.py, the script that writes the block (it names the result file)."""
    spec = importlib.util.spec_from_file_location("readme_forecast", ROOT / "benchmarks" / "readme_forecast.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RESULT = _writer().RESULT
UNITS = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "B": 1e9, "T": 1e12}


def number(text: str) -> float:
    value, unit = re.fullmatch(r"([0-9.]+(?:e[+-]?\d+)?)([kMGBT]?)", text).groups()
    return float(value) * UNITS[unit]


def close(printed: str, stored: float) -> bool:
    """``printed`` is ``stored`` rounded to the significant digits it shows."""
    digits = len(re.sub(r"[^0-9]", "", printed).lstrip("0")) or 1
    return abs(number(printed) / stored - 1) <= 0.5 * 10 ** (1 - digits) + 1e-12


def test_the_readme_quotes_the_stored_demo_forecast():
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- demo-forecast -->\n(.*?)\n<!-- /demo-forecast -->", readme, re.S)
    assert found, "README.md has no demo-forecast block: run python benchmarks/readme_forecast.py --write"
    text = " ".join(found.group(1).split())
    result = json.loads(RESULT.read_text())
    f, t, s = result["forecast"], result["truth"], result["score"]
    n = re.search(r"N_opt (\S+) \[(\S+), (\S+)\] parameters \(from (.+?)\) and loss (\S+) \[(\S+), (\S+)\] "
                  r"\(from (.+?)\):", text)
    assert n, text
    n_opt, n_lo, n_hi, n_source, loss, l_lo, l_hi, l_source = n.groups()
    for printed, stored in ((n_opt, f["n_opt"]["value"]), (n_lo, f["n_opt"]["interval"][0]),
                            (n_hi, f["n_opt"]["interval"][1]), (loss, f["loss"]["value"]),
                            (l_lo, f["loss"]["interval"][0]), (l_hi, f["loss"]["interval"][1])):
        assert close(printed, stored), (printed, stored)
    assert n_source == f["n_opt"]["source"] and l_source == f["loss"]["source"]
    truth = re.search(r"the optimum is (\S+) parameters at loss (\S+): N_opt ([+-]\d+)% \((inside|outside) its "
                      r"interval\), loss ([+-][0-9.]+)% \((inside|outside)\)", text)
    assert truth, text
    assert close(truth.group(1), t["n_opt"]) and close(truth.group(2), t["loss"])
    assert int(truth.group(3)) == pytest.approx(100 * s["n_opt_error"], abs=0.5)
    assert float(truth.group(5)) == pytest.approx(100 * s["loss_error"], abs=0.05)
    assert (truth.group(4) == "inside") == s["n_opt_inside"] and (truth.group(6) == "inside") == s["loss_inside"]
