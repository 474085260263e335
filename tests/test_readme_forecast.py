"""The README and the forecast guide quote the shipped demo's forecast as its stored result has it:
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


def test_the_forecast_guide_quotes_the_stored_demo_forecast():
    """docs/guide/forecast.md quoted the demo's forecast summary typed by hand, checked by nothing:
    benchmarks/readme_forecast.py now writes it too, and its numbers are the stored ones."""
    import math

    guide = (ROOT / "docs" / "guide" / "forecast.md").read_text()
    found = re.search(r"<!-- demo-forecast-summary -->\n```\n(.*?)\n```\n<!-- /demo-forecast-summary -->\n\n"
                      r"\(there, trained at the target, the answers are ([+-]?\d+)% and ([+-]?[0-9.]+)%", guide, re.S)
    assert found, "forecast.md has no demo-forecast-summary block: run python benchmarks/readme_forecast.py --write"
    head, n_line, l_line = found.group(1).split("\n")
    result = json.loads(RESULT.read_text())
    f, s = result["forecast"], result["score"]
    triples = re.fullmatch(r"N_opt (\S+) \[(\S+), (\S+)\] parameters, D_opt (\S+) \[(\S+), (\S+)\] tokens, "
                           r"loss (\S+) \[(\S+), (\S+)\]", head)
    assert triples, head
    stored = [v for q in ("n_opt", "d_opt", "loss") for v in (f[q]["value"], *f[q]["interval"])]
    for printed, value in zip(triples.groups(), stored, strict=True):
        assert close(printed, value), (printed, value)
    for line, q in ((n_line, "n_opt"), (l_line, "loss")):
        a = f["answers"][q]
        m = re.match(r"(?:N_opt|loss) from (.+?): (\d+) chaining splits; drift (\S+) per ln r \(own (\S+)\) ", line)
        assert m, line
        assert m.group(1) == a["source"] and int(m.group(2)) == a["model"]["splits"]
        assert float(m.group(3)) == pytest.approx(a["model"]["drift"], abs=5e-4)
        assert float(m.group(4)) == pytest.approx(a["model"]["own_drift"], abs=5e-4)
        assert ("not corrected" in line) == (a["correction"] == 0)
    n, i = f["answers"]["n_opt"], f["answers"]["n_opt"]["interval"]
    bounds = re.search(r"scatter (\S+) per ln r \(own (\S+); (\S+) degrees of freedom with the prior\) grown to "
                       r"(\S+)x; .*at least x(\S+) either way .*, at most x(\S+) \(at", n_line)
    assert bounds, n_line
    assert float(bounds.group(1)) == pytest.approx(n["model"]["scatter"], abs=5e-4)
    assert float(bounds.group(2)) == pytest.approx(n["model"]["own_scatter"], abs=5e-4)  # the splits' own, beside it
    assert close(bounds.group(3), n["model"]["dof"]) and close(bounds.group(4), f["ratio"])
    assert float(bounds.group(5)) == pytest.approx(math.exp(i["multiplier"] * i["floor"]), abs=5e-3)
    assert float(bounds.group(6)) == pytest.approx(math.exp(i["multiplier"] * i["sigma"]), abs=5e-3)
    assert "bound applies" not in n_line  # the demo's interval lies between the bounds
    i = f["answers"]["loss"]["interval"]
    reach = re.search(r"interval \+-(\S+) f sigma\(r\), sigma = (\S+)% at (\S+)x .*, f = (\S+) by this sweep's own "
                      r"chaining \((\d+) splits\)$", l_line)
    assert reach, l_line
    assert float(reach.group(1)) == pytest.approx(i["multiplier"], abs=5e-3)
    assert float(reach.group(2)) == pytest.approx(100 * i["sigma"], abs=5e-3) and close(reach.group(3), f["ratio"])
    assert float(reach.group(4)) == pytest.approx(i["own_factor"], abs=5e-3) and int(reach.group(5)) == i["own_splits"]
    assert int(found.group(2)) == pytest.approx(100 * s["n_opt_error"], abs=0.5)
    assert float(found.group(3)) == pytest.approx(100 * s["loss_error"], abs=0.05)


def test_an_interval_raised_to_the_reach_laws_lower_bound_says_so():
    """The N_opt line said "; the upper bound applies" where the public answers' error cut the interval, but nothing
    where it was raised to the lower bound (the error at no reach): an interval of exactly x1.74 either way read
    as the sweep's own. The demo's stored answer, its error model's interval narrowed below the bound, says so."""
    from flops_fit.fitting.validation.drift import ErrorModel
    from flops_fit.fitting.validation.forecast import Answer, answer_line

    f = json.loads(RESULT.read_text())["forecast"]
    a = {k: v for k, v in f["answers"]["n_opt"].items() if k in Answer.__dataclass_fields__}
    model = ErrorModel(**{k: v for k, v in a.pop("model").items() if k in ErrorModel.__dataclass_fields__})
    stored = answer_line(Answer(**a, model=model), f["ratio"])
    assert "bound applies" not in stored  # the demo's own interval, x1.97, lies between x1.74 and x2.71
    narrow = 0.5 * a["interval"]["multiplier"] * a["interval"]["floor"]  # half the lower bound's log half-width
    a["interval"] = {**a["interval"], "error_model_log_interval": [-narrow, narrow]}
    assert answer_line(Answer(**a, model=model), f["ratio"]).endswith("at most x2.71 (at 10x); the lower bound applies")
