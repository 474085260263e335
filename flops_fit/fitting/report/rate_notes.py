"""What the report says about the runs' learning rates: the runs a tuned law gave a rate beyond
its tune's grid, and how far training the forecast's model at the target would carry the law.

A forecast comes true only if the target's runs train as well as the sweep's did; a rate
extrapolated past the tune is the first thing that breaks that (the GPT demo's first law lost
0.4-2.2% at its report's target against the simple rule it replaced)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.report.html import escape
from flops_fit.store.runs import tuned_law_paths


def _sources(runs: Any) -> Any:
    """Each run's ``lr_source`` (none for runs from a table without the column)."""
    return runs.frame["lr_source"].dropna() if "lr_source" in runs.frame else []


def reach_note(runs: Any) -> list[str]:
    """Runs whose rate a tuned law gave beyond its tune's grid, or its centre rule gave past its
    reach, as their ``lr_source`` says (``sweeps.tuned``): listed, with the factors."""
    sources = _sources(runs)
    beyond = sorted({s for s in sources if "beyond" in s and s.startswith(("tuned:", "centre:"))})
    if not beyond:
        return []
    count = sum(1 for s in sources if s in beyond)
    return [f"<p class=warn><b>Learning rates beyond the tune</b>: {count} of {len(runs)} runs took their rate "
            "from a tuned law past its tune's grid (or, past its reach, from the tune's centre rule):</p>",
            "<ul>" + "".join(f"<li class=warn>{escape(s)}</li>" for s in beyond) + "</ul>"]


def target_rate_note(runs: Any, f: Any) -> list[str]:
    """How far training the forecast's model at the target carries the sweep's tuned learning-rate
    law past the tokens its tune saw: past the most it saw at all (the ``range`` a tune's
    hparams.json records, what the planner's guard measures), and past the most it gave a model
    of N_opt's size or larger (its cells), which is where an IsoFLOP grid is thinnest: its large
    models get the fewest tokens. The rate is part of what makes the target's runs come out as
    forecast."""
    for path in sorted(tuned_law_paths(_sources(runs))):
        try:
            data = json.loads(Path(path).read_text())
            tuned = float(data["range"]["tokens"][1])
            cells = [(float(c["params"]), float(c["tokens"])) for c in data.get("cells") or [] if c.get("in_law", True)]
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            continue  # not a tune's file here (moved, or a tune's own held-out runs)
        d_opt, n_opt = f.d_opt[0], f.n_opt[0]
        large = [c for c in cells if c[0] >= n_opt] or [c for c in cells if c[0] == max(cells)[0]]
        params, at_size = max(large, key=lambda c: c[1]) if large else (math.nan, math.nan)
        factor, factor_size = d_opt / tuned, d_opt / at_size
        if factor > 1 or factor_size > 1:
            size_part = "" if not factor_size > 1 else (
                f", and {factor_size:.3g}x beyond the most it gave a model of that size or larger "
                f"({fmt.count(at_size)} at {fmt.count(params)} parameters)")
            unit = runs.unit
            return [f"<p class=warn><b>The learning rate at the target is extrapolated</b>: training the forecast's "
                    f"model there (N_opt {fmt.count(n_opt)} parameters, D_opt {fmt.count(d_opt)} {unit}) takes its "
                    f"rate from the tuned law in <code>{escape(path)}</code>, {factor:.3g}x the most {unit} it was "
                    f"tuned on ({fmt.count(tuned)}){size_part}. Past <code>hparams.reach</code> (4 by default) "
                    "<code>flops-fit plan</code> refuses, falls back to the tune's centre rule or extrapolates, as "
                    "<code>[hparams] beyond</code> says (it measures each variable alone); a rate carried this far "
                    "can train the target's runs worse than forecast. Tune at larger budgets (<code>flops-fit tune "
                    "--budgets</code>) to bring it inside.</p>"]
    return []
