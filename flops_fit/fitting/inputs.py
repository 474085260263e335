"""Turn a sweep store, a CSV or a DataFrame into one validated table of runs.

Every method reads the same canonical columns (params, tokens, flops, loss, optional
budget and curve), so column mapping and validation happen once, here, at the boundary.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import pandas as pd

from flops_fit import sources
from flops_fit.errors import FitInputError, NoRunsError
from flops_fit.sources import wandb_runs
from flops_fit.store.run_store import FINAL, STORE_NAME, RunStore, chosen_runs

# FLOPs per parameter per token of dense training (2 forward + 4 backward), used only when
# one of tokens / flops is missing and the caller gives no other rule.
FLOPS_PER_PARAM_TOKEN = 6.0
FINISHED = ("done", "finished", "ok", "completed", "succeeded", "success")
# tables of runs by extension: what fit, report, compare and tune --from read as one row a run
TABLES = {".csv": "CSV", ".txt": "CSV", ".tsv": "CSV", ".jsonl": "json", ".ndjson": "json", ".json": "json",
          ".parquet": "parquet"}
# a number written with a decimal comma, as spreadsheets in many locales save it beside semicolons
DECIMAL_COMMA = r"[-+]?\d+,\d*(?:[eE][-+]?\d+)?"
# What a fit minimises: the held-out loss as the runs record it (nats per token or sample),
# or bits per byte of held-out text (``bpb``), comparable across tokenizers.
METRICS = {"loss": "held-out loss (nats per token or sample)", "bpb": "held-out bits per byte",
           "error": "held-out top-1 error"}
METRIC_LABELS = {"loss": "loss (nats)", "bpb": "loss (bits per byte)", "error": "top-1 error"}
# An exact repeat of a run is counted once (``_drop_repeats``); its exclusion's reason starts so.
REPEAT = "a repeat of"
NO_LOSS = "no finite loss"  # an excluded run's reason: diverged or never evaluated
# Words of a column's name that say it names the evaluation set (gadre_overtraining.csv's ``eval_data``).
EVALUATION_WORDS = ("eval", "evaluation", "val", "valid", "validation", "heldout")
# A loss this many times the runs' median is no trained model's (``_check_diverged``).
DIVERGED = 10.0
# A text column with 2 to this many values at overlapping sizes splits a table into settings (``_settings``).
SETTINGS = 20
# A true/false column whose name holds one of these flags runs a table's maker would leave out (``_flags``):
# Open-Athena's IsoFLOP table marks outliers so (``outlier``, with a ``reason`` beside it).
FLAG_WORDS = ("outlier", "exclu", "ignore", "drop", "skip", "invalid")
METRIC_COLUMNS = {"loss": "loss", "bpb": "bpb", "error": "top1_error"}
NO_ERROR = ("top-1 error is recorded for image-classification runs of sweeps since flops-fit recorded it; fit "
            "these runs with metric='loss' (CLI: --metric loss)")
NO_BPB = ("bits per byte is recorded for runs on text datasets that know their tokenizer (python-stdlib, "
          "text-files, tinystories, hf-text, token-file with its tokenizer), not for sweeps trained before flops-fit "
          "recorded it; fit these runs with metric='loss' (CLI: --metric loss)")
NO_BPB_IMAGES = ("these are image-classification runs (they record a top-1 error): bits per byte measures text; fit "
                 "them with metric='error' or metric='loss' (CLI: --metric error, --metric loss)")


@dataclass
class Runs:
    """Validated runs: ``frame`` has params, tokens, flops, loss, run_id (+ budget, curve).
    ``loss`` holds the ``metric`` the fit minimises (``METRICS``)."""

    frame: pd.DataFrame
    source: str
    excluded: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    cautions: list[str] = field(default_factory=list)  # what the table itself suggests reading with care
    metric: str = "loss"
    scale: str = "params"  # what the ``params`` column holds (``scales.SCALES``)
    # with ``all_rates``: the runs without a finite loss (diverged), loss NaN, for a sweep over rates to read
    diverged: pd.DataFrame | None = None
    # the rows ``where`` kept (column: value): a page on one study of a table of several must say which
    selection: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The fitted metric with its unit, for tables and axes."""
        return METRIC_LABELS[self.metric]

    @property
    def unit(self) -> str:
        """What D counts, plural, for tables and axes: "tokens", or "samples" where the sweep's model
        counts its FLOPs per sample (an image classifier's D is images seen)."""
        plan = self.metadata.get("plan")
        return "samples" if isinstance(plan, dict) and plan.get("unit") == "sample" else "tokens"

    @property
    def has_budget(self) -> bool:
        return "budget" in self.frame and self.frame["budget"].notna().all()

    @property
    def loss_range(self) -> tuple[float, float]:
        """The lowest and highest loss the runs ended at: what a predicted loss is judged against
        (``formatting.loss_under``, ``formatting.loss_bounds``)."""
        loss = self.frame["loss"].to_numpy(float)
        return float(np.nanmin(loss)), float(np.nanmax(loss))

    @property
    def has_curves(self) -> bool:
        return "curve" in self.frame and self.frame["curve"].map(_curve_length).ge(2).all()

    def __len__(self) -> int:
        return len(self.frame)

    @property
    def selected(self) -> str:
        """The rows ``where`` kept, as "experiment=a, eval_data=c4_val"; "" where every row was read."""
        return ", ".join(f"{column}={value}" for column, value in self.selection.items())

    @property
    def notes(self) -> list[str]:
        """What loading changed that a reader of the answer should know (exact repeats counted once)."""
        repeats = sum(str(x.get("reason", "")).startswith(REPEAT) for x in self.excluded)
        counted = [f"{repeats} run(s) repeat another run exactly (the same size, tokens and loss) and were counted "
                   "once"] if repeats else []
        unfinished = [x for x in self.excluded if str(x.get("reason", "")).startswith(("status ", NO_LOSS))]
        if unfinished:  # a tracker's crashed, running or diverged runs, a sweep's failed ones: not fitted
            named = "; ".join(f"{x['run_id']}: {x['reason']}" for x in unfinished[:3])
            counted.append(f"{len(unfinished)} run(s) are not finished or have no finite loss, and are left out "
                           f"({named}" + ("; ..." if len(unfinished) > 3 else "") + ")")
        return counted + self.cautions

    def left_out(self) -> str:
        """What loading left out, for a refusal that counts the runs kept ("got 3" of 12 runs read, 9 of them at
        rates other than their cell's best): "; 9 more run(s) read were left out (8 like RUN: REASON; ...)", the
        most frequent reason (numbers aside) named, or ""."""
        if not self.excluded:
            return ""
        groups: dict[str, list[dict[str, Any]]] = {}
        for x in self.excluded:
            groups.setdefault(re.sub(r"\d[\d.,]*(e[+-]?\d+)?", "#", str(x.get("reason", ""))), []).append(x)
        most = max(groups.values(), key=len)
        return (f"; {len(self.excluded)} more run(s) read were left out ({len(most)} like {most[0]['run_id']}: "
                f"{most[0]['reason']}" + ("; ..." if len(groups) > 1 else "") + ")")

    def subset(self, keep: np.ndarray) -> Runs:
        """The runs where ``keep`` (a boolean mask) is true, with the same source and provenance."""
        return self.derived(self.frame.loc[np.asarray(keep, dtype=bool)].reset_index(drop=True))

    def derived(self, frame: pd.DataFrame, **changes: Any) -> Runs:
        """These runs with ``frame`` (and ``changes``) in place of theirs, every other field carried
        over (the lists copied): a field added to ``Runs`` cannot be dropped on the way."""
        return replace(self, frame=frame, excluded=list(self.excluded), cautions=list(self.cautions), **changes)


def _curve_length(curve: Any) -> int:
    try:
        return len(curve)
    except TypeError:
        return 0


# where a tracker's runs keep the numbers a fit reads besides their metrics (``sources``)
TRACKER_FIELDS = {"tensorboard": "as an hparam (SummaryWriter.add_hparams({'params': N, 'tokens': D}, {...}, run_name='.'))",
                  "wandb": "in its config (wandb.init(config={'params': N, 'tokens': D}))",
                  "mlflow": "as a param (mlflow.log_params({'params': N, 'tokens': D}))"}


def load_runs(
    source: Any,
    *,
    params_col: str = "params",
    tokens_col: str = "tokens",
    flops_col: str = "flops",
    loss_col: str | None = None,
    budget_col: str = "budget",
    curve_col: str = "curve",
    run_id_col: str = "run_id",
    exclude_top: int = 0,
    flops_per_param_token: float = FLOPS_PER_PARAM_TOKEN,
    metric: str = "loss",
    keep: Mapping[str, str] | tuple[str, ...] = (),
    curve_metric: str | None = None,
    experiment: str | None = None,
    all_rates: bool = False,
    where: Mapping[str, Any] | None = None,
) -> Runs:
    """Load runs from a DataFrame, a CSV file or a sweep output folder (``runs.sqlite``).

    When only flops is given, tokens = flops / (k * params); when only tokens, flops =
    k * params * tokens, with k = ``flops_per_param_token`` (6 by default).
    ``exclude_top`` drops that many highest-loss runs (Epoch's replication drops 5).
    ``metric`` is what the fit minimises: ``"loss"`` (the ``loss`` column), ``"bpb"`` (the
    ``bpb`` column, held-out bits per byte) or ``"error"`` (the ``top1_error`` column of image
    classifiers; without training curves); ``loss_col`` names another column for it. With
    ``"bpb"`` each run's training curve is put on the same scale by its own bits per byte /
    loss (its held-out text's tokens per byte / ln 2). ``where`` keeps the rows whose columns hold
    the values given (``{"experiment": "a"}``: one setting of a table that holds several). ``keep``
    carries more columns beside the canonical ones, where present; given as a mapping to the option that
    named each (``{"peak_lr": "lr_col"}``), a missing one is refused naming the source's own columns.
    """
    if metric not in METRICS:
        raise FitInputError(f"unknown metric {metric!r}; choose " + " or ".join(f"{m!r} ({t})" for m, t in METRICS.items()))
    frame, name, metadata = _read(source, curve_metric=curve_metric, tokens_col=tokens_col, experiment=experiment,
                                  params_col=params_col, flops_col=flops_col, flops_per_param_token=flops_per_param_token)
    if len(frame.columns) == 0:  # an empty JSON file or array, an empty DataFrame: no column is missing, nothing is there
        raise FitInputError(f"{name}: no finished runs to fit (the table is empty)")
    frame = _where(frame, where, name)
    loss_col = loss_col or METRIC_COLUMNS[metric]
    if metric == "bpb":
        frame = _bits_per_byte(frame, name, loss_col, curve_col)
    if metric == "error":
        frame = _top1_error(frame, name, loss_col, curve_col)
    mapping = {
        "params": (params_col, "params_col"),
        "tokens": (tokens_col, "tokens_col"),
        "flops": (flops_col, "flops_col"),
        "loss": (loss_col, "loss_col"),
    }
    available = ", ".join(map(repr, frame.columns))
    for canonical in ("params", "loss"):
        column, argument = mapping[canonical]
        if column not in frame:
            logged = TRACKER_FIELDS.get(metadata.get("tracker"), "")
            raise FitInputError(
                f"{name}: no {canonical} column {column!r}; available columns: {available}. "
                f"Name the right one with {argument}= (CLI: --{argument.replace('_', '-')})"
                + (f", or log it with each run {logged}." if logged and canonical != "loss" else ".")
            )
    # optional columns, but one named by hand must be there: a tokens column named and missing had the tokens
    # derived from the FLOPs as 6 N D, a wrong count where the table's FLOPs are not 6 N D
    for column, argument, default in ((tokens_col, "tokens_col", "tokens"), (flops_col, "flops_col", "flops"),
                                      (budget_col, "budget_col", "budget"), (curve_col, "curve_col", "curve")):
        if column != default and column not in frame:
            raise FitInputError(f"{name}: no {default} column {column!r}; available columns: {available}. Name the "
                                f"right one with {argument}= (CLI: --{argument.replace('_', '-')})")
    for column, argument in (keep.items() if isinstance(keep, Mapping) else ()):
        if column not in frame:
            raise FitInputError(f"{name}: no {argument.removesuffix('_col')} column {column!r}; available columns: "
                                f"{available}. Name the right one with {argument}= (CLI: --{argument.replace('_', '-')})")
    has_tokens, has_flops = tokens_col in frame, flops_col in frame
    if not (has_tokens or has_flops):
        raise FitInputError(
            f"{name}: neither a tokens column {tokens_col!r} nor a flops column {flops_col!r}; "
            f"available columns: {available}. Name one with tokens_col= or flops_col= "
            "(CLI: --tokens-col / --flops-col)."
        )
    if not flops_per_param_token > 0:
        raise FitInputError(f"flops_per_param_token must be positive, got {flops_per_param_token!r}")

    excluded: list[dict[str, Any]] = []
    ids = _run_ids(frame, run_id_col)
    frame = _status_column(frame)
    blown_rows, blown_ids = frame.iloc[:0], ids.iloc[:0]
    if "status" in frame:  # failed or unfinished runs (a sweep store keeps them, loss NaN) are left out
        # in any case: MLflow's own tables say FINISHED, a lab's may say Done
        bad = frame["status"].notna() & ~frame["status"].astype(str).str.strip().str.lower().isin(FINISHED)
        errors = frame.loc[bad, "error"] if "error" in frame else pd.Series(None, index=frame.index[bad], dtype=object)
        excluded += [{"run_id": r, "reason": f"status {v!r}" + (f": {e[:80]}" if isinstance(e, str) and e else "")}
                     for r, v, e in zip(ids[bad], frame.loc[bad, "status"], errors, strict=True)]
        # a failed run whose record says its loss blew up: to a sweep over rates, a rate that diverged
        recorded = [frame[c] if c in frame else [None] * len(frame) for c in ("error", mapping["loss"][0], curve_col)]
        why = pd.Series([divergence(*r) if b else None for b, *r in zip(bad, *recorded, strict=True)],
                        index=frame.index, dtype=object)
        blown = bad & why.notna()
        blown_rows, blown_ids = frame.loc[blown].assign(read_as=why[blown]), ids[blown]
        frame, ids = frame.loc[~bad], ids[~bad]
    unscored = _unscored(frame[mapping["loss"][0]])  # diverged (NaN, inf) or never evaluated (empty)
    excluded += [{"run_id": r, "reason": f"{NO_LOSS} ({v})"}
                 for r, v in zip(ids[unscored], frame.loc[unscored, mapping["loss"][0]], strict=True)]
    rows, row_ids = (pd.concat([blown_rows, frame.loc[unscored]]), pd.concat([blown_ids, ids[unscored]])) \
        if len(blown_rows) else (frame.loc[unscored], ids[unscored])
    diverged = _diverged(rows, row_ids, mapping, flops_per_param_token, [budget_col, *keep]) if all_rates else None
    frame, ids = frame.loc[~unscored], ids[~unscored]
    out = pd.DataFrame(index=frame.index)
    out["run_id"] = ids.to_numpy()
    for canonical in ("params", "loss") + (("tokens",) if has_tokens else ()) + (("flops",) if has_flops else ()):
        column = mapping[canonical][0]
        if canonical == "loss" and frame[column].notna().any() and \
                pd.to_numeric(frame[column], errors="coerce").isna().all():
            _text_not_numbers(frame, column, name)
        out[canonical] = _numeric(frame[column], column, name, out["run_id"])
    if not has_tokens:
        out["tokens"] = out["flops"] / (flops_per_param_token * out["params"])
    if not has_flops:
        out["flops"] = flops_per_param_token * out["params"] * out["tokens"]
    elif has_tokens and len(out):
        _check_units(out, name, mapping)
    _check_counts(out, name, mapping, has_tokens)
    if budget_col in frame:
        out["budget"] = _numeric(frame[budget_col], budget_col, name, out["run_id"])
        _check_budget(out, name, budget_col, mapping["flops"][0] if has_flops else None)
    if curve_col in frame:
        out["curve"] = _curves(frame, curve_col, name, out["run_id"])
    if "schedule" in frame:
        out["schedule"] = frame["schedule"].map(_parse_schedule)
    for extra in ("model", "size", "status", "model_config", "embedding_params", "non_embedding_flops_per_unit",
                  "top1_error", "lr", "lr_source", *keep):  # lr_source: the report's notes on the rates
        if extra in frame and extra not in out:
            out[extra] = frame[extra]
    cautions = _settings(frame, set(out.columns) | {c for c, _ in mapping.values()} | {run_id_col, budget_col, curve_col},
                         mapping["params"][0])
    if not (has_flops and has_tokens):  # one of the three derived: nothing to check the units against
        cautions += _ratio_caution(out, mapping)
    if sets := evaluation_sets(frame):  # what compare checks two recipes' losses against
        metadata = {**metadata, "evaluation": sets}
    same = _same_rows(frame, (run_id_col, curve_col))
    out = out.reset_index(drop=True)

    if len(out) == 0 and len(row_ids) and set(row_ids) >= {e["run_id"] for e in excluded}:  # no crash, only blow-ups
        reasons = {e["run_id"]: e["reason"] for e in excluded}
        why = rows["read_as"] if "read_as" in rows else pd.Series(index=rows.index, dtype=object)
        first = row_ids.iloc[0]
        said = why.iloc[0] if isinstance(why.iloc[0], str) else reasons.get(first, NO_LOSS)
        raise NoRunsError(f"{name}: no finished runs to fit: every run diverged ({len(row_ids)} run(s) with no "
                          f"finite loss or one that blew up; {first}: {said}): train them at lower learning rates")
    if len(out) == 0:
        _no_finished_runs(name, excluded, is_store=isinstance(metadata.get("plan"), dict))
    out = _drop_repeats(out, same, excluded)  # first: the rate choice and exclude_top then count runs, not copies
    if not all_rates:
        out = _best_rates(out, excluded)
    if not isinstance(exclude_top, (int, np.integer)) or exclude_top < 0:
        raise FitInputError(f"exclude_top must be a non-negative integer, got {exclude_top!r}")
    if exclude_top >= len(out):
        raise FitInputError(f"exclude_top={exclude_top} would drop all {len(out)} runs; use a smaller number")
    if exclude_top:
        top = out["loss"].nlargest(exclude_top).index
        excluded += [{"run_id": r, "reason": f"among the {exclude_top} highest losses (exclude_top)"}
                     for r in out.loc[top, "run_id"]]
        out = out.drop(index=top).reset_index(drop=True)
    if not all_rates:  # a learning-rate sweep read whole: a run that blew up at too high a rate is data
        _check_diverged(out, name, exclude_top)
    return Runs(frame=out, source=name, excluded=excluded, metadata=metadata, metric=metric, cautions=cautions,
                diverged=diverged, selection=dict(where or {}))


def _no_finished_runs(name: str, excluded: list[dict[str, Any]], *, is_store: bool) -> NoReturn:
    """Refuse runs none of which finished, counting them by status: a table's statuses that read as unfinished are
    named; a sweep store's runs (all failed, or a sweep stopped before any run finished) with what to run. Runs read
    and none fit is a ``NoRunsError`` (``report`` writes a page that says so); an empty table a plain refusal."""
    states = Counter(e["reason"].split(":")[0] for e in excluded if e["reason"].startswith("status "))
    if not excluded:
        raise FitInputError(f"{name}: no finished runs to fit (the table is empty)")
    if not is_store:
        raise NoRunsError(f"{name}: no finished runs to fit (every run failed or is unfinished)" + (
            f"; the runs' {', '.join(sorted(states))} read as not finished: a finished run's status is one of "
            f"{', '.join(FINISHED)}" if states else ""))
    failed = next((e for e in excluded if e["reason"].startswith("status 'failed'")), None)
    kinds = Counter(e["reason"].split(":")[0].removeprefix("status ").strip("'") if e["reason"].startswith("status ")
                    else "done without a finite loss" for e in excluded)
    counted = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
    raise NoRunsError(
        f"{name}: no finished runs to fit: none of its {len(excluded)} runs has finished with a loss ({counted}"
        + (f"; {failed['run_id']}: {failed['reason'].split(': ', 1)[-1]}" if failed and ": " in failed["reason"] else "")
        + f"): `flops-fit status {name}` lists them; train them by resuming the sweep (`flops-fit sweep CONFIG --out "
        f"{name} --resume" + (" --retry-failed" if failed else "") + "`)")


# How a failed run's error names a loss that blew up: flops-fit's own ("diverged: ...", an external trainer's
# "non-finite loss: ..."), or a lab's words for it ("loss is NaN at step 300"). An error naming none (out of
# memory, a missing file, a hang) says nothing of the run's rate.
DIVERGED_WORDS = re.compile(r"diverg|non-?finite|not finite|\bnan\b|\binf(inity)?\b|explod|blew up|blow-?up", re.I)
# flops-fit's trainer's words for a loss not finite at its first step, before any update (a loss, model or data
# that gives NaN whatever the rate): no verdict on the run's rate, though its curve and error read "nan"
UNUSABLE_LOSS = "at the first step, before any update"
# A training curve ending over this many times its lowest loss blew up (one cut short by a crash ends near it):
# the factor flops-fit's own trainer stops a run at (the hparams' divergence_factor default), not one chosen here.
CURVE_RISE = 3.0


def check_varies(runs: Runs) -> None:
    """A fit needs a metric that varies: one value for every run (a constant column mapped as the loss)
    fits no law, and each law's optimum would be an artefact of where its search started."""
    values = runs.frame["loss"]
    if len(values) > 1 and values.nunique() == 1:
        what = {"error": "top-1 error"}.get(runs.metric, runs.metric)
        raise FitInputError(
            f"{runs.source}: all {len(values)} runs have the same {what} ({values.iloc[0]:g}): a {what} that does "
            f"not vary with size or tokens fits no law; map the column holding each run's own {what} (loss_col=, "
            "CLI: --loss-col)")


def divergence(error: Any, loss: Any, curve: Any) -> str | None:
    """Why a failed run reads as diverged, from what it recorded (None: it failed for another reason, which is no
    verdict on its rate): a loss recorded as infinite, a training curve that reaches a non-finite loss or ends over
    ``CURVE_RISE`` times its lowest, or an error naming a non-finite or diverged loss (``DIVERGED_WORDS``). Only
    "diverged: ..." counted before: an external trainer's "non-finite loss" read as a crash. A NaN loss alone
    says nothing: every failed run records one, and neither does a loss NaN before any update (``UNUSABLE_LOSS``)."""
    if isinstance(error, str) and UNUSABLE_LOSS in error:
        return None
    with contextlib.suppress(TypeError, ValueError):
        if np.isinf(float(loss)):
            return f"loss {float(loss)}"
    try:
        points = _parse_curve(curve)
    except (TypeError, ValueError):
        points = None
    if points is not None and len(points):
        values = points[:, 1]
        if not np.isfinite(values).all():
            return "its training loss reached a non-finite value"
        if values[-1] > CURVE_RISE * values.min() > 0:
            return f"its training loss rose from {values.min():.4g} to {values[-1]:.4g}"
    if isinstance(error, str) and DIVERGED_WORDS.search(error):
        return f"error {error[:60]!r}" + ("..." if len(error) > 60 else "")
    return None


def _diverged(frame: pd.DataFrame, ids: pd.Series, mapping: dict[str, tuple[str, str]], k: float,
              extra: list[str]) -> pd.DataFrame:
    """The runs without a finite loss as rows like the fitted ones' (loss NaN), those whose size and
    tokens (or FLOPs) read as numbers: a sweep over rates learns from where its rates diverged. A sweep
    store's failed run has its planned tokens (``tokens_planned``) and no FLOPs of its own (NaN, left to
    the reader: the FLOPs its cell's runs trained)."""
    out = pd.DataFrame({"run_id": ids.to_numpy()}, index=frame.index)
    for canonical in ("params", "tokens", "flops"):
        if (column := mapping[canonical][0]) in frame:
            out[canonical] = pd.to_numeric(frame[column], errors="coerce").astype(float)
    planned = "tokens" in out and "tokens_planned" in frame and "flops" in out
    if planned:  # a failed run's result trained none it recorded (0, or NaN)
        unknown = ~(out["tokens"] > 0)
        out.loc[unknown, "tokens"] = pd.to_numeric(frame.loc[unknown, "tokens_planned"], errors="coerce")
        out.loc[unknown, "flops"] = np.nan
    if "tokens" not in out:
        out["tokens"] = out["flops"] / (k * out["params"])
    if "flops" not in out:
        out["flops"] = k * out["params"] * out["tokens"]
    out["loss"] = np.nan
    read = frame["read_as"] if "read_as" in frame else pd.Series(None, index=frame.index, dtype=object)
    out["read_as"] = [r if isinstance(r, str) else f"{NO_LOSS} ({v})"  # why each reads as diverged
                      for r, v in zip(read, frame[mapping["loss"][0]], strict=True)]
    if extra[0] in frame:
        out["budget"] = pd.to_numeric(frame[extra[0]], errors="coerce")
    for column in extra[1:]:
        if column in frame:
            out[column] = frame[column]
    sizes = out[["params", "tokens", "flops"]].to_numpy(float)
    known = np.isfinite(sizes) & (sizes > 0)
    if planned:  # FLOPs not known where the tokens are the plan's
        known[:, 2] |= unknown.to_numpy() & np.isnan(sizes[:, 2])
    return out.loc[known.all(axis=1)].reset_index(drop=True)


def names_evaluation(column: Any) -> bool:
    """Whether a column's name says it names the evaluation set (``eval_data``, ``Eval Set``, ``val_set``)."""
    words = re.split(r"[^a-z0-9]+", str(column).lower())
    return any(w.startswith("eval") or w in EVALUATION_WORDS for w in words)


def evaluation_sets(frame: pd.DataFrame) -> dict[str, list[str]]:
    """The evaluation sets the runs name, per text column named like one (``names_evaluation``): a fit does
    not read them, and two recipes measured on different ones are not one quantity."""
    return {str(c): sorted(frame[c].dropna().astype(str).unique()) for c in frame.columns
            if names_evaluation(c) and not pd.api.types.is_numeric_dtype(frame[c]) and frame[c].notna().any()}


def _where(frame: pd.DataFrame, where: Mapping[str, Any] | None, name: str) -> pd.DataFrame:
    """The rows whose columns hold ``where``'s values (compared as text: a CSV's 1 and 1.0 are not
    told apart by the reader; in a numeric column a value written otherwise, 6e10, as a number), or one
    line naming the columns or values there are."""
    if where is not None and not isinstance(where, Mapping):
        raise FitInputError(f"where must map columns to values, e.g. where={{'recipe': 'muon'}} (CLI: --where "
                            f"COLUMN=VALUE), got {where!r}")
    for column, value in (where or {}).items():
        if column not in frame:
            raise FitInputError(f"{name}: no column {column!r} to select rows by; the columns are "
                                + ", ".join(map(repr, frame.columns)))
        text = frame[column].astype(str)
        keep = text == str(value)
        number = _number(value)
        if not keep.any() and number is not None and pd.api.types.is_numeric_dtype(frame[column]):
            # a number written another way than the table's (6e10 for 60000000000, 1 for 1.0)
            keep = pd.Series(np.isclose(frame[column].to_numpy(float), number, rtol=1e-9, atol=0), frame.index)
        if not keep.any():
            values = sorted(text.unique())
            raise FitInputError(f"{name}: no row has {column}={value!r}; its values are "
                                + ", ".join(map(repr, values[:12])) + (" ..." if len(values) > 12 else ""))
        frame = frame.loc[keep]
    return frame


def _status_column(frame: pd.DataFrame) -> pd.DataFrame:
    """The table with its run-state column named ``status``: a lab's may say ``state``, ``State`` or
    ``Status`` (a crashed run in such a column was fitted as finished)."""
    if "status" in frame:
        return frame
    named = [c for c in frame.columns if isinstance(c, str) and c.strip().lower() in ("status", "state")]
    return frame.rename(columns={named[0]: "status"}) if len(named) == 1 else frame


def _number(value: Any) -> float | None:
    """``value`` as a finite number (a --where value is text: "6e10"), or None."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if np.isfinite(number) else None


def _flags(frame: pd.DataFrame, used: set[str]) -> tuple[list[str], set[str]]:
    """A caution for each true/false column that flags some runs to leave out (``FLAG_WORDS``): the fit
    reads every row, so it says how many are flagged and how to leave them out; and the text columns
    that only annotate a flag (one value on every unflagged run: the flag's reason), which are not
    settings."""
    cautions, annotations = [], set()
    for column in frame.columns:
        values = frame[column]
        if column in used or not pd.api.types.is_bool_dtype(values) or \
                not any(word in str(column).lower() for word in FLAG_WORDS):
            continue
        flagged = int(values.sum())
        if 0 < flagged < len(values):
            cautions.append(f"column {column!r} flags {flagged} of {len(values)} runs (True); they are fitted with "
                            f"the others; to leave them out: where={{{column!r}: False}} (CLI: --where {column}=False)")
            annotations |= {c for c in frame.columns if c not in used and frame.loc[~values, c].nunique(dropna=False) == 1
                            and not pd.api.types.is_numeric_dtype(frame[c])}
    return cautions, annotations


def _settings(frame: pd.DataFrame, used: set[str], params_col: str) -> list[str]:
    """A caution where text columns the fit does not read split the runs into a few settings of
    overlapping sizes (an experiment, a training corpus, an evaluation set): one law fitted to them
    all mixes their losses, which a user may not mean. The column with the most settings is named
    for ``where``. Flags of runs to leave out get their own caution (``_flags``)."""
    cautions, annotations = _flags(frame, used)
    skipped = used | annotations
    found: dict[str, pd.Series] = {}
    for column in frame.columns:
        values = frame[column]
        if column in skipped or pd.api.types.is_numeric_dtype(values) or \
                not values.map(lambda v: isinstance(v, str)).all():
            continue
        counts = values.value_counts()
        if not (2 <= len(counts) <= SETTINGS and counts.min() >= 2):
            continue
        sizes = pd.to_numeric(frame[params_col], errors="coerce").groupby(values)
        if sizes.min().max() < sizes.max().min():  # the settings' size ranges overlap: not one ladder split in parts
            found[column] = counts
    if not found:
        return cautions
    column = max(found, key=lambda c: (len(found[c]), c))
    counts = found[column]
    others = [c for c in found if c != column]
    listed = ", ".join(f"{v} ({n})" for v, n in counts.head(4).items()) + (" ..." if len(counts) > 4 else "")
    return cautions + [f"the table holds {len(counts)} settings by column {column!r} ({listed})"
            + (f", and by {', '.join(map(repr, others))}" if others else "")
            + f", at overlapping sizes, and one law is fitted to all of them; to fit one alone: "
            f"where={{{column!r}: VALUE}} (CLI: --where {column}=VALUE)"]


def _same_rows(frame: pd.DataFrame, ignored: tuple[str, ...]) -> np.ndarray:
    """A number per row, in order, shared by rows whose every column but ``ignored`` (the run's id and
    curve) is the same (dicts and lists compared as text, NaN fields matching)."""
    fields = frame.drop(columns=[c for c in ignored if c in frame])
    if fields.shape[1] == 0:
        return np.arange(len(frame))
    fields = fields.apply(lambda c: c.astype(str) if c.dtype == object else c)
    return fields.groupby(list(fields.columns), dropna=False, sort=False).ngroup().to_numpy()


def _drop_repeats(out: pd.DataFrame, same: np.ndarray, excluded: list[dict[str, Any]]) -> pd.DataFrame:
    """The runs with each exact repeat (rows whose ``same`` numbers match: the same in every column of
    the table but the run's id and curve, pasted or recorded twice) counted once: a copy would weigh its
    run twice and narrow every bootstrap interval. Seeds of one cell differ in loss and are kept."""
    repeat = pd.Series(same).duplicated().to_numpy()
    if not repeat.any():
        return out
    first = out["run_id"].groupby(same).transform("first")
    excluded += [{"run_id": out.at[i, "run_id"], "reason": f"{REPEAT} {first[i]} (the same size, tokens and loss): "
                  "counted once"} for i in out.index[repeat]]
    return out.loc[~repeat].reset_index(drop=True)


# flops / (6 N D) of real runs: about 1 for a language model, a few hundred for an image model counted per
# sample, about 0.05 for a sparse model counted by its total parameters; a column in other units is 1e6 or more off
UNIT_RATIO = (1e-3, 1e5)


def _check_units(out: pd.DataFrame, name: str, mapping: dict[str, tuple[str, str]]) -> None:
    """Refuse a table whose params, tokens and flops columns cannot all be counts: the fit reads N and D
    as given, so parameters in millions or tokens in billions would move every answer silently."""
    with np.errstate(all="ignore"):
        ratio = float(np.nanmedian(out["flops"] / (FLOPS_PER_PARAM_TOKEN * out["params"] * out["tokens"])))
    if np.isfinite(ratio) and UNIT_RATIO[0] <= ratio <= UNIT_RATIO[1]:
        return
    columns = ", ".join(repr(mapping[c][0]) for c in ("params", "tokens", "flops"))
    raise FitInputError(f"{name}: the columns {columns} disagree: FLOPs are {ratio:.3g} x 6 x params x tokens "
                        "(median over the runs); is one in other units (millions of parameters, billions of tokens, "
                        "PF-days)? Give each as a plain count (convert the column, or name another with params_col=, "
                        "tokens_col=, flops_col=; CLI: --params-col ...)")


# tokens per parameter of real runs: from under 1 (a large model at a small budget) to about 1e4 (a small model
# over-trained for inference) in public sweeps, 7e5 in this repository's tiny weak sweep; outside this range, a
# column is most likely in other units
TOKENS_PER_PARAM = (1e-2, 1e6)


def _ratio_caution(out: pd.DataFrame, mapping: dict[str, tuple[str, str]]) -> list[str]:
    """A caution where the runs' median tokens per parameter is implausible and no FLOPs column could check the
    units (``_check_units``): parameters in millions beside tokens as counts fitted silently, N_opt 576
    'parameters' at 1.2e7 tokens each."""
    if not len(out):
        return []
    with np.errstate(all="ignore"):
        ratio = float(np.nanmedian(out["tokens"] / out["params"]))
    if not np.isfinite(ratio) or TOKENS_PER_PARAM[0] <= ratio <= TOKENS_PER_PARAM[1]:
        return []
    return [f"the runs train {ratio:.3g} tokens per parameter (median), where real runs train from under 1 to about "
            f"1e4: if column {mapping['params'][0]!r} counts millions or billions (or the tokens another unit), every "
            "answer is in those units; give both as plain counts, or a FLOPs column to check them against"]


def _check_counts(out: pd.DataFrame, name: str, mapping: dict[str, tuple[str, str]], has_tokens: bool) -> None:
    """Refuse sizes or token counts below one: no model has a fraction of a parameter, so the column is
    in other units (millions of parameters, billions of tokens), and every law would answer in them."""
    for canonical, unit in (("params", "parameter"), ("tokens", "token")):
        small = out[canonical] < 1
        if not small.any():
            continue
        column = mapping[canonical][0] if canonical == "params" or has_tokens else None
        what = f"column {column!r}" if column else f"tokens (from column {mapping['flops'][0]!r})"
        rows = ", ".join(f"{r}: {v:.3g}" for r, v in zip(out.loc[small, "run_id"][:3], out.loc[small, canonical][:3],
                                                          strict=True))
        raise FitInputError(f"{name}: {what} holds {int(small.sum())} value(s) below one {unit} ({rows}); is it in other "
                            "units (millions of parameters, billions of tokens or FLOPs)? Give each as a plain count")


def _check_budget(out: pd.DataFrame, name: str, budget_col: str, flops_col: str | None) -> None:
    """Refuse a budget column in other units than the runs' FLOPs (billions, PF-days, log10): the
    fit reads it as FLOPs, and every answer would be at the wrong compute."""
    if not len(out):  # no run left to compare: the empty table is said after
        return
    with np.errstate(all="ignore"):
        ratio = float(np.nanmedian(out["budget"] / out["flops"]))
    if UNIT_RATIO[0] <= 1 / ratio <= UNIT_RATIO[1]:
        return
    flops = f"column {flops_col!r}" if flops_col else "6 x params x tokens"
    raise FitInputError(f"{name}: the budget column {budget_col!r} is {ratio:.3g} x the runs' FLOPs ({flops}; median "
                        "over the runs); is it in other units (billions, PF-days, log10)? Give each run's planned "
                        "compute in FLOPs, or name another column with budget_col= (CLI: --budget-col)")


def _check_diverged(out: pd.DataFrame, name: str, exclude_top: int) -> None:
    """Refuse runs whose metric is over ``DIVERGED`` times the runs' median: not a trained model's loss
    (a diverged or unfinished run, or a wrong column), and one such run throws every law off."""
    median = float(out["loss"].median())
    far = out["loss"] > DIVERGED * median
    if far.any():
        runs = ", ".join(f"{r} ({v:.4g})" for r, v in zip(out.loc[far, "run_id"][:5], out.loc[far, "loss"][:5], strict=True))
        raise FitInputError(
            f"{name}: {int(far.sum())} run(s) have a loss over {DIVERGED:g}x the runs' median {median:.4g}: {runs}; "
            f"a diverged or unfinished run? Drop it, or leave out the highest losses with "
            f"exclude_top={exclude_top + int(far.sum())} (CLI: --exclude-top {exclude_top + int(far.sum())})")


def _best_rates(out: pd.DataFrame, excluded: list[dict[str, Any]]) -> pd.DataFrame:
    """Each (params, tokens) cell's lowest-loss run where the cell holds several learning rates;
    the others appended to ``excluded``."""
    if "lr" not in out:
        return out
    rates = pd.to_numeric(out["lr"], errors="coerce")
    cells = out.assign(_lr=rates).groupby(["params", "tokens"])["_lr"].transform("nunique")
    swept = cells > 1
    if not swept.any():
        return out
    best = out.loc[swept].groupby(["params", "tokens"])["loss"].idxmin()
    drop = out.index[swept & ~out.index.isin(best.to_numpy())]
    best_rate = {key: rates[i] for key, i in best.items()}
    excluded += [{"run_id": out.at[i, "run_id"], "reason": f"lr {rates[i]:g} is not its cell's best (lr "
                  f"{best_rate[(out.at[i, 'params'], out.at[i, 'tokens'])]:g}): the runs sweep the learning rate "
                  "(fit its law with `flops-fit tune --from`; all_rates=True / --all-rates keeps every run)"}
                 for i in drop]
    return out.drop(index=drop).reset_index(drop=True)


def _require_metric(frame: pd.DataFrame, name: str, column: str, label: str, noun: str, hint: str) -> None:
    """FitInputError unless ``column`` exists and every finished run has a value in it."""
    if column not in frame:
        raise FitInputError(f"{name}: no {label} column {column!r}: {hint}")
    finished = frame["status"].astype(str).isin(FINISHED) if "status" in frame else pd.Series(True, frame.index)
    missing = pd.to_numeric(frame[column], errors="coerce").isna() & finished
    if missing.any():
        raise FitInputError(f"{name}: {int(missing.sum())} of {int(finished.sum())} finished runs have no {noun}: "
                            f"{hint}")


def _bits_per_byte(frame: pd.DataFrame, name: str, bpb_col: str, curve_col: str) -> pd.DataFrame:
    """``frame`` checked for bits per byte in every finished run, its curves rescaled to bits per
    byte by each run's held-out bpb / loss (curves without a loss to scale by are dropped)."""
    error = METRIC_COLUMNS["error"]
    images = error in frame and pd.to_numeric(frame[error], errors="coerce").notna().any()
    _require_metric(frame, name, bpb_col, "bits-per-byte", "bits per byte", NO_BPB_IMAGES if images else NO_BPB)
    if curve_col in frame:
        frame = frame.copy()
        scale = pd.to_numeric(frame[bpb_col], errors="coerce") / pd.to_numeric(frame.get("loss"), errors="coerce") \
            if "loss" in frame else pd.Series(np.nan, frame.index)
        frame[curve_col] = [_scaled(_parse_curve(c), k) for c, k in zip(frame[curve_col], scale, strict=True)]
    return frame


def _top1_error(frame: pd.DataFrame, name: str, error_col: str, curve_col: str) -> pd.DataFrame:
    """``frame`` checked for a top-1 error in every finished run, without its training curves
    (they are losses: Approach 1 has no error curve to take an envelope of)."""
    _require_metric(frame, name, error_col, "top-1 error", "top-1 error", NO_ERROR)
    perfect = pd.to_numeric(frame[error_col], errors="coerce") == 0
    if perfect.any():  # a measurement, not a mapping mistake: the held-out split was too small or too easy to err on
        ids = _run_ids(frame, "run_id")[perfect]
        raise FitInputError(f"{name}: {int(perfect.sum())} run(s) made no mistake on the held-out images (top-1 error "
                            f"0: {', '.join(ids.head(5))}), and an error law in log error cannot fit a 0; hold out "
                            "more (or harder) images so that every run errs, or fit the loss (--metric loss)")
    return frame.drop(columns=[curve_col]) if curve_col in frame else frame


def _scaled(curve: Any, factor: float) -> Any:
    """A curve's losses times ``factor``; None when there is no curve or no finite factor."""
    if curve is None or not np.isfinite(factor):
        return None
    out = np.array(curve, dtype=float)
    out[:, 1] *= factor
    return out


def _run_ids(frame: pd.DataFrame, run_id_col: str) -> pd.Series:
    """Each row's run id: its ``run_id_col``, else ``run<row>``."""
    if run_id_col in frame:
        return frame[run_id_col].astype(str)
    return pd.Series([f"run{i}" for i in frame.index], index=frame.index, dtype=object)


def _unscored(series: pd.Series) -> pd.Series:
    """Runs whose loss is empty, NaN or infinite: a run that diverged or was never evaluated (a
    tracker marks it finished all the same); text that is no number at all is left to ``_numeric``."""
    values = pd.to_numeric(series, errors="coerce")
    text = series.astype(str).str.strip().str.lower()
    return (series.isna() | text.isin(("nan", "-nan", "inf", "-inf", "infinity", "-infinity"))) & ~np.isfinite(values)


def _text_not_numbers(frame: pd.DataFrame, column: str, name: str) -> None:
    """One line when the loss column holds no number at all (a tracker's ``loss`` parameter naming the
    loss function, say): the numeric columns named like a loss are the likely ones to map."""
    numeric = [c for c in frame.columns if c != column and "loss" in str(c).lower()
               and pd.to_numeric(frame[c], errors="coerce").notna().any()]
    example = next(str(v) for v in frame[column] if pd.notna(v))
    raise FitInputError(f"{name}: column {column!r} holds no numbers (e.g. {example!r}); name the column with each "
                        "run's loss with loss_col= (CLI: --loss-col)"
                        + (f"; numeric columns named like a loss: {', '.join(map(repr, numeric))}" if numeric else ""))


def _numeric(series: pd.Series, column: str, name: str, ids: pd.Series) -> pd.Series:
    """``series`` as floats, or one line naming the runs (by ``ids``, aligned) whose values are not
    finite positive numbers."""
    values = pd.to_numeric(series, errors="coerce")
    missing = values.isna()
    if missing.any():
        # each value as written: "2,952" shows a thousands separator, an empty cell a run never evaluated
        runs = ", ".join(f"{ids[i]}: {'empty' if pd.isna(v) else repr(str(v))}" for i, v in series[missing].head(5).items())
        raise FitInputError(
            f"{name}: column {column!r} has {int(missing.sum())} missing or non-numeric value(s) "
            f"(runs {runs}); drop or fix those runs before fitting"
        )
    bad = ~np.isfinite(values) | (values <= 0)
    if bad.any():
        rows = ", ".join(f"{ids[i]}: {float(v):g}" for i, v in values[bad].head(5).items())
        raise FitInputError(
            f"{name}: column {column!r} must hold finite positive values; {int(bad.sum())} do not "
            f"({rows}); drop those runs or map the right column"
        )
    return values.astype(float)


def _parse_curve(curve: Any) -> Any:
    if isinstance(curve, str):
        curve = json.loads(curve) if curve.strip() else None
    if curve is None or (isinstance(curve, float) and np.isnan(curve)):
        return None
    if isinstance(curve, np.ndarray) and curve.dtype == object:  # parquet's list of lists: an array of arrays
        curve = [list(point) for point in curve]
    return np.asarray(curve, dtype=float).reshape(-1, 2)


def _parse_schedule(schedule: Any) -> Any:
    """A run's schedule as the store records it (a dict): a CSV's cell holds the same as JSON text (the curve
    law refused ``demo_runs.csv``'s while the same table as JSON lines fitted). Other text is kept as it is."""
    if isinstance(schedule, str) and schedule.lstrip().startswith("{"):
        with contextlib.suppress(ValueError):  # JSONDecodeError is a ValueError
            return json.loads(schedule)
    return schedule


def _curves(frame: pd.DataFrame, column: str, name: str, ids: pd.Series) -> pd.Series:
    """Each run's curve as an array of (tokens, loss) rows, or one line naming the first run whose curve
    is no list of pairs."""
    parsed = []
    for i, curve in frame[column].items():
        try:
            parsed.append(_parse_curve(curve))
        except (ValueError, TypeError) as exc:  # JSONDecodeError is a ValueError
            raise FitInputError(f"{name}: run {ids[i]}'s {column!r} is no list of [tokens_seen, loss] pairs "
                                f"({str(exc).splitlines()[0][:80]}); fix it, or drop the column (methods that need curves then "
                                "skip)") from None
    return pd.Series(parsed, index=frame.index, dtype=object)


def _read(source: Any, **tracker: Any) -> tuple[pd.DataFrame, str, dict[str, Any]]:
    if isinstance(source, Runs):
        return source.frame, source.source, dict(source.metadata)
    if isinstance(source, pd.DataFrame):
        return source, "DataFrame", {}
    if isinstance(source, (str, Path)):
        path = Path(source)
        if (path / STORE_NAME).is_file():
            return _read_store(path)
        if path.is_file() and path.suffix.lower() in TABLES:
            return _read_table(path), str(path), {}
        if path.is_file() and path.name == STORE_NAME:
            return _read_store(path.parent)
        found = sources.read(source, **tracker)
        if found is not None:
            return found
        if path.is_dir():
            raise FitInputError(f"{path}: no {STORE_NAME} in this folder and no tracker's runs (W&B offline runs, "
                                "an MLflow store, TensorBoard event files); is it a sweep output folder?")
        if path.is_file():
            raise FitInputError(f"{path}: unknown file type; give a table of runs ({', '.join(TABLES)}), a sweep "
                                "output folder or a tracker's runs")
        raise FitInputError(f"{path}: no such file or folder; give a table of runs ({', '.join(TABLES)}), a sweep "
                            "folder or a DataFrame")
    raise FitInputError(
        f"cannot read runs from a {type(source).__name__}; give a pandas DataFrame, a CSV path "
        "or a sweep output folder holding runs.sqlite"
    )


def _read_table(path: Path) -> pd.DataFrame:
    """A table of runs, one per row (CSV, TSV, JSON lines or records, parquet); the runs table W&B
    exports becomes run_id and status."""
    kind = TABLES[path.suffix.lower()]
    try:
        if kind == "parquet":
            frame = pd.read_parquet(path)
        elif kind == "json":
            frame = _read_json(path)
        else:
            sep = "\t" if path.suffix.lower() == ".tsv" else ","
            frame = pd.read_csv(path, sep=sep, skipinitialspace=True)
            other = next((c for c in (";", "\t", ",") if c != sep and c in str(frame.columns[0])), None) \
                if len(frame.columns) == 1 else None  # the whole header one name: another separator than the name's
            if other is not None:
                frame = _separated(path, other)
            # a hand-written header's spaces ("params, tokens, loss") are no part of its names
            frame = frame.rename(columns=lambda c: c.strip() if isinstance(c, str) else c)
    except ImportError:  # pandas reads parquet through pyarrow (or fastparquet), an optional package
        raise FitInputError(f"{path}: reading parquet needs pyarrow: pip install pyarrow (or 'flops-fit[data]'), "
                            "or export the runs as CSV") from None
    except (ValueError, OSError, UnicodeDecodeError) as exc:  # pandas' parse errors are ValueErrors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FitInputError(f"{path}: not a readable {kind} table of runs ({first}); export it again, one run "
                            "a row" + (" with one header row" if kind == "CSV" else "")) from None
    return wandb_runs.from_export(frame) if wandb_runs.is_export(frame) else frame


def _separated(path: Path, sep: str) -> pd.DataFrame:
    """A table whose fields another separator splits than its suffix says (a tab-separated .csv, a
    comma-separated .tsv), or a spreadsheet's semicolons (with its locale's decimal comma, "2,387"): read
    as the table it stands for."""
    frame = pd.read_csv(path, sep=sep, skipinitialspace=True)
    if sep != ";":
        return frame
    for name in frame.columns:
        values = frame[name].dropna().astype(str)
        if frame[name].dtype.kind == "O" and len(values) and values.str.fullmatch(DECIMAL_COMMA).all():
            frame[name] = pd.to_numeric(frame[name].str.replace(",", ".", regex=False))
    return frame


def _read_json(path: Path) -> pd.DataFrame:
    """JSON lines (one object a run) or a JSON array of run objects, read by Python's json: pandas'
    reader refuses integers past int64 ("Value is too big!"), and FLOP counts pass 9.2e18. Such
    a column becomes floats, as a CSV's does."""
    text = path.read_text(encoding="utf-8-sig")  # a BOM, as Windows tools write one, is no part of the JSON
    records = json.loads(text) if path.suffix.lower() == ".json" else [
        _json_line(line, number) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ValueError("expected one JSON object a run")
    frame = pd.DataFrame(records)
    for name in frame.columns:  # pandas holds integers past int64 as objects
        values = frame[name].dropna()
        if frame[name].dtype.kind == "O" and len(values) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in values):
            frame[name] = frame[name].astype(float)
    return frame


def _json_line(line: str, number: int) -> Any:
    """One line of JSON lines; its error names the file's line (json names its column on the line alone)."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"line {number}, column {exc.colno}: {exc.msg}") from None


def _read_store(folder: Path) -> tuple[pd.DataFrame, str, dict[str, Any]]:
    if not (folder / STORE_NAME).is_file():
        raise FitInputError(f"{folder}: no {STORE_NAME} in this folder; is it a sweep output folder?")
    with RunStore(folder, reading=True) as store:
        # the runs not trained yet or cut short too, left out with their status: a fit says the sweep is unfinished
        frame, metadata = store.runs_frame(include_unfinished=True), store_metadata(store)
    design = metadata.get("adaptive")
    if isinstance(design, dict):  # an adaptive sweep's runs not chosen are no unfinished runs: it never meant them
        frame = frame[frame.status.isin(FINAL) | frame.run_id.isin(chosen_runs(design))].reset_index(drop=True)
    return frame, str(folder), metadata


def store_metadata(store: Any) -> dict[str, Any]:
    """Whatever provenance the store's meta table holds (spec, versions, plan), read defensively.

    The plan's per-run list is summarised by its length: the runs themselves are the table.
    """
    try:
        rows = store.db.execute("SELECT key, value FROM meta").fetchall()
        meta = {key: json.loads(value) for key, value in rows}
    except Exception as exc:  # provenance must never stop a fit
        return {"unavailable": f"{type(exc).__name__}: {exc}"}
    plan = meta.get("plan")
    if isinstance(plan, dict):
        meta["plan"] = {k: (f"{len(v)} entries" if isinstance(v, list) and len(v) > 20 else v) for k, v in plan.items()}
    return meta
