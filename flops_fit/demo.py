"""``flops-fit demo``: a real IsoFLOP sweep on CPU in a few minutes, end to end.

The GPT demo trains a small byte-level GPT on the Python standard library's own source
(3 budgets x 5 sizes), the ViT demo a small ViT on scikit-learn's 8x8 digits. Budgets,
sizes and the learning-rate rule were chosen (and checked) so that the IsoFLOP curves
have interior minima; then the runs go to ``flops_fit.fit``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DEMOS: dict[str, dict[str, Any]] = {
    "gpt": {
        "sweep": {
            "model": "gpt", "dataset": "python-stdlib", "budgets": [1e11, 2.5e11, 5e11],
            "sizes_per_budget": 5, "span": 16.0, "tokens_per_param": 100.0, "batch_size": 32, "seq_len": 64,
            "eval_tokens": 32768, "curve_points": 10, "min_steps": 20, "seed": 0,
        },
        "model": {"n_layer": 2, "head_dim": 4},
        "hparams": {"lr_rule": "marin"},
        "executor": {"threads": 1},
    },
    "vit": {
        "sweep": {
            "model": "vit", "dataset": "digits", "budgets": [1.5e10, 3e10, 6e10],
            "sizes_per_budget": 5, "span": 16.0, "batch_size": 128,
            "eval_tokens": 359, "curve_points": 10, "min_steps": 20, "seed": 0,
        },
        "model": {"depth": 2, "head_dim": 4},
        # Marin's rule gives ~0.9 at width 4 with batch 128; a 1/width rule around 2e-2 at
        # width 16 keeps these tiny ViTs stable.
        "hparams": {"lr_rule": "inverse-width", "base_lr": 2e-2, "base_width": 16},
        "executor": {"threads": 1},
    },
}


def isoflop_table(frame) -> tuple[str, int]:
    """Per budget: each size's loss, the lowest marked; and how many budgets have their
    lowest loss strictly inside the size grid (an interior minimum)."""
    from flops_fit._table import format_table

    rows, interior = [], 0
    for budget, group in frame[frame.status == "done"].groupby("budget"):
        group = group.sort_values("params")
        losses = group.loss.tolist()
        best = min(range(len(losses)), key=lambda i: losses[i]) if losses else None
        inside = best is not None and 0 < best < len(losses) - 1
        interior += inside
        for i, r in enumerate(group.itertuples()):
            mark = ("<- min, interior" if inside else "<- min, on the edge") if i == best else ""
            rows.append([f"{budget:.2e}", r.size, f"{r.params:,}", f"{r.tokens:,}", f"{r.loss:.4f}", mark])
    headers = ["budget", "size", "params", "tokens", "held-out loss", ""]
    return format_table(rows, headers), interior


def run_demo(model: str = "gpt", out: str | Path = "demo-out", *, workers: int = 1,
             show_progress: bool = True, fit: bool = True) -> dict[str, Any]:
    """Run (or resume) the demo sweep into ``out``, then write the IsoFLOP table and the fit."""
    from flops_fit.sweep_config import parse_config
    from flops_fit.sweeps import run_plan

    if model not in DEMOS:
        raise ValueError(f"no demo for model {model!r}; choose one of {sorted(DEMOS)}")
    from flops_fit.planner import plan

    config = parse_config(DEMOS[model], f"demo {model}")
    the_plan = plan(**config.plan_options)
    print(the_plan)
    out = Path(out)
    result = run_plan(
        the_plan, out, resume=True, executor=config.executor, workers=workers,
        executor_options=config.executor_options, show_progress=show_progress,
    )
    table, interior = isoflop_table(result.runs)
    summary = f"{table}\n\n{interior} of {len(the_plan.budgets)} IsoFLOP curves have an interior minimum\n"
    (out / "isoflop.txt").write_text(summary)
    print(summary)
    outcome: dict[str, Any] = {"result": result, "interior": interior, "fit": None}
    if fit:
        outcome["fit"] = _fit(result, out)
    return outcome


def _fit(result, out: Path):
    """Fit every approach that applies and write the HTML report (plots in ``report_plots/``)
    next to the store."""
    from flops_fit.errors import FlopsFitError

    try:
        fitted = result.fit(method="all", bootstrap=200)
    except FlopsFitError as exc:
        print(f"flops-fit: the fit was refused: {exc}")
        return None
    print(fitted)
    print(f"report (with its plots): {fitted.report(out)}")
    return fitted
