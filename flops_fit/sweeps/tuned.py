"""A tuned learning-rate law, read from ``hparams.json`` (what ``flops-fit tune`` writes), and
the guard on how far the planner may carry it.

The law is a power law in some of a run's variables: Marin's form, lr* = m * tokens^-a *
scale^-b * batch^c (the scale is the model's width when its size is a width, its parameter
count otherwise), or the form the tune chose (``tuning.forms``: Bjorck's N and D, DeepSeek's
C, Step Law's non-embedding N and D); where the tune swept batch sizes it also holds
B*(C) = k * C^e. The planner reads it here (a layer below ``flops_fit.tuning``, which fits
it), so a sweep with ``hparams = "DIR"`` plans each run's rate from the tune in DIR.

A law is only known over its tune's grid. ``reach`` measures how far a run lies beyond it (the
largest factor over tokens, width or parameters, FLOPs and batch), and ``guarded_rates``
applies ``hparams.beyond`` past ``hparams.reach``: refuse, fall back to the tune's centre rule
(scaled by the cells' median best multiplier of it), or extrapolate, saying so in each run's
``lr_source``. A run beyond the grid in a variable whose exponent the tune did not identify
(its interval crosses zero) says so too, whatever the factor.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flops_fit.errors import PlanError
from flops_fit.store.runs import tuned_law_paths
from flops_fit.sweeps.hparams import HyperParams

HPARAMS_FILE = "hparams.json"
TUNE_TITLE = "flops-fit tune"  # the <title> of a tune's report.html: `flops-fit report DIR` keeps it
# A fitted law misses its own cells' best rates by x1.1-1.4 (median; the shipped demos' laws): one
# that misses them by more than 10x was not fitted to them (an exponent edited by hand).
MAX_CELL_MISS = 10.0
FORMAT = "flops-fit-hparams/2"  # what a tune writes; /1 (Marin's form only) still reads
FORMATS = ("flops-fit-hparams/1", FORMAT)
SCALES = ("width", "params")
NAMES = {"tokens": "tokens", "width": "width", "params": "parameters", "nonembedding": "non-embedding parameters",
         "flops": "FLOPs", "batch": "batch"}
_V1 = (("a", "tokens", -1.0), ("b", None, -1.0), ("c", "batch", 1.0))  # v1 coefficient -> (variable, sign)


def hparams_path(where: str | Path) -> Path:
    """``where`` itself if it is a file, else ``where/hparams.json``."""
    where = Path(where)
    return where if where.suffix == ".json" else where / HPARAMS_FILE


def _exponents(law: dict[str, Any]) -> dict[str, tuple[float, float, float]]:
    """Signed exponent (value, lo, hi) per variable, from either layout of the law."""
    if law.get("exponents"):
        return {v: (float(c["value"]), _num(c.get("lo")), _num(c.get("hi")))
                for v, c in law["exponents"].items() if c.get("fitted", True)}
    out = {}
    for name, var, sign in _V1:
        c = law["coefficients"].get(name)
        if c is not None and c.get("fitted", True):
            lo, hi = sorted((sign * _num(c.get("lo")), sign * _num(c.get("hi"))))
            out[var or law["scale"]] = (sign * float(c["value"]), lo, hi)
    return out


def _unfitted(law: dict[str, Any]) -> tuple[str, ...]:
    """Variables the law records but could not fit (the cells did not vary them apart): held at exponent 0."""
    if law.get("exponents"):
        return tuple(v for v, c in law["exponents"].items() if not c.get("fitted", True))
    return tuple(var or law["scale"] for name, var, _ in _V1
                 if (c := law["coefficients"].get(name)) is not None and not c.get("fitted", True))


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def _range(data: dict[str, Any], scale: str) -> dict[str, tuple[float, float]]:
    """Each variable's (min, max) over the cells the law was fitted on (none recorded: empty)."""
    if data.get("range"):
        return {v: (float(lo), float(hi)) for v, (lo, hi) in data["range"].items()}
    cells = [c for c in data.get("cells") or [] if c.get("in_law", True)]
    keys = {"tokens": "tokens", scale: "scale", "flops": "flops", "batch": "batch_size"}
    return {v: (min(c[k] for c in cells), max(c[k] for c in cells)) for v, k in keys.items()
            if cells and all(k in c for c in cells)}


def _centre_ratio(data: dict[str, Any]) -> float | None:
    """The median over the law's cells of lr* / the centre rule's rate (None: not recorded)."""
    multipliers = sorted((data.get("tune") or {}).get("multipliers") or [])
    if not multipliers:  # a law fitted from a lab's own runs: no centre rule
        return None
    ratios = sorted(c["lr_opt"] * multipliers[0] / sorted(c["rates"])[0]
                    for c in data.get("cells") or [] if c.get("in_law") and c.get("reason") is None and c.get("rates"))
    if not ratios or not multipliers:
        return None
    mid = len(ratios) // 2
    return ratios[mid] if len(ratios) % 2 else math.sqrt(ratios[mid - 1] * ratios[mid])


@dataclass(frozen=True)
class TunedLaw:
    """The law of one tune: lr = m * prod(v ** exponent), what it was tuned on (each variable's
    range, the centre rule), and the near-optimal band (the median half-width, in log rate, of
    its cells' 0.5% bands)."""

    path: str
    model: str | None  # None: fitted from a lab's own runs (``fit_rates``) for no model in particular
    scale: str  # "width" or "params": how the tune measured a model's size
    m: float
    exponents: dict[str, tuple[float, float, float]]  # variable -> (signed exponent, lo, hi)
    batch_size: int | None  # None: the runs recorded no batch size
    beta2: float | None
    band: float
    batch_law: tuple[float, float] | None = None  # (k, e): B* = k * C^e
    name: str = "marin"
    range: dict[str, tuple[float, float]] = field(default_factory=dict)
    centre: dict[str, Any] | None = None  # the tune's centre rule (HyperParams fields)
    centre_ratio: float | None = None
    # The tune's (parametrization, base_width); None: not recorded (a law fitted from a lab's own runs)
    parametrization: tuple[str, int | None] | None = None
    unfitted: tuple[str, ...] = ()  # variables whose exponent the cells could not fit (held at 0, never measured)

    @classmethod
    def load(cls, where: str | Path) -> TunedLaw:
        """Read ``where`` (a tune's folder or its hparams.json); PlanError naming the file and the fix."""
        path = hparams_path(where)
        if not path.is_file():
            runs = "" if not (path.parent / "runs.sqlite").is_file() else (
                f"; {path.parent} holds runs but no law: a tune that found none wrote none (`flops-fit tune SPEC "
                f"--out {path.parent} --resume` says why), and a sweep over rates gets one from `flops-fit tune --from "
                f"{path.parent} --out DIR`")
            raise PlanError(f"hparams {str(where)!r}: no {path} (a folder written by `flops-fit tune SPEC --out DIR`)"
                            + runs)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise PlanError(f"hparams {path}: not a readable JSON file ({exc}); run `flops-fit tune` again") from None
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: Any, path: str = "hparams.json") -> TunedLaw:
        if not isinstance(data, dict) or data.get("format") not in FORMATS:
            raise PlanError(f"hparams {path}: not a flops-fit tune's hparams.json (format {FORMAT!r} expected)")
        try:
            law = data["law"]
            batch = data.get("batch_law")
            m = law["m"] if "m" in law else law["coefficients"]["m"]
            batch_size = data["setup"]["batch_size"]
            out = cls(path=path, model=None if data["model"] is None else str(data["model"]), scale=str(law["scale"]),
                      m=float(m["value"]), exponents=_exponents(law),
                      batch_size=None if batch_size is None else int(batch_size),
                      beta2=None if data.get("beta2") is None else float(data["beta2"]), band=float(law["band"]),
                      batch_law=None if batch is None else (float(batch["k"]), float(batch["e"])),
                      name=str(law.get("name", "marin")), range=_range(data, str(law["scale"])),
                      centre=(data["setup"].get("hparams")), centre_ratio=_centre_ratio(data),
                      parametrization=_parametrization(data["setup"].get("model_config")),
                      unfitted=_unfitted(law))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise PlanError(f"hparams {path}: missing or malformed entry {exc}; run `flops-fit tune` again") from None
        if out.scale not in SCALES or not (0 < out.m < math.inf and all(math.isfinite(e[0]) for e in out.exponents.values())) \
                or not set(out.exponents) <= set(NAMES):
            raise PlanError(f"hparams {path}: the law's scale or coefficients are invalid; run `flops-fit tune` again")
        bad = out._invalid() or out._misses_cells(data.get("cells"))
        if bad:
            raise PlanError(f"hparams {path}: {bad}; run `flops-fit tune` again")
        return out

    def _misses_cells(self, cells: Any) -> str | None:
        """Why the law cannot be the one fitted to its own cells (their best rates missed by more
        than ``MAX_CELL_MISS``, median), or None (also when the cells do not record the law's variables)."""
        keys = {"tokens": "tokens", "flops": "flops", "batch": "batch_size", "nonembedding": "nonembedding",
                "params": "params", self.scale: "scale"}
        misses = []
        for cell in cells if isinstance(cells, list) else []:
            try:
                if cell.get("in_law") and cell.get("lr_opt"):
                    values = {v: float(cell[keys[v]]) for v in self.exponents}
                    misses.append(abs(math.log(self.rate(values) / float(cell["lr_opt"]))))
            except (AttributeError, KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError):
                continue
        miss = math.exp(statistics.median([m for m in misses if math.isfinite(m)] or [0.0]))
        if miss > MAX_CELL_MISS:
            return (f"the law misses the best rates of the cells it was fitted on by x{miss:.3g} (median), so it "
                    f"is not the law fitted to them (edited by hand?)")
        return None

    def _invalid(self) -> str | None:
        """What in the law's other numbers cannot be (beta2, band, batch law, ranges), or None."""
        if self.beta2 is not None and not 0 <= self.beta2 < 1:
            return f"beta2 {self.beta2!r} is not in [0, 1)"
        if not 0 <= self.band < math.inf:
            return f"the law's band {self.band!r} is not a finite width >= 0"
        if self.batch_law is not None and not (0 < self.batch_law[0] < math.inf and math.isfinite(self.batch_law[1])):
            return f"the batch law (k, e) = {self.batch_law} needs a finite k > 0 and a finite e"
        for v, (lo, hi) in self.range.items():
            if not 0 <= lo <= hi < math.inf:
                return f"the range of {v} [{lo!r}, {hi!r}] is not 0 <= min <= max (finite)"
        return None

    @property
    def c(self) -> float | None:
        """The batch exponent (None: the law holds at its one tuned batch size)."""
        return self.exponents["batch"][0] if "batch" in self.exponents else None

    def rate(self, values: dict[str, float]) -> float:
        """lr* for one run from its variables (``width``, ``params``, ``nonembedding``, ``tokens``,
        ``flops``, ``batch``: those the law uses)."""
        return self.m * math.prod(values[v] ** e for v, (e, _, _) in self.exponents.items())

    def batch(self, flops: float) -> int:
        """B*(C) rounded to a whole number of sequences (the batch law is required)."""
        k, e = self.batch_law
        return max(1, round(k * flops ** e))

    def check_batch(self, batch_size: int, model: str) -> None:
        """PlanError unless the law holds at ``batch_size`` (a law tuned at one batch holds only there)."""
        if self.model is not None and model != self.model:
            raise PlanError(f"hparams {self.path} was tuned for model {self.model!r}, not {model!r}: "
                            f"tune this model (`flops-fit tune SPEC --out DIR`) or drop hparams")
        if self.c is None and self.batch_law is None and self.batch_size is not None and batch_size != self.batch_size:
            raise PlanError(f"hparams {self.path} was tuned at batch_size {self.batch_size} only, this sweep uses "
                            f"{batch_size}: use batch_size = {self.batch_size}, or tune several batch sizes "
                            f"(--batch-sizes) so the law learns how the rate moves with the batch")

    def check_parametrization(self, model_config: dict[str, Any]) -> None:
        """PlanError unless the sweep's models scale their layers' rates as the tune's did: a law
        tuned on the standard model already falls with the width, and muP / per-layer rates
        scale the layers by base_width / width again (or by another base width)."""
        ours = _parametrization(model_config)
        if self.parametrization is None or ours == self.parametrization:
            return
        kind, base = self.parametrization
        twice = ours[0] != "standard" and kind == "standard"
        same = ("drop [model] parametrization and base_width" if kind == "standard" else
                f"set [model] parametrization = \"{kind}\" and base_width = {base}")
        raise PlanError(f"hparams {self.path} was tuned with {_describe(self.parametrization)}, this sweep's model "
                        f"has {_describe(ours)}: its rates would be scaled with the width "
                        f"{'twice' if twice else 'differently'}; tune this model as it is configured "
                        f"(`flops-fit tune SPEC --out DIR`), or {same} as the tune had them")

    def unidentified(self) -> list[str]:
        """Variables whose exponent's interval crosses zero (or was not measured), then those the law could not fit."""
        return [v for v, (_, lo, hi) in self.exponents.items()
                if not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0 <= hi] + \
            [v for v in self.unfitted if v not in self.exponents]

    def reach(self, values: dict[str, float]) -> dict[str, float]:
        """How far beyond the tune's grid a run lies, per variable: factors above 1 only."""
        checked = {*self.exponents, "tokens", self.scale, "batch"}
        out = {}
        for v in checked & set(self.range) & set(values):
            lo, hi = self.range[v]
            factor = max(values[v] / hi, lo / values[v]) if lo > 0 else values[v] / hi
            if factor > 1 + 1e-9:
                out[v] = factor
        return out

    def describe(self, unit: str = "token") -> str:
        """The law as a formula with its numbers (its data variable named by what D counts, ``unit``)."""
        terms = "".join(f" * {f'{unit}s' if v == 'tokens' else v}^{e:.3g}" for v, (e, _, _) in self.exponents.items())
        batch = "" if "batch" in self.exponents or self.batch_size is None else f" (batch {self.batch_size})"
        return f"lr = {self.m:.4g}{terms}{batch}" + ("" if self.name == "marin" else f" ({self.name}'s form)")


def _parametrization(model_config: Any) -> tuple[str, int | None] | None:
    """(parametrization, base_width) of a resolved model configuration (None: none recorded)."""
    if not isinstance(model_config, dict):
        return None
    kind = model_config.get("parametrization") or "standard"
    return (str(kind), None if kind == "standard" else model_config.get("base_width"))


def _describe(parametrization: tuple[str, int | None]) -> str:
    kind, base = parametrization
    return "the standard parametrization" if kind == "standard" else f"parametrization {kind!r} at base_width {base}"


def _named(variable: str, unit: str) -> str:
    """A law variable's name in a sentence; the data variable says what D counts (tokens, samples)."""
    return f"{unit}s" if variable == "tokens" else NAMES[variable]


def _factors(reach: dict[str, float], unit: str) -> str:
    return ", ".join(f"{_named(v, unit)} x{f:.3g}" for v, f in sorted(reach.items(), key=lambda kv: -kv[1]))


def guarded_rates(law: TunedLaw, hparams: HyperParams, values: dict[Any, dict[str, float]],
                  model: str, unit: str = "token") -> tuple[dict[Any, float], dict[Any, str]]:
    """Each run's rate and ``lr_source`` (keys of ``values``: the planner's runs): the law's
    within ``hparams.reach`` of its grid; beyond it, ``hparams.beyond`` decides (PlanError for
    "refuse", naming the run, the factors and the options)."""
    rates, sources = {}, {}
    source = hparams.source()
    shaky = set(law.unidentified())
    for key, vals in values.items():
        reach = law.reach(vals)
        worst = max(reach.values(), default=1.0)
        notes = [f"beyond the tune: {_factors(reach, unit)}"] if reach else []
        blind = sorted(shaky & set(reach))
        if blind:
            notes.append("exponent not identified for " + ", ".join(_named(v, unit) for v in blind))
        if worst <= hparams.reach or hparams.beyond == "extrapolate":
            rates[key] = law.rate(vals)
            sources[key] = source + (f" ({'; '.join(notes)})" if notes else "")
        elif hparams.beyond == "refuse":
            raise PlanError(
                f"a run ({', '.join(f'{_named(v, unit)} {vals[v]:.4g}' for v in sorted(reach))}) lies beyond the tuned "
                f"law's grid in {law.path} by {_factors(reach, unit)}, past reach = {hparams.reach:g}: tune at larger budgets or "
                # a law fitted from runs (or written by hand) has no centre rule to fall back to: not offered
                + ("sizes, or set [hparams] beyond = \"centre\" (the tune's centre rule) or \"extrapolate\""
                   if law.centre and law.centre_ratio is not None else "sizes, or set [hparams] beyond = \"extrapolate\""))
        else:
            rates[key], sources[key] = _centre(law, vals, model), (
                f"centre:{law.centre.get('lr_rule')} x{law.centre_ratio:.3g} (beyond {source}: {_factors(reach, unit)})")
    return rates, sources


def _centre(law: TunedLaw, values: dict[str, float], model: str) -> float:
    """The tune's centre rule at this run, times the cells' median best multiplier of it."""
    if not law.centre or law.centre_ratio is None:
        raise PlanError(f"hparams {law.path} records no centre rule (written by hand, or fitted from runs by fit_rates): use beyond = \"refuse\" or "
                        f"\"extrapolate\", or tune again")
    rule = HyperParams.from_dict({k: v for k, v in law.centre.items() if k in ("lr", "lr_rule", "base_lr", "base_width")})
    return rule.learning_rate(values.get("width"), int(values["batch"]), model) * law.centre_ratio


def sources_header(sources: set[str], unit: str = "token") -> str:
    """The plan's header lines for its runs' rate sources: the law (and how far it reaches)."""
    tuned = sorted(tuned_law_paths(sources) |
                   {s.partition("(beyond tuned:")[2].partition(":")[0] for s in sources if s.startswith("centre:")})
    if not tuned:
        return ""
    try:
        law = TunedLaw.load(tuned[0])
    except PlanError:  # e.g. a tune's own held-out run ("tuned:holdout"): no law file to describe
        return ""
    head = f"\nlearning rates from the tuned law in {', '.join(tuned)}: {law.describe(unit)}"
    if law.batch_law is not None:
        head += f"; batch per budget from B* = {law.batch_law[0]:.4g} * C^{law.batch_law[1]:.3g}"
    notes = sorted({s.partition(" (")[2].rstrip(")") for s in sources if " (" in s})
    for note in notes:
        head += f"\n  {note}"
    shaky = law.unidentified()
    if shaky:
        head += ("\n  the tune did not identify the exponent of " + ", ".join(_named(v, unit) for v in shaky) +
                 " (its interval crosses zero, or the cells could not fit it)")
    return head


def short_source(source: str) -> str:
    """``RunSpec.lr_source`` for a table cell: "tuned" for a law (the header names its file),
    "tuned*" beyond its grid, "centre" for the fallback."""
    if source.startswith("tuned:"):
        return "tuned*" if "beyond the tune" in source else "tuned"
    if source.startswith("centre:"):
        return "centre"
    return source.removeprefix("tune:")


def stored_grid(runs: list[Any]) -> dict[str, list[float]] | None:
    """The grid a tune's stored runs were planned with (budgets, sizes, the multipliers their ``lr_source``
    ``tune:x<m> ...`` records; batch sizes and beta2s where several): a resume run without them plans another
    tune, so its refusal and ``flops-fit status`` name them. None: not a tune's runs."""
    tagged = [r for r in runs if str(r.lr_source or "").startswith("tune:x")]
    if not tagged:
        return None
    grid = {"budgets": sorted({float(r.budget) for r in tagged}), "sizes": sorted({int(r.size) for r in tagged}),
            "multipliers": sorted({float(r.lr_source.split()[0][len("tune:x"):]) for r in tagged})}
    for name, attr in (("batch_sizes", "batch_size"), ("beta2s", "beta2")):
        values = sorted({getattr(r, attr) for r in tagged})
        if len(values) > 1:
            grid[name] = values
    return grid


def exact_text(value: float) -> str:
    """``value`` as short as it reads back exactly: ``0.25``, ``4e+08``, but 1/3 as ``0.3333333333333333`` (``:g``'s
    ``0.333333`` planned rates, and a tune resumed with them, that are not the stored ones)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    short = f"{value:g}"
    return short if float(short) == value else repr(float(value))


def grid_flags(grid: dict[str, list[float]]) -> str:
    """``stored_grid``'s grid as ``flops-fit tune``'s options: ``--budgets 4e+08 --sizes 8,12 --multipliers ...``."""
    return " ".join(f"--{name.replace('_', '-')} {','.join(exact_text(v) for v in values)}"
                    for name, values in grid.items())
