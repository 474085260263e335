"""``flops-fit demo``: a real IsoFLOP sweep on CPU in a few minutes, end to end.

The GPT demo trains a small byte-level GPT on the Python standard library's own source
(8 budgets x 5 sizes on a ladder of 6 sizes, warmup-stable-decay: one stable phase per
size, a cooldown branched for each budget), the ViT demo a small ViT on the glyphs corpus
(rendered characters, generated offline) the same way. Budgets and sizes were chosen (and
checked) so that the IsoFLOP curves have interior minima; each demo's learning rates come
from the law a tune of its own setup fitted (``DEMO_TUNES``, shipped as
``demo_hparams/gpt.json`` and ``vit.json``); then the runs go to ``flops_fit.fit``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flops_fit.errors import FitInputError, OptionError
from flops_fit.fitting.report.html_report import write_report
from flops_fit.store.run_store import FIT_META, RunStore
from flops_fit.sweeps.config import parse_config
from flops_fit.sweeps.driver import SweepResult
from flops_fit.sweeps.planner import Plan, plan
from flops_fit.tables import format_table

DEMO_HPARAMS = Path(__file__).with_name("demo_hparams")  # tuned laws shipped with the package

DEMOS: dict[str, dict[str, Any]] = {
    "gpt": {
        # 8 budgets a factor sqrt(2) apart: WSD trains one stable phase per size for all of
        # them, at about half the FLOPs of the cosine grid (flops-fit plan prints both).
        "sweep": {
            "model": "gpt", "dataset": "python-stdlib",
            "budgets": [6e10, 8.5e10, 1.2e11, 1.7e11, 2.4e11, 3.4e11, 4.8e11, 6.8e11],
            "sizes_per_budget": 5, "span": 16.0, "tokens_per_param": 100.0, "batch_size": 32, "seq_len": 64,
            "eval_tokens": 32768, "curve_points": 10, "min_steps": 20, "seed": 0, "schedule": "wsd",
        },
        # Two heads at every width (not head_dim 4) and exact GELU: the same FLOPs, 1.5-3x
        # faster steps on the CPU at widths 16-64 (benchmarks/bench_step.py).
        "model": {"n_layer": 2, "n_head": 2, "gelu": "exact"},
        # The rates come from the law a tune of this very setup fitted (DEMO_TUNES below; the
        # file is re-derived by `flops-fit tune --demo gpt --out DIR`), beta2 too.
        "hparams": {"tuned": str(DEMO_HPARAMS / "gpt.json")},
        "executor": {"threads": 1},
    },
    "vit": {
        # The glyphs corpus (an offline stream that never repeats) at 16 x 16 pixels, 36 classes
        # (digits and capitals), dark ink on a light ground, no clutter: tiny ViTs leave chance
        # within a few hundred steps there, and the held-out loss keeps falling with size and data
        # (docs/guide/data.md). 6 budgets a factor sqrt(2) apart on a ladder of widths with WSD, as the
        # GPT demo; batch 128 because a step of these models costs little more than its overhead.
        # 7 widths per budget over a span of 10 (a ladder of 9, widths 4-30): the bootstrap resamples
        # runs within each budget, and with 5 widths over 16 the exponents' intervals were 0.34-0.35
        # wide, with 7 they are 0.23-0.24 (docs/validation/sweeps.md). A 10% cooldown (not 20%) keeps the
        # sweep's steps at the 5-width grid's; every held-out image (8,192) scores each run.
        "sweep": {
            "model": "vit", "dataset": "glyphs",
            "budgets": [1.4e10, 2e10, 2.8e10, 4e10, 5.6e10, 8e10],
            "sizes_per_budget": 7, "span": 10.0, "tokens_per_param": 40.0, "batch_size": 128,
            "eval_tokens": 8192, "curve_points": 10, "min_steps": 20, "seed": 0, "schedule": "wsd",
            "cooldown_fraction": 0.1,
        },
        "dataset": {"image_size": 16, "num_classes": 36, "inverted": 0.0, "clutter": 0.0, "rotation": 10.0},
        # Two heads at every width (cheap CPU attention) and 8-pixel patches: 4 patches and a class
        # token. With 4-pixel patches (16 tokens) these widths stay at chance for hundreds of steps.
        "model": {"depth": 2, "num_heads": 2, "patch_size": 8},
        # The rates come from the law a tune of this very setup fitted (DEMO_TUNES below, shipped
        # as demo_hparams/vit.json), centred on the hand-found rule it replaced (1/width, 3e-3 at
        # width 64). No exponent of it is identified (4 cells): the plan and report say so.
        "hparams": {"tuned": str(DEMO_HPARAMS / "vit.json")},
        "executor": {"threads": 1},
    },
}


# How each demo's shipped law was found: the demo's sweep at the rule its tune centres on
# (Marin's, with the beta2 the demo trains at), at these budgets, sizes and multipliers of it.
# At these widths Marin's own rate spikes the loss after the families' short warmup (a probe
# by hand at 1.7e11 FLOPs found 1/8 of it best for widths >= 26), so the multipliers reach 1/32;
# three of the ladder's sizes (the smallest, the middle, the largest at these budgets) keep the
# tune to about half the demo's FLOPs.
# The ViT demo's tune centres on its hand-found rule (inverse width, 3e-3 at width 64) at 3
# budgets spanning 8x (7e9-5.6e10, below the demo's largest) on widths 4, 10 and 24 (the demo's
# run from 4 to 30): 6 cells, about the demo's FLOPs.
DEMO_TUNES: dict[str, dict[str, Any]] = {
    "gpt": {"hparams": {"lr_rule": "marin", "beta2": 0.995}, "budgets": [6e10, 1.7e11, 4.8e11], "sizes": [10, 26, 58],
            "multipliers": [1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2]},
    "vit": {"hparams": {"lr_rule": "inverse-width", "base_lr": 3e-3, "base_width": 64}, "budgets": [7e9, 2e10, 5.6e10],
            "sizes": [4, 10, 24], "multipliers": [0.25, 0.5, 1.0, 2.0, 4.0]},
}


def demo_tune_spec(model: str = "gpt") -> tuple[dict[str, Any], dict[str, Any]]:
    """The sweep configuration a demo's tune trains (the demo's, at its tune's centre rule)
    and the tune's settings (budgets, multipliers): ``flops_fit.tune(*...)`` re-derives the
    demo's shipped hparams file."""
    if model not in DEMO_TUNES:
        raise OptionError(f"no demo tune for model {model!r}; choose one of {sorted(DEMO_TUNES)}")
    config = copy.deepcopy(DEMOS[model])
    settings = copy.deepcopy(DEMO_TUNES[model])
    config["hparams"] = settings.pop("hparams")
    return config, settings


@dataclass
class DemoOutcome:
    """What the demo made: the plan, the sweep, its IsoFLOP table, the fit (or why it was
    refused) and the report's path."""

    plan: Plan
    result: SweepResult
    table: str
    interior: int
    fit: Any = None
    refused: str | None = None
    report: Path | None = None


def isoflop_table(frame, unit: str = "token") -> tuple[str, int]:
    """Per budget: each size's loss, the lowest marked; and how many budgets have their
    lowest loss strictly inside the size grid (an interior minimum). ``unit``: what the plan
    counts (``Plan.unit``)."""
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
    headers = ["budget", "size", "params", f"{unit}s", "held-out loss", ""]
    return format_table(rows, headers), interior


def demo_plan(model: str = "gpt") -> tuple[Plan, Any]:
    """The demo's plan and its parsed configuration (executor and its options)."""
    if model not in DEMOS:
        raise OptionError(f"no demo for model {model!r}; choose one of {sorted(DEMOS)}")
    config = parse_config(DEMOS[model], f"demo {model}")
    return plan(config.options), config


def run_demo(model: str = "gpt", out: str | Path = "demo-out", *, workers: int = 1, show_progress: bool = True,
             fit: bool = True, bootstrap: int = 200, skip_parity: bool = False,
             on_plan: Callable[[Plan], None] | None = None,
             progress: Callable[[str], None] | None = None) -> DemoOutcome:
    """Run (or resume) the demo sweep into ``out``, write the IsoFLOP table (``isoflop.txt``),
    fit every approach that applies, forward-chain every budget to choose the forecast (the
    method and scale that forecast best; the refits on ``workers`` processes too), and write the
    HTML report beside the store. The fit's settings go into the store (``FIT_META``): a report
    or fit of the folder later, given none of its own, answers as the demo did.
    ``on_plan(plan)`` hears the plan before any training starts, ``progress(stage)`` each stage of
    the fit and the report as it starts (``fit``'s)."""
    demo, config = demo_plan(model)
    if on_plan is not None:
        on_plan(demo)
    out = Path(out)
    result = demo.run(out, resume=True, executor=config.executor, workers=workers,
                          executor_options=config.executor_options, show_progress=show_progress,
                          skip_parity=skip_parity)
    table, interior = isoflop_table(result.runs, demo.unit)
    summary = f"{table}\n\n{interior} of {len(demo.budgets)} IsoFLOP curves have an interior minimum\n"
    if demo.options.schedule == "wsd":
        summary += (f"schedule wsd: {demo.total_flops:.3e} training FLOPs; the same grid with cosine schedules: "
                    f"{demo.cosine_flops:.3e} ({demo.saved_fraction:.0%} saved)\n")
    (out / "isoflop.txt").write_text(summary)
    outcome = DemoOutcome(demo, result, summary, interior)
    if fit:
        settings = {"by": "flops-fit demo", "method": "all", "holdout": "forward", "bootstrap": bootstrap}
        with RunStore(out) as store:  # `flops-fit report` / `fit` on the folder then answer as the demo did
            store.set_meta(**{FIT_META: settings})
        try:
            outcome.fit = result.fit(**{k: v for k, v in settings.items() if k != "by"}, workers=workers,
                                     progress=progress)
        except FitInputError as exc:
            outcome.refused = str(exc)
        else:
            if progress is not None:
                progress(f"drawing the report's figures into {out / 'report.html'}")
            outcome.report = write_report(outcome.fit, out, workers=workers)
    return outcome
