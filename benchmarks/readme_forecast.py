"""The README's quoted demo forecast, written from its stored result (never typed by hand).

    python benchmarks/readme_forecast.py            # print the paragraph
    python benchmarks/readme_forecast.py --write    # replace README.md's block with it

The block lies between ``<!-- demo-forecast -->`` and ``<!-- /demo-forecast -->`` in README.md;
RESULT is what ``bench_forecast_target.py`` scored: the shipped demo's sweep, refitted by the
current forecast, against the runs trained at its target. tests/test_readme_forecast.py checks
that the README's numbers are the stored ones.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from flops_fit.fitting import formatting as fmt

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "forecast_target_v7.json"
README = ROOT / "README.md"
START, END = "<!-- demo-forecast -->", "<!-- /demo-forecast -->"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="replace README.md's block")
    args = parser.parse_args()
    text = block(json.loads(RESULT.read_text()))
    if not args.write:
        print(text)
        return
    readme = README.read_text()
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
    if not pattern.search(readme):
        raise SystemExit(f"README.md has no {START} ... {END} block")
    README.write_text(pattern.sub(lambda _: text, readme))
    print(f"wrote the demo forecast into {README}")


if __name__ == "__main__":
    main()
