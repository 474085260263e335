"""The README's and the forecast guide's quoted demo forecast, written from its stored result
(never typed by hand).

    python benchmarks/readme_forecast.py            # print both blocks
    python benchmarks/readme_forecast.py --write    # replace README.md's and docs/guide/forecast.md's blocks

The README's block lies between ``<!-- demo-forecast -->`` and ``<!-- /demo-forecast -->``; the
guide's (the summary's answer lines, as the product prints them from the stored answers) between
``<!-- demo-forecast-summary -->`` and ``<!-- /demo-forecast-summary -->``. RESULT is what
``bench_forecast_target.py`` scored: the shipped demo's sweep, refitted by the current forecast,
against the runs trained at its target. tests/test_readme_forecast.py checks both blocks' numbers
against the stored ones.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.validation.drift import ErrorModel
from flops_fit.fitting.validation.forecast import Answer, answer_line

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "forecast_target_v7.json"
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide" / "forecast.md"
START, END = "<!-- demo-forecast -->", "<!-- /demo-forecast -->"
GUIDE_START, GUIDE_END = "<!-- demo-forecast-summary -->", "<!-- /demo-forecast-summary -->"


def paragraph(result: dict) -> str:
    f, t, s = result["forecast"], result["truth"], result["score"]

    def triple(key: str, f_num) -> str:
        return f"{f_num(f[key]['value'])} [{f_num(f[key]['interval'][0])}, {f_num(f[key]['interval'][1])}]"

    def loss(v: float) -> str:
        return fmt.sig(v, 4)

    def inside(flag: bool) -> str:
        return "inside" if flag else "outside"

    return (f"At {f['ratio']:.3g}x the largest budget it answers N_opt {triple('n_opt', fmt.count)} parameters (from "
            f"{f['n_opt']['source']}) and loss {triple('loss', loss)} (from {f['loss']['source']}): each answer from "
            f"the candidates weighted by their forward-chaining record for it, {drift(f)}{interval(f)}. "
            f"Trained for real there, the optimum is {fmt.count(t['n_opt'])} parameters at loss {loss(t['loss'])}: "
            f"N_opt {100 * s['n_opt_error']:+.0f}% ({inside(s['n_opt_inside'])} its interval), loss "
            f"{100 * s['loss_error']:+.1f}% ({inside(s['loss_inside'])}) (`benchmarks/bench_forecast_target.py`, "
            f"stored in `benchmarks/results/{RESULT.name}`).")


def drift(f: dict) -> str:
    """What was done with the drift the chaining shows (the stored answers' corrections)."""
    corrections = [f["answers"][q]["correction"] for q in ("n_opt", "loss")]
    if any(corrections):
        return "corrected by the drift that record shows"
    return "the drift that record shows reported but not corrected (on public sweeps the correction did not carry)"


def interval(f: dict) -> str:
    """How the loss interval was sized, where it was not by the error model."""
    rule = f["answers"]["loss"].get("interval", {})
    if rule.get("rule") != "reach law":
        return ""
    return ("; the loss interval from how far the forecast's answers erred at each reach on public sweeps, "
            f"scaled x{rule['own_factor']:.2f} by this sweep's own chaining")


def block(result: dict) -> str:
    return f"{START}\n{paragraph(result)}\n{END}"


def summary_lines(result: dict) -> str:
    """The forecast's answer lines as ``flops-fit fit --method all --holdout forward`` prints them
    (``Forecast.summary``'s second to fourth lines), from the stored answers."""
    f = result["forecast"]

    def triple(key: str) -> str:
        return fmt.scale_interval(f[key]["value"], *f[key]["interval"])

    def answer(q: str) -> Answer:
        a = {k: v for k, v in f["answers"][q].items() if k in Answer.__dataclass_fields__}
        model = {k: v for k, v in a.pop("model").items() if k in ErrorModel.__dataclass_fields__}
        return Answer(**a, model=ErrorModel(**model))

    return "\n".join([f"N_opt {triple('n_opt')} parameters, D_opt {triple('d_opt')} tokens, loss "
                      f"{fmt.loss(f['loss']['value'])} [{fmt.loss(f['loss']['interval'][0])}, "
                      f"{fmt.loss(f['loss']['interval'][1])}]",
                      *(answer_line(answer(q), f["ratio"]) for q in ("n_opt", "loss"))])


def guide_block(result: dict) -> str:
    return f"{GUIDE_START}\n```\n{summary_lines(result)}\n```\n{GUIDE_END}"


def replace(path: Path, start: str, end: str, text: str) -> None:
    page = path.read_text()
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    if not pattern.search(page):
        raise SystemExit(f"{path.name} has no {start} ... {end} block")
    path.write_text(pattern.sub(lambda _: text, page))
    print(f"wrote the demo forecast into {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="replace README.md's and the guide's blocks")
    args = parser.parse_args()
    result = json.loads(RESULT.read_text())
    if not args.write:
        print(block(result), guide_block(result), sep="\n\n")
        return
    replace(README, START, END, block(result))
    replace(GUIDE, GUIDE_START, GUIDE_END, guide_block(result))


if __name__ == "__main__":
    main()
