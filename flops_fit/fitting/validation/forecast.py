"""The forecast: a size and a loss at the target, each chosen by its own extrapolation record.

Several methods on several scales give several answers, and the target lies beyond the
sweep. Every candidate (method x scale x focus) is forward-chained (``chaining``): fit the
budgets up to C_k, predict the larger ones, record the error against the ratio r. A forecast is
two answers, and the candidate best at one is often worst at the other, so each answer is
chosen by its own record:

- per candidate and answer, the errors are modelled as a drift plus scatter in ln error / ln r,
  one value per split (predictions of one split share its fit), combined with a prior learned
  on public sweeps (``drift``, ``prior``);
- each answer comes from the weighted average of the candidates (weights 1 / sd^2 of their
  error models), or from the one whose error at the target is expected to be smallest, as
  ``MODE`` says; N_opt from the candidates fitted to the frontier or reading it directly
  (``SIZE_FOCI``), the loss from all;
- the drift is measured and reported, and the point is corrected by it as ``drift.CARRY``
  says: not at all by default. Left out one study at a time, the public sweeps covered their
  truths more often, and with smaller errors, uncorrected than corrected linearly in ln r (a drift
  measured at 2-50x changes sign or levels off further out; benchmarks/bench_forecast_variants.py);
- the loss's interval is its reach law (``reach_law``): how far the product's own answers erred
  at each reach on public sweeps, scaled by this sweep's own chaining of the answer. N_opt's (and
  the loss's with ``laws={}``) is the answer's error model: scatter plus the drift's own uncertainty
  grown with ln r_t (Student's t with the prior's pseudo degrees of freedom added to the sweep's
  own). Each rule is the one that calibrated leaving one study out (docs/validation/forecast.md).

A forecast needs chaining evidence: a candidate answers only with predictions from
``MIN_SPLITS`` or more splits; without any, there is no forecast (the methods' own fits and
their bootstrap intervals stand, and ``fit`` says so). Calibration is measured, not assumed
(docs/validation/forecast.md, benchmarks/bench_forecast_calibration.py).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from flops_fit.errors import FitInputError
from flops_fit.fitting import formatting as fmt
from flops_fit.fitting.inputs import Runs
from flops_fit.fitting.laws.profiles import budget_groups
from flops_fit.fitting.scales import SCALES, rescale, to_params
from flops_fit.fitting.validation.chaining import (
    Approach,
    Record,
    focus_of,
    forward_chain,
    point,
    ratio_table,
    score,
    score_cutoff,
    variants,
)
from flops_fit.fitting.validation.drift import (
    CARRY,
    FIELDS,
    ErrorModel,
    Prior,
    error_model,
    reach,
    split_slopes,
)
from flops_fit.fitting.validation.holdout import fit_pairs
from flops_fit.fitting.validation.prior import prior_for, shipped, shipped_laws
from flops_fit.fitting.validation.reach_law import ANSWERS, CAPPED, Inner, ReachLaw, cap_level
from flops_fit.fitting.validation.validity import failure, unphysical
from flops_fit.tables import format_table

MIN_SPLITS = 2  # splits (fits up to distinct budgets) a candidate's chaining needs to answer
# The foci N_opt is answered from: laws fitted to the frontier and the methods that read it directly
# (no focus). A law fitted to every run alike places its optimum where runs far from it pull it
# (laws/focus.py); it answers the loss, which it fits as a middle rather than a floor. On the public
# sweeps N_opt's median error fell from 33% to 26% without them (docs/validation/forecast.md).
SIZE_FOCI = (None, "frontier")
MODES = ("select", "average", "auto")
MODE = "average"  # benchmarks/bench_forecast_variants.py compares the modes on public sweeps
# Each candidate's error model moderated by the prior pooled over every candidate, not by its label's
# own: as well calibrated leaving one study out, narrower loss intervals, one prior per answer
# instead of eleven (bench_forecast_variants.py; docs/validation/forecast.md).
PER_LABEL = False
LABELS = {"loss": "loss", "n_opt": "N_opt"}

Triple = tuple[float, float, float]
Key = tuple[str, str, str | None]

TARGET_FACTOR = 10.0  # default target: this many times the largest swept budget
BEYOND_MEASURED = "the target lies beyond the reach public sweeps measured: "  # ``Forecast.beyond_measured``
BELOW_SWEPT = "the target lies below every swept budget: "  # ``Forecast.below_swept``


def default_target(runs: Any) -> float:
    """TARGET_FACTOR times the largest budget swept."""
    budgets, _ = budget_groups(runs)
    return float(TARGET_FACTOR * np.max(budgets))


@dataclass(kw_only=True)
class Candidate:
    """One (method, scale, focus): its forward-chaining score (mean |relative error| over the
    ``predictions`` at the largest ratios), its error model per answer, and its own point
    answer at the target (N_opt in parameters). ``focus`` is None for a method without it."""

    method: str
    scale: str
    focus: str | None = None
    loss_error: float = np.nan
    n_opt_error: float = np.nan
    predictions: int = 0
    models: dict[str, ErrorModel] = field(default_factory=dict)
    target_loss: float = np.nan
    target_n_opt: float = np.nan
    target_d_opt: float = np.nan
    reason: str | None = None

    @property
    def key(self) -> Key:
        return self.method, self.scale, self.focus

    @property
    def name(self) -> str:
        return describe(self.key)


CAPPED_RULE = "error model within the reach law"  # reach_law.CAPPED answers' interval rule


@dataclass(kw_only=True)
class Answer:
    """One answer (``quantity`` "loss" or "n_opt") at the target: where it comes from
    (``source``; ``members`` with their weights), the raw prediction, the drift correction
    applied to it (relative), the error model and the (value, lo, hi) it gives."""

    quantity: str
    source: str
    members: list[dict[str, Any]]
    raw: float
    correction: float
    value: float
    lo: float
    hi: float
    model: ErrorModel
    chaining_error: float
    interval: dict[str, Any] = field(default_factory=dict)  # how the interval was sized

    def band(self, ratios: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
        """The expected relative error at each ratio and the band the answer's interval rule gives
        there (ratio space, never below -100%), and the rule's name: what the report draws."""
        centre, lo, hi = self.model.band(ratios, float(self.interval.get("level", 0.95)))
        i = self.interval
        if i.get("rule") == CAPPED_RULE:
            shift = np.log1p(centre)
            below, above = self.bounded(shift - np.log1p(lo), ratios), self.bounded(np.log1p(hi) - shift, ratios)
            return centre, np.expm1(shift - below), np.expm1(shift + above), CAPPED_RULE
        if i.get("rule") != "reach law":
            return centre, lo, hi, "scatter + drift's sd"
        law = ReachLaw(floor=i["floor"], slope=i["slope"], scores=(), spread="spread" in i,  # s: the target's
                       largest=i.get("largest", np.inf), reach=i.get("reach", np.inf))
        half = i["multiplier"] * law.scale(ratios, i["own_factor"], i.get("spread", 0.0))
        if "largest" in i:  # at most the largest error of the law's answers (``ReachLaw.cap``)
            half = np.minimum(half, law.cap(ratios))
        shift = np.log1p(centre)
        return centre, np.expm1(shift - half), np.expm1(shift + half), "reach law"

    def bounded(self, half: Any, ratios: Any) -> Any:
        """A log half-width of the error model at ``ratios`` within the reach law's bounds where the
        answer's rule has them (``reach_law.CAPPED``); as it is otherwise."""
        i = self.interval
        if i.get("rule") != CAPPED_RULE:
            return half
        law = ReachLaw(floor=i["floor"], slope=i["slope"], scores=())
        return np.clip(half, i["multiplier"] * i["floor"], i["multiplier"] * law.sigma(ratios))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["model"] = self.model.to_dict()
        return fmt.json_safe(out)


@dataclass(kw_only=True)
class Forecast:
    """The answers at ``target``, ``ratio`` times the largest budget: ``n_opt`` in parameters,
    ``d_opt`` in tokens (from the N_opt answer's candidate) and ``loss``, each (estimate, lo, hi).
    ``answers`` says where each comes from; ``prior`` is the pooled prior used, with provenance."""

    target: float
    ratio: float
    level: float = 0.95
    n_opt: Triple
    d_opt: Triple
    loss: Triple
    answers: dict[str, Answer]
    score_cutoff: float
    mode: str = MODE
    prior: dict[str, Any] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    unit: str = "tokens"  # what D_opt counts (``Runs.unit``)
    metric: str = "loss"  # what the laws fitted, as the text names it ("top-1 error" for ``metric="error"``)
    lowest: float = np.nan  # the lowest loss the runs ended at: a loss answer far under it is withheld

    def __repr__(self) -> str:
        """One line: the answer (the dataclass's own repr would print every chaining record)."""
        return (f"<Forecast at C = {fmt.flops(self.target)}: N_opt {fmt.count(self.n_opt[0])} "
                f"({self.answers['n_opt'].source}), loss {fmt.sig(self.loss[0], 4)} ({self.answers['loss'].source})>")

    def to_dict(self) -> dict[str, Any]:
        out = {"target": self.target, "ratio": self.ratio, "level": self.level, "mode": self.mode,
               "score_cutoff": self.score_cutoff, "unit": self.unit, "prior": self.prior}
        for key in ("n_opt", "d_opt", "loss"):
            value, lo, hi = getattr(self, key)
            source = self.answers["loss" if key == "loss" else "n_opt"]
            out[key] = {"value": value, "interval": [lo, hi], "source": source.source}
        if why := self.loss_withheld():
            out["loss"].update(value=None, interval=[None, None], withheld=why)
        out["answers"] = {k: a.to_dict() for k, a in self.answers.items()}
        out["notes"] = [n for n in [self.calibration_note()] if n]
        out["candidates"] = [_candidate_dict(c) for c in self.candidates]
        out["records"] = [r.to_dict() for r in self.records]
        return fmt.json_safe(out)

    def calibration_note(self) -> str | None:
        """A note where the laws fitted another metric than a loss (an image sweep's top-1 error): the prior and
        the reach law that size its interval were learned on public sweeps' losses, so its width is a loss's."""
        if self.metric == "loss":  # bits per byte too: a loss in other units, its relative errors the same
            return None
        return (f"the {self.metric}'s interval is sized by the prior and the reach law learned on public sweeps' "
                f"losses, not {self.metric}s: it assumes a {self.metric} errs at this reach as a loss does, which no "
                "public sweep has checked")

    def beyond_measured(self) -> str | None:
        """A caveat when the target lies beyond the largest reach at which public sweeps measured
        an answer's error (``ReachLaw.reach``): its interval there extends the law, unchecked."""
        reaches = [a.interval["reach"] for a in self.answers.values() if "reach" in a.interval]
        if not reaches or self.ratio <= min(reaches):
            return None
        return (f"{BEYOND_MEASURED}it is {self.ratio:.3g}x the largest budget, and public sweeps measured the "
                f"forecast's error up to {min(reaches):.3g}x: beyond that its intervals extend the measured growth "
                "of the error with the reach, which no sweep has checked; sweep larger budgets to bring it nearer")

    def below_swept(self, smallest: float) -> str | None:
        """A caveat when the target lies below the ``smallest`` swept budget: chaining measures the
        answers' errors toward larger budgets only, and the intervals keep their width at no reach
        there (1e9 FLOPs, 60x below the demo's runs, read a loss of 3.015 +-1.3%), unchecked."""
        if not self.target < smallest:
            return None
        return (f"{BELOW_SWEPT}{fmt.flops(self.target)} FLOPs is {smallest / self.target:.3g}x below the smallest, "
                f"{fmt.flops(smallest)}, and forward chaining measures the answers' errors toward larger budgets only: "
                "its intervals there keep their width at no reach, which no run or split has checked; a forecast "
                "answers a budget beyond the sweep (--target C, target=C)")

    def loss_withheld(self) -> str | None:
        """Why the loss answer is withheld (None if it is not): far under the runs' lowest (``fmt.loss_under``);
        at 1e30 FLOPs the demo's runs, which end at 1.64 nats and above, read 0.0135."""
        return fmt.loss_under(self.loss[0], self.lowest)

    def loss_text(self) -> str:
        """The loss answer as printed: "1.266 [1.221, 1.313]", or withheld with the reason."""
        why = self.loss_withheld()
        return f"withheld: {why}" if why else _triple(self.loss, fmt.loss)

    def summary(self) -> str:
        lines = [f"Forecast at C = {fmt.flops(self.target)} FLOPs, {self.ratio:.3g}x the largest budget "
                 f"({100 * self.level:g}% intervals; each answer chosen by its own forward-chaining record):",
                 f"  N_opt {fmt.scale_interval(*self.n_opt)} parameters, D_opt {fmt.scale_interval(*self.d_opt)} "
                 f"{self.unit}, "
                 f"{self.metric} {self.loss_text()}"]
        lines += [f"  {answer_line(a, self.ratio, self.metric)}" for a in (self.answers["n_opt"], self.answers["loss"])]
        lines += [f"  note: {n}" for n in [self.calibration_note()] if n]
        lines += [f"  prior on the extrapolation error: {prior_note(self.prior)}",
                  format_table(candidate_rows(self.candidates), CANDIDATE_HEADERS)]
        return "\n".join(lines)


def describe(key: Key) -> str:
    method, scale, focus = key
    return f"{method}{'' if focus is None else f'/{focus}'} on {SCALES.get(scale, scale)}"


CARRY_NOTES = {"off": "a drift measured inside the sweep did not carry to larger budgets on public sweeps",
               "count": "counted as error in the interval", "widen": "the interval stretched over it"}


def answer_line(a: Answer, ratio: float, metric: str = "loss") -> str:
    """Where an answer comes from, in one line (the loss answer named as ``metric``)."""
    m = a.model
    drift = f"drift {m.drift:+.3f} per ln r (own {m.own_drift:+.3f}) " + (
        f"corrected the point by {100 * a.correction:+.1f}%" if abs(a.correction) > 0 else
        f"not corrected ({m.carry}: {CARRY_NOTES.get(m.carry, 'none at this reach')})")
    line = f"{metric if a.quantity == 'loss' else LABELS[a.quantity]} from {a.source}: {m.splits} chaining splits; {drift}; "
    i = a.interval
    if i.get("rule") == "reach law":
        scaled = i.get("own_weight") is not None  # f: this sweep's own chaining scales sigma (reach_law.scale)
        f = "f " if scaled else ""
        own = (f", f = {i['own_factor']:.2f} by this sweep's own chaining ({i['own_splits']} splits)"
               if scaled else "")
        measured = ("at any reach" if ratio <= i.get("reach", np.inf) else
                    f"measured up to {i['reach']:.3g}x, grown as sigma(r) beyond it")
        cap = (f"; at most +-{100 * np.expm1(i.get('cap', i['largest'])):.1f}% (the largest error of a public sweep's "
               f"answer, {measured}), which applies" if i.get("capped") else "")
        if "spread" in i:  # a law fitted with the members' spread: +-k (f sigma(r) (+) s)
            return line + (f"interval +-{i['multiplier']:.2f} x ({f}sigma(r) (+) s): sigma = {100 * i['sigma']:.2f}% at "
                           f"{ratio:.3g}x (the reach law of public sweeps' answers){own}, the candidates' spread there "
                           f"s = {100 * i['spread']:.2f}%{cap}")
        return line + (f"interval +-{i['multiplier']:.2f} {f}sigma(r), sigma = {100 * i['sigma']:.2f}% at {ratio:.3g}x "
                       f"(the reach law of public sweeps' answers){own}{cap}")
    note = f" ({i['note']})" if i.get("note") else ""
    # the sweep's own scatter beside the moderated one, as the drift's: 0.110 alone read as the splits' own (0.016)
    own = f"own {m.own_scatter:.3f}; " if np.isfinite(m.own_scatter) else ""
    grown = (f"scatter {m.scatter:.3f} per ln r ({own}{m.dof:.3g} degrees of freedom with the prior) grown to "
             f"{ratio:.3g}x{note}")
    if i.get("rule") == CAPPED_RULE:
        k = i["multiplier"]
        raw = i.get("error_model_log_interval")  # the error model's own interval, before the bounds
        floored = raw is not None and min(-raw[0], raw[1]) < k * i["floor"]  # said as the upper bound is
        return line + (f"{grown}; bounded by the reach law of public sweeps' answers: at least "
                       f"x{np.exp(k * i['floor']):.2f} either way (its error at no reach), at most "
                       f"x{np.exp(k * i['sigma']):.2f} (at {ratio:.3g}x)"
                       + ("; the upper bound applies" if i.get("capped") else "")
                       + ("; the lower bound applies" if floored else ""))
    return line + grown


def prior_note(prior: Mapping[str, Any]) -> str:
    src = prior.get("provenance", {})
    fitted_on = src.get("sweeps")
    return (f"learned on {len(fitted_on)} public sweeps ({', '.join(fitted_on)})" if fitted_on else
            str(src.get("note", "given by the caller")))


CANDIDATE_HEADERS = ["method", "focus", "scale", "splits", "loss error", "N_opt error", "loss drift / ln r",
                     "N_opt drift / ln r", "loss sd / ln r", "N_opt sd / ln r", "note"]
CHAIN_HEADERS = ["ratio C / C_k", "predictions", "mean |loss error|", "mean |N_opt error|"]


def candidate_rows(candidates: Sequence[Candidate]) -> list[list[str]]:
    def model(c: Candidate, q: str, what: str) -> str:
        m = c.models.get(q)
        return "-" if m is None else f"{getattr(m, what):+.3f}" if what == "drift" else f"{m.sd:.3f}"

    return [[c.method, c.focus or "-", c.scale, str(max((m.splits for m in c.models.values()), default=0)),
             _pct(c.loss_error, 2), _pct(c.n_opt_error, 1), model(c, "loss", "drift"), model(c, "n_opt", "drift"),
             model(c, "loss", "sd"), model(c, "n_opt", "sd"), c.reason or ""] for c in sorted(candidates, key=_rank)]


def chain_rows(records: Sequence[Record]) -> list[list[str]]:
    return [[f"{ratio:g}", str(n), _pct(loss, 2), _pct(n_opt, 1)] for ratio, loss, n_opt, n in ratio_table(records)]


def _rank(c: Candidate) -> tuple[float, float]:
    sds = [c.models[q].sd if q in c.models else np.inf for q in FIELDS]
    return tuple(sds)


def _candidate_dict(c: Candidate) -> dict[str, Any]:
    out = {k: v for k, v in asdict(c).items() if k != "models"}
    out["models"] = {q: m.to_dict() for q, m in c.models.items()}
    return fmt.json_safe(out)


def default_priors() -> tuple[dict[str, dict[str, Prior]], dict[str, Any]]:
    return shipped()


def forecast(approaches: Sequence[Approach], runs: Runs, target: float, *, curve: str,
             scales: Sequence[str] = tuple(SCALES), workers: int = 1, level: float = 0.95) -> Forecast:
    """Forward-chain every (method, scale, focus) (point fits), fit each on all runs, and answer
    at ``target`` per answer by its own record (see the module's docstring)."""
    return forecasts(approaches, runs, [target], curve=curve, scales=scales, workers=workers, level=level)[0]


def forecasts(approaches: Sequence[Approach], runs: Runs, targets: Sequence[float], *, curve: str,
              scales: Sequence[str] = tuple(SCALES), workers: int = 1, level: float = 0.95,
              priors: tuple[Mapping[str, Mapping[str, Prior]], Mapping[str, Any]] | None = None, mode: str = MODE) -> list[Forecast]:
    """``forecast`` at several targets from one chaining and one set of point fits."""
    options = [point(v) for a in approaches for v in variants(a)]
    records, reasons = forward_chain(options, runs, scales, curve=curve, workers=workers)
    keys = [(v.name, s, focus_of(v)) for s in scales for v in options]
    by_key = {(v.name, focus_of(v)): v for v in options}
    targets = np.asarray(targets, dtype=float)
    predictions: dict[Key, np.ndarray] = {}
    chained = {(r.method, r.scale, r.focus) for r in records}
    scaled: dict[str, Any] = {}
    for scale in dict.fromkeys(key[1] for key in keys if key in chained):
        try:
            scaled[scale] = rescale(runs, scale)
        except FitInputError as exc:
            reasons.update({key: f"cannot fit all runs: {exc}" for key in keys if key[1] == scale})
    fitted = [key for key in keys if key in chained and key[1] in scaled]
    results = fit_pairs([(by_key[(key[0], key[2])], scaled[key[1]]) for key in fitted], workers)
    for key, result in zip(fitted, results, strict=True):
        own = scaled[key[1]]
        if isinstance(result, FitInputError):
            reasons[key] = f"cannot fit all runs: {result}"
            continue
        failed = failure(result, targets)
        if failed is not None:  # no finite, ordered answer at the target: not a candidate
            reasons[key] = f"its fit of all runs failed: {failed}"
            continue
        table = result.predict(targets)
        predictions[key] = np.column_stack([table["loss"].to_numpy(float),
                                            to_params(own, table["N_opt"].to_numpy(float)),
                                            table["D_opt"].to_numpy(float)])
    budgets, _ = budget_groups(runs)
    largest = float(np.max(budgets))
    return [replace(decide(records, {k: v[i] for k, v in predictions.items()}, float(t), float(t / largest),
                           keys=keys, reasons=reasons, level=level, priors=priors, mode=mode), unit=runs.unit,
                    metric=runs.label.split(" (")[0], lowest=runs.loss_range[0])
            for i, t in enumerate(targets)]


def decide(records: Sequence[Record], predictions: Mapping[Key, Sequence[float]], target: float, ratio: float, *,
           keys: Sequence[Key] | None = None, reasons: Mapping[Key, str] | None = None, level: float = 0.95,
           priors: tuple[Mapping[str, Mapping[str, Prior]], Mapping[str, Any]] | None = None, mode: str = MODE,
           carry: str = CARRY, laws: Mapping[str, ReachLaw] | None = None, per_label: bool = PER_LABEL) -> Forecast:
    """The forecast from chaining ``records`` and each candidate's (loss, N_opt in parameters,
    D_opt) at ``target``: each answer by its own record (a pure function of its inputs, so the
    calibration benchmark scores exactly what ``forecasts`` answers). ``laws`` size the intervals
    (the shipped reach laws of ``reach_law.ANSWERS`` by default; ``{}``: the candidates' error models)."""
    if mode not in MODES:
        raise FitInputError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    prior, provenance = priors if priors is not None else default_priors()
    reasons = dict(reasons or {})
    keys = list(keys) if keys is not None else sorted({(r.method, r.scale, r.focus) for r in records}, key=str)
    cutoff = score_cutoff(records) if records else np.nan
    candidates = []
    for key in keys:
        mine = [r for r in records if (r.method, r.scale, r.focus) == key]
        loss_err, n_err, count = score(mine, cutoff) if mine else (np.nan, np.nan, 0)
        c = Candidate(method=key[0], scale=key[1], focus=key[2], loss_error=loss_err, n_opt_error=n_err,
                      predictions=count, reason=reasons.get(key))
        for q, name in FIELDS.items():
            slopes = split_slopes(mine, name)
            if slopes:
                own = prior_for(prior[q], key[0], key[2]) if per_label else prior_for(prior[q], None)
                c.models[q] = error_model(list(slopes.values()), own,
                                          reach=reach(mine, name), carry=carry)
        if key in predictions:
            c.target_loss, c.target_n_opt, c.target_d_opt = (float(v) for v in predictions[key])
        elif mine and c.reason is None:
            c.reason = "no prediction at the target"
        if mine and c.reason is None and max((m.splits for m in c.models.values()), default=0) < MIN_SPLITS:
            c.reason = f"chaining predictions from fewer than {MIN_SPLITS} splits"
        candidates.append(c)
    laws = {q: law for q, law in shipped_laws().items() if q in ANSWERS + CAPPED} if laws is None else laws
    answers = {q: _answer(q, candidates, records, ratio, level, prior_for(prior[q], None), mode, carry, laws.get(q))
               for q in FIELDS}
    loss, n = answers["loss"], answers["n_opt"]
    d_raw = _d_opt(n, candidates)
    n_opt = (n.value, n.lo, n.hi)
    d_opt = (d_raw * n.raw / n.value, d_raw * n.raw / n.hi, d_raw * n.raw / n.lo)  # N D is fixed by the budget
    # a sweep whose own chaining cannot bound N_opt is not answered, even where the reach law bounds it
    own = n.interval.get("error_model_log_interval")
    checked = [("N_opt", n_opt), ("D_opt", d_opt)]
    if own is not None:
        centre = np.log(n.value)
        checked.append(("N_opt", (n.value, float(np.exp(centre + own[0])), float(np.exp(centre + own[1])))))
    for name, (_, lo, hi) in checked:
        beyond = unphysical(name, lo, hi, target)
        if beyond is not None:  # an interval that names no model is no answer: say why instead
            raise FitInputError(f"the chaining evidence does not bound {name} at {ratio:.4g}x the largest budget: "
                                f"its interval would be [{fmt.count(lo)}, {fmt.count(hi)}], {beyond}; sweep more "
                                f"budgets, or forecast nearer the sweep (target=, --target)")
    return Forecast(target=target, ratio=ratio, level=level, n_opt=n_opt, d_opt=d_opt,
                    loss=(loss.value, loss.lo, loss.hi), answers=answers, score_cutoff=cutoff, mode=mode,
                    prior={"answers": {q: {k: asdict(p) for k, p in by.items()} for q, by in prior.items()},
                           "provenance": dict(provenance)},
                    candidates=copy.deepcopy(candidates), records=list(records))


def _eligible(candidates: Sequence[Candidate], q: str) -> list[Candidate]:
    """The candidates that may answer ``q``: enough chaining, a finite answer, and for N_opt a
    focus in SIZE_FOCI (all of them where none has one)."""
    value = "target_loss" if q == "loss" else "target_n_opt"
    able = [c for c in candidates if q in c.models and c.models[q].splits >= MIN_SPLITS
            and np.isfinite(getattr(c, value)) and getattr(c, value) > 0]
    sized = [c for c in able if c.focus in SIZE_FOCI]
    return sized if q == "n_opt" and sized else able


def _answer(q: str, candidates: Sequence[Candidate], records: Sequence[Record], ratio: float, level: float,
            prior: Prior, mode: str, carry: str, law: ReachLaw | None) -> Answer:
    eligible = _eligible(candidates, q)
    if not eligible:
        most = max((m.splits for c in candidates for m in c.models.values()), default=0)
        raise FitInputError(f"too little chaining evidence: a candidate answers only with forward-"
                            f"chaining predictions from {MIN_SPLITS} or more splits (fits up to different budgets, "
                            f"each predicting a larger one), and these runs give at most {most}; sweep more budgets "
                            f"(4 or more with an interior minimum). The methods' own answers and their bootstrap "
                            f"intervals stand")
    value = "target_loss" if q == "loss" else "target_n_opt"
    best = min(eligible, key=lambda c: (c.models[q].sd, c.loss_error if q == "loss" else c.n_opt_error))
    options = [(best.models[q], float(np.log(getattr(best, value))),
                [{"method": best.method, "scale": best.scale, "focus": best.focus, "weight": 1.0}], best.name,
                best.loss_error if q == "loss" else best.n_opt_error)]
    if mode in ("average", "auto") and len(eligible) > 1:
        averaged = _average(q, eligible, records, prior, carry)
        if averaged is not None:
            options = [averaged] if mode == "average" else options + [averaged]
    model, log_raw, members, source, chaining_error = min(options, key=lambda o: o[0].sd)
    correction, lo, hi = model.log_interval(ratio, level)
    interval: dict[str, Any] = {"rule": "error model", "level": level, "quantile": model.quantile(level)}
    capped = law is not None and q in CAPPED  # bounded by the law's k at cap_level, its highest score if fewer
    if law is not None and not capped and not law.states(level):
        interval["note"] = (f"the reach law was scored on {len(law.scores)} public answers: too few for a "
                            f"{100 * level:g}% interval, so the error model's")
    elif capped:  # the error model's interval, at least the law's at no reach, at most the law's at the reach
        least, most = law.bounds(ratio, level)
        own = (float(lo), float(hi))
        lo, hi = -float(np.clip(-own[0], least, most)), float(np.clip(own[1], least, most))
        interval.update({"rule": CAPPED_RULE, "multiplier": law.multiplier(cap_level(level)), "floor": law.floor,
                         "slope": law.slope, "sigma": float(law.sigma(ratio)), "capped": bool(max(-own[0], own[1]) > most),
                         "law_quantile": cap_level(level), "error_model_log_interval": own})
    elif law is not None:  # the drift's span (carry "widen") kept, the scatter's half-width the law's
        half = model.quantile(level) * model.sd * (float(np.log(ratio)) if ratio > 1 else 0.0)
        own = answer_chaining(records, members, FIELDS[q])
        spread = members_spread(members, candidates, q)
        law_half, factor, splits = law.half_width(ratio, level, own, spread)
        lo, hi = lo + half - law_half, hi - half + law_half
        interval = {"rule": "reach law", "level": level, "multiplier": law.multiplier(level), "sigma": float(law.sigma(ratio)),
                    "floor": law.floor, "slope": law.slope, "own_weight": law.own_weight, "own_factor": factor,
                    "own_splits": splits, **({"spread": spread} if law.spread else {}),
                    **({"largest": law.largest, "cap": float(law.cap(ratio)), "capped": bool(law_half >= law.cap(ratio))}
                       if np.isfinite(law.largest) else {})}
    if law is not None and np.isfinite(law.reach):
        interval["reach"] = law.reach  # the largest ratio its public answers measured
    centre = log_raw + correction
    return Answer(quantity=q, source=source, members=members, raw=float(np.exp(log_raw)),
                  correction=float(np.expm1(correction)), value=float(np.exp(centre)), lo=float(np.exp(centre + lo)),
                  hi=float(np.exp(centre + hi)), model=model, chaining_error=float(chaining_error), interval=interval)


def members_spread(members: Sequence[Mapping[str, Any]], candidates: Sequence[Candidate], q: str) -> float:
    """How far an answer's members disagree at the target: the weighted standard deviation of their log
    answers (0 for one member). The reach law reads it where it was fitted with it (``reach_law``)."""
    value = "target_loss" if q == "loss" else "target_n_opt"
    by_key = {c.key: c for c in candidates}
    weights = np.array([float(m["weight"]) for m in members])
    logs = np.array([np.log(getattr(by_key[(m["method"], m["scale"], m["focus"])], value)) for m in members])
    mean = float(np.sum(weights * logs) / weights.sum())
    return float(np.sqrt(np.sum(weights * (logs - mean) ** 2) / weights.sum()))


def answer_chaining(records: Sequence[Record], members: Sequence[Mapping[str, Any]], field_name: str) -> Inner:
    """The answer's own chaining: per (split, budget) every member predicted, (fitted up to, ratio,
    the members' weighted log error), the same combination the answer makes of their predictions."""
    weights = {(m["method"], m["scale"], m["focus"]): float(m["weight"]) for m in members}
    errors: dict[tuple[float, float], dict[Key, float]] = {}
    ratios: dict[tuple[float, float], float] = {}
    for r in records:
        key, error = (r.method, r.scale, r.focus), getattr(r, field_name)
        if key in weights and np.isfinite(error) and error > -1:
            errors.setdefault((r.fitted_upto, r.budget), {})[key] = float(np.log1p(error))
            ratios[(r.fitted_upto, r.budget)] = float(r.ratio)
    return [(upto, ratios[(upto, budget)], sum(w * found[k] for k, w in weights.items()))
            for (upto, budget), found in sorted(errors.items()) if len(found) == len(weights)]


def _average(q: str, eligible: Sequence[Candidate], records: Sequence[Record], prior: Prior, carry: str):
    """The candidates' weighted geometric mean (weights 1 / sd^2 of their own error models) as one
    more candidate: its per-split slopes are the members' weighted slopes, over the splits every
    member predicted from."""
    field_name, value = FIELDS[q], "target_loss" if q == "loss" else "target_n_opt"
    slopes = {c.key: split_slopes([r for r in records if (r.method, r.scale, r.focus) == c.key], field_name)
              for c in eligible}
    common = set.intersection(*(set(s) for s in slopes.values()))
    members = [c for c in eligible if set(slopes[c.key]) >= common]
    if len(common) < MIN_SPLITS or len(members) < 2:
        return None
    weights = np.array([1.0 / c.models[q].sd ** 2 for c in members])
    weights /= weights.sum()
    z = [float(sum(w * slopes[c.key][k] for w, c in zip(weights, members, strict=True))) for k in sorted(common)]
    measured = [r for r in records if (r.method, r.scale, r.focus) in {c.key for c in members} and r.fitted_upto in common]
    model = error_model(z, prior, reach=reach(measured, field_name), carry=carry)
    log_raw = float(sum(w * np.log(getattr(c, value)) for w, c in zip(weights, members, strict=True)))
    return (model, log_raw, [{"method": c.method, "scale": c.scale, "focus": c.focus, "weight": float(w)}
                             for w, c in zip(weights, members, strict=True)],
            f"the weighted average of {len(members)} candidates", np.nan)


def _d_opt(n: Answer, candidates: Sequence[Candidate]) -> float:
    """D_opt of the N_opt answer's members before the drift correction (weighted geometric mean)."""
    by_key = {c.key: c for c in candidates}
    pairs = [(m["weight"], by_key[(m["method"], m["scale"], m["focus"])].target_d_opt) for m in n.members]
    return float(np.exp(sum(w * np.log(d) for w, d in pairs)))


def _pct(value: float, digits: int) -> str:
    return "-" if not np.isfinite(value) else f"{100 * value:.{digits}f}%"


def _triple(t: Triple, f) -> str:
    return fmt.with_interval(t[0], t[1], t[2], fmt=f)


__all__ = ["BELOW_SWEPT", "BEYOND_MEASURED", "CANDIDATE_HEADERS", "CHAIN_HEADERS", "MIN_SPLITS", "MODE", "SIZE_FOCI", "TARGET_FACTOR", "Answer", "Candidate",
           "Forecast", "answer_chaining", "answer_line", "candidate_rows", "chain_rows", "decide", "default_target",
           "forecast", "forecasts", "members_spread"]
