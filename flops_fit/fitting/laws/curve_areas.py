"""Every recorded point of every run, with the learning-rate areas a law of the whole curve reads.

A run's curve point is the mean training loss over an interval of steps. At step t the run
has trained S1(t) tokens weighted by its learning-rate factor (the "forward area" of Tissue
et al. 2024, in tokens: S1 = tokens at a constant rate) and has annealed S2(t) = 1 - (the
factor, exponentially averaged over tau steps): the share of the peak rate a cooldown has
taken away and the loss has had time to feel (0 at a constant rate, towards 1 long after a
cooldown to zero). tau is fitted, so S2 is tabulated here for a ladder of tau and
interpolated in log tau.

WSD branches of one family repeat its stable phase in their curves (bit for bit): each stretch
of stable phase is kept once, from the branch that trains it (the one whose cooldown starts
next), so no stretch counts twice. Each run's held-out loss after its last step is one more
point. Schedules are recomputed from the fields the store records per run
(``run_store.SCHEDULE_FIELDS``), as ``sweeps.schedules`` defines them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from flops_fit.errors import FitInputError

TAU_GRID = np.geomspace(1.0, 2e6, 64)  # steps: the ladder S2 is tabulated on
SUBSTEPS = 4  # an interval's mean is taken over at most this many evenly spaced steps (S1) / all steps (S2)
BURN_IN = 0.5  # a family's first points (before this share of its shortest branch's steps, or 2 warmups) are
# left out: the power law in S1 describes training past its first transient (Tissue et al. fit after warmup)


def factors(schedule: dict, steps: int | None = None) -> np.ndarray:
    """The learning-rate factor of each step of a run (``sweeps.schedules``, vectorised)."""
    total = int(schedule["steps"] if steps is None else steps)
    warmup = max(1, int(schedule.get("warmup_steps") or 1))
    t = np.arange(total, dtype=float)
    if schedule.get("schedule", "cosine") == "wsd":
        start = int(schedule["cooldown_start"])
        progress = np.clip((t - start) / max(1, total - start), 0.0, None)
        shape = schedule.get("cooldown_shape", "1-sqrt")
        f = 1.0 - (progress if shape == "linear" else np.sqrt(progress))
        f = np.where(t < start, 1.0, f)
    else:
        lo = float(schedule.get("min_lr_ratio", 0.0))
        frac = np.clip((t - warmup) / max(1, total - 1 - warmup), 0.0, 1.0)
        f = lo + (1 - lo) * 0.5 * (1 + np.cos(np.pi * frac))
    return np.where(t < warmup, (t + 1) / warmup, f)


def annealed(g: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """(len(taus), len(g) + 1): S2 before each step and after the last, for factors ``g``
    with the warmup counted at the peak (a warmup is not an anneal). Kept per schedule: every
    refit of a subset of the runs meets the same few schedules."""
    g, taus = np.asarray(g, float).ravel(), np.asarray(taus, float).ravel()
    if taus.size * (g.size + 1) > CACHED_CELLS:
        return _anneal(g, taus)
    return _cached(g.tobytes(), taus.tobytes()).copy()


CACHED_CELLS = 500_000  # tables kept up to 4 MB each (the demo's are ~0.1 MB), 64 of them at most


@lru_cache(maxsize=64)
def _cached(g_bytes: bytes, tau_bytes: bytes) -> np.ndarray:
    return _anneal(np.frombuffer(g_bytes), np.frombuffer(tau_bytes))


def _anneal(g: np.ndarray, taus: np.ndarray) -> np.ndarray:
    from scipy.signal import lfilter

    peak = np.flatnonzero(g >= 1.0 - 1e-12)
    g = np.where(np.arange(g.size) < (peak[0] if peak.size else g.size), 1.0, g)
    drop = np.concatenate([[0.0], 1.0 - g])  # 1 - factor of the step just taken
    # S2 stays exactly 0 until the rate first drops (a WSD run's whole stable phase): filter from there on
    start = int(np.argmax(drop != 0)) if np.any(drop != 0) else drop.size
    out = np.zeros((taus.size, drop.size))
    for i, tau in enumerate(taus):
        lam = np.exp(-1.0 / tau)
        out[i, start:] = lfilter([1.0 - lam], [1.0, -lam], drop[start:])
    return out


@dataclass
class CurvePoints:
    """The fitted points: one row each, with its run (index into the runs), whether it is the
    run's held-out loss, its interval's mean log S1 samples and its S2 on ``TAU_GRID``."""

    run: np.ndarray  # (p,) index of the run
    final: np.ndarray  # (p,) bool: the held-out loss after the run's last step
    loss: np.ndarray  # (p,) training loss (mean over the interval) or held-out loss
    log_s1: np.ndarray  # (p, SUBSTEPS) log S1 at evenly spaced steps of the interval (repeats where shorter)
    s2: np.ndarray  # (p, len(TAU_GRID)) the interval's mean S2
    steps: np.ndarray  # (p,) the step the interval ends at (plots)
    tokens: np.ndarray  # (p,) tokens seen at its end (plots)


def schedule_of(row: pd.Series) -> dict:
    """The run's schedule fields; FitInputError when the runs do not record them."""
    sched = row.get("schedule")
    if not isinstance(sched, dict) or not sched.get("steps"):
        raise FitInputError("the curve law needs each run's learning-rate schedule (steps, warmup, cooldown) and "
                            "training curve, which a sweep folder's store records (a table: its 'schedule' column "
                            "as JSON, with 'steps'); fit a sweep folder, or use another method for a table without "
                            "them")
    return sched


def units_per_step(row: pd.Series, sched: dict) -> float:
    """Tokens (or samples) per optimizer step: batch x sequence for token runs, batch for samples."""
    batch, seq = float(sched["batch_size"]), float(sched.get("seq_len") or 1)
    return batch * seq if row["tokens"] > batch * int(sched["steps"]) else batch


def _intervals(curve: np.ndarray, per_step: float, total: int) -> tuple[np.ndarray, np.ndarray]:
    """(begin, end) steps of each curve point: a point is the mean over the steps since the previous one."""
    end = np.clip(np.rint(curve[:, 0] / per_step).astype(int), 1, total)
    begin = np.concatenate([[0], end[:-1]])
    return begin, end


def _owned_from(frame: pd.DataFrame, schedules: list[dict]) -> np.ndarray:
    """Per run, the first stable step its curve contributes: its family's previous cooldown start
    (WSD branches share the stable phase up to their own cooldown start; cosine runs own all)."""
    out = np.zeros(len(frame), dtype=int)
    keys = [(r.get("model"), r.get("size"), r.get("lr"), s.get("warmup_steps"), r["params"])
            if s.get("schedule") == "wsd" else None for (_, r), s in zip(frame.iterrows(), schedules, strict=True)]
    for key in {k for k in keys if k is not None}:
        members = sorted((schedules[i]["cooldown_start"], i) for i, k in enumerate(keys) if k == key)
        previous = 0
        for start, i in members:
            out[i] = previous
            previous = max(previous, start)
    return out


def _burn_in(frame: pd.DataFrame, schedules: list[dict]) -> np.ndarray:
    """Per run, the first step whose points are fitted (``BURN_IN``), the same across a family."""
    first = np.array([max(2 * int(s.get("warmup_steps") or 0), int(BURN_IN * int(s["steps"]))) for s in schedules])
    keys = list(zip(frame.get("size", frame["params"]), frame["params"], strict=True))
    shortest: dict = {}
    for k, f in zip(keys, first, strict=True):
        shortest[k] = min(shortest.get(k, f), f)
    return np.array([shortest[k] for k in keys])


def curve_points(frame: pd.DataFrame, *, with_final: bool = False) -> tuple[CurvePoints, np.ndarray]:
    """Every fitted point of ``frame``'s runs (see the module doc) and each run's count of curve
    points. A run without a finite loss (still training) gives its curve alone, unless
    ``with_final`` (a prediction's rows: the final point of each run, whatever its loss)."""
    if "curve" not in frame or "schedule" not in frame:
        schedule_of(pd.Series(dtype=object))
    schedules = [schedule_of(row) for _, row in frame.iterrows()]
    owned, burn = _owned_from(frame, schedules), _burn_in(frame, schedules)
    parts: dict[str, list] = {k: [] for k in ("run", "final", "loss", "log_s1", "s2", "steps", "tokens")}
    counts = np.zeros(len(frame), dtype=int)
    for i, ((_, row), sched) in enumerate(zip(frame.iterrows(), schedules, strict=True)):
        total, per_step = int(sched["steps"]), units_per_step(row, sched)
        g = factors(sched)
        s1 = per_step * np.concatenate([[0.0], np.cumsum(g)])  # before each step, and after the last
        s2 = annealed(g, TAU_GRID)
        recorded = row.get("curve")
        curve = np.asarray(recorded if recorded is not None else np.zeros((0, 2)), float).reshape(-1, 2)
        begin, end = _intervals(curve, per_step, total) if len(curve) else (np.zeros(0, int), np.zeros(0, int))
        stable_end = int(sched["cooldown_start"]) if sched.get("schedule") == "wsd" else total
        keep = (begin >= burn[i]) & ((begin >= owned[i]) | (end > stable_end)) & (end > begin)
        begin, end, mean = begin[keep], end[keep], curve[keep, 1]
        counts[i] = keep.sum()
        # S1 at evenly spaced steps of each interval; S2's exact mean over the interval (cumulative sums)
        grid = begin[:, None] + (np.arange(SUBSTEPS) + 0.5)[None, :] * ((end - begin)[:, None] / SUBSTEPS)
        sub = np.clip(np.floor(grid).astype(int), 0, total)
        cum2 = np.concatenate([np.zeros((TAU_GRID.size, 1)), np.cumsum(s2, axis=1)], axis=1)
        s2_mean = ((cum2[:, end] - cum2[:, begin]) / (end - begin)).T
        last = int(with_final or np.isfinite(row["loss"]))  # a run still training has no held-out loss yet
        parts["run"] += [np.full(begin.size + last, i)]
        parts["final"] += [np.r_[np.zeros(begin.size, bool), np.ones(last, bool)]]
        parts["loss"] += [np.r_[mean, [row["loss"]] * last]]
        parts["log_s1"] += [np.log(np.maximum(np.vstack([s1[sub], np.full((last, SUBSTEPS), s1[total])]), 1e-300))]
        parts["s2"] += [np.vstack([s2_mean, np.repeat(s2[:, total][None, :], last, axis=0)])]
        parts["steps"] += [np.r_[end, [total] * last]]
        parts["tokens"] += [np.r_[end * per_step, [row["tokens"]] * last]]
    return CurvePoints(**{k: np.concatenate(v) for k, v in parts.items()}), counts


def s2_at(table: np.ndarray, log_tau: float | np.ndarray) -> np.ndarray:
    """S2 of every row of ``table`` (rows x TAU_GRID) at tau, linear in log tau between the nodes."""
    lo, w = _node(log_tau)
    if np.ndim(w) == 0:
        return table[..., lo] * (1 - w) + table[..., lo + 1] * w
    rows = np.arange(table.shape[0])
    return table[rows, lo] * (1 - w) + table[rows, lo + 1] * w


def s2_each(table: np.ndarray, log_tau: np.ndarray) -> np.ndarray:
    """(k, rows): S2 of every row of ``table`` at each of k values of log tau (a bootstrap's
    resamples, each at its own tau), interpolated as ``s2_at`` does."""
    lo, w = _node(np.asarray(log_tau, float).ravel())
    return table[:, lo].T * (1 - w[:, None]) + table[:, lo + 1].T * w[:, None]


def _node(log_tau: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The TAU_GRID node below log tau (clipped to the grid) and the weight of the node above."""
    x = np.clip(np.asarray(log_tau, float), np.log(TAU_GRID[0]), np.log(TAU_GRID[-1]))
    pos = (x - np.log(TAU_GRID[0])) / (np.log(TAU_GRID[1]) - np.log(TAU_GRID[0]))
    lo = np.minimum(np.floor(pos).astype(int), TAU_GRID.size - 2)
    return lo, pos - lo


__all__ = ["TAU_GRID", "CurvePoints", "annealed", "curve_points", "factors", "s2_at", "s2_each"]
