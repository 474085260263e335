"""The sweep's progress display: two bars on stderr, redrawn in place on a terminal, and the
time the sweep has left at the pace it has measured (``Pace``)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from flops_fit.tables import duration
from flops_fit.training.wsd import executed_flops

PACE_AFTER = (0.05, 10.0)  # the time left is shown once this share of the work and these seconds have passed
OWN_PACE_AFTER = (2.0, 20)  # a run in flight times its own steps once it has trained this long and this many


def _bar(done: float, total: float, width: int = 24) -> str:
    filled = int(width * done / total) if total else width
    return "[" + "#" * filled + "." * (width - filled) + "]"


class Pace:
    """The time a sweep has left, measured as it trains. Once ``MIN_FINISHED`` runs have
    finished here, a run's seconds are a + b x its steps + c x its FLOPs (non-negative least
    squares over them: setup and evaluation, per-step overhead, arithmetic; a small model's step
    is mostly overhead, so FLOPs alone misjudge it); before that nothing is said. The sweep goes
    at the pace its workers together have kept so far (that work done per second of wall time),
    but never ends before its longest chain of runs one worker trains in turn (a WSD family's
    branches, ``group``), each chain's steps at the pace its run in flight keeps once it has one
    (a size larger than any finished costs more per step than the law extrapolates)."""

    MIN_FINISHED = 3

    def __init__(self, work: Mapping[str, tuple[float, float]], group: Mapping[str, str] | None = None, *,
                 clock: Callable[[], float] | None = None, start: float | None = None) -> None:
        self._clock = clock  # a reader of another process's sweep passes wall time and that sweep's start
        self.work = dict(work)  # run id -> (steps, FLOPs) it executes (a WSD stable phase counted once)
        self.group = dict(group or {})  # run id -> the chain it trains in (default: its own)
        self.trained: dict[str, float] = {}  # run id -> steps trained so far
        self.heard: dict[str, tuple[float, float]] = {}  # run id -> (time of its first report, of its last)
        self.finished: dict[str, float | None] = {}  # run id -> its seconds (None: failed, not a cost)
        self.start = self.clock() if start is None else start
        self._law: tuple[int, tuple[float, float, float] | None] = (-1, None)  # (results heard, their law)
        self._results = 0

    def clock(self) -> float:
        """Now: the given clock's, else the monotonic clock's (looked up at each call)."""
        return self._clock() if self._clock is not None else time.monotonic()

    def add(self, run_id: str, steps: float) -> None:
        now = self.clock()
        self.trained[run_id] = self.trained.get(run_id, 0.0) + steps
        self.heard[run_id] = (self.heard.get(run_id, (now, now))[0], now)

    def own_pace(self) -> dict[str, float]:
        """Seconds per step of each chain whose run in flight has trained long enough to time."""
        paces = {}
        for r, steps in self.trained.items():
            first, last = self.heard[r]
            if r not in self.finished and last - first >= OWN_PACE_AFTER[0] and steps >= OWN_PACE_AFTER[1]:
                paces[self.group.get(r, r)] = (last - first) / steps
        return paces

    def finish(self, run_id: str, seconds: float | None) -> None:
        self.finished[run_id] = seconds
        self._results += 1

    def cost(self) -> tuple[float, float, float] | None:
        """(a, b, c): a run's seconds = a + b x steps + c x FLOPs; None before enough runs finished.
        A term the finished runs cannot tell from the others (runs of one budget share their
        FLOPs) is left out (0), so that it is not extrapolated from nothing."""
        if self._law[0] != self._results:  # refitted as results come, not at every progress report
            self._law = (self._results, self._fit())
        return self._law[1]

    def _fit(self) -> tuple[float, float, float] | None:
        points = [(*self.work[r], s) for r, s in self.finished.items() if s and r in self.work]
        if len(points) < self.MIN_FINISHED:
            return None
        import numpy as np  # lazily: `flops-fit status` reads a pace without the numerical stack until it needs one
        from scipy.optimize import nnls

        raw = np.array([[1.0, steps, flops] for steps, flops, _ in points])
        rows = raw / raw.max(axis=0)
        kept = [0]
        for term in (1, 2):  # a term whose column the kept ones reproduce to 5% says nothing of its own
            basis = rows[:, kept]
            residual = rows[:, term] - basis @ np.linalg.lstsq(basis, rows[:, term], rcond=None)[0]
            if np.linalg.norm(residual) > 0.05 * np.linalg.norm(rows[:, term]):
                kept.append(term)
        coef, _ = nnls(rows[:, kept], np.array([s for *_, s in points]))
        law = np.zeros(3)
        law[kept] = coef
        a, b, c = (float(v) for v in law / raw.max(axis=0))
        return a, b, c

    def seconds_left(self) -> float | None:
        """The time left at this pace, or None before it means anything (``PACE_AFTER``)."""
        elapsed = self.clock() - self.start
        law = self.cost()
        if law is None:
            return None
        a, b, c = law
        own = self.own_pace()
        left: dict[str, float] = {}  # chain -> its seconds still to go
        total = done = 0.0
        for r, (steps, flops) in self.work.items():
            cost = a + b * steps + c * flops
            if r in self.finished:
                ran = cost
            else:
                trained, chain = min(self.trained.get(r, 0.0), steps), self.group.get(r, r)
                ran = (b * steps + c * flops) * (trained / steps if steps else 0.0)
                rest = cost - ran if chain not in own else (0.0 if trained else a) + (steps - trained) * own[chain]
                left[chain] = left.get(chain, 0.0) + rest
            total, done = total + cost, done + ran
        if total <= 0 or done < PACE_AFTER[0] * total or elapsed < PACE_AFTER[1]:
            return None
        return max(0.0, elapsed * (total - done) / done, max(left.values(), default=0.0))


def work_of(runs: Sequence[Any], todo: Sequence[Any]) -> tuple[dict[str, tuple[float, float]], dict[str, str]]:
    """``Pace``'s work and chains for the runs ``todo`` of the plan's ``runs``: the (steps, FLOPs) each
    executes (a WSD family's stable phase counted once, ``wsd.executed_flops``), and the family each
    WSD branch trains in."""
    executed = executed_flops(runs)
    work = {r.run_id: (executed[r.run_id] / (r.flops_per_unit * r.batch_size * r.seq_len), executed[r.run_id])
            for r in todo}
    return work, {r.run_id: r.family for r in todo if r.schedule == "wsd"}


CHAIN_GAP = 60.0  # seconds between one run's result and the next driver's start that still continue one session
SESSION_META = "driver_started"  # the store's meta: when the lease of the latest sweep driver (run_plan) was taken


def session_start(timeline: Sequence[Mapping[str, Any]], started: float, gap: float = CHAIN_GAP, *,
                  own: bool = False) -> float:
    """When the training a store's driver (its lease taken at ``started``) goes on with began: back through
    the runs that finished at most ``gap`` seconds before it, each to its start, and so on. Runs trained one
    by one, each by a `flops-fit train-run` holding its own lease, are one session: timed from the driver's
    own start alone, none had finished and the time left was never measured. ``own``: the driver is a sweep's
    (``run_plan`` records its start, ``SESSION_META``), whose session is its own, as its display times it: a
    sweep resumed within ``gap`` of the driver before it was joined to that one's runs and idle seconds."""
    if own:
        return started
    since = started
    for row in sorted((r for r in timeline if r["finished"]), key=lambda r: -r["finished"]):
        if row["finished"] < since - gap:
            break
        since = min(since, row["started"] or row["finished"])
    return since


def stored_pace(runs: Sequence[Any], timeline: Sequence[Mapping[str, Any]], since: float, now: float) -> Pace:
    """The pace of a sweep another process has driven since ``since`` (wall time), read from its
    store (``RunStore.planned_runs`` and ``timeline``): what ``flops-fit status`` says of a sweep in
    flight. Its work is the runs not finished before ``since``, as the driver's own display counts."""
    state = {row["run_id"]: row for row in timeline}
    todo = [r for r in runs if r.run_id in state and (state[r.run_id]["finished"] or now) >= since]
    pace = Pace(*work_of(runs, todo), clock=lambda: now, start=since)
    for r in todo:
        row = state[r.run_id]
        if row["status"] in ("done", "failed") and row["finished"]:
            pace.finish(r.run_id, row["seconds"] if row["status"] == "done" else None)
        elif row["status"] == "running":  # steps over all its attempts: a resumed run's lost ones counted too
            pace.add(r.run_id, min(row["steps_trained"], pace.work[r.run_id][0]))
    return pace


class SweepDisplay:
    """Two progress bars on stderr (the sweep's runs and the current run), redrawn in place
    on a terminal; plain lines, at most one per ``interval`` seconds per run, otherwise."""

    def __init__(self, total_runs: int, done_runs: int = 0, stream: TextIO | None = None,
                 enabled: bool = True, interval: float = 10.0,
                 work: Mapping[str, tuple[float, float]] | None = None, group: Mapping[str, str] | None = None,
                 scope: str = "") -> None:
        self.total, self.done, self.failed = total_runs, done_runs, 0
        self.scope = scope  # what the time left covers, said after it (" in this batch")
        self.pace = Pace(work or {}, group)  # (steps, FLOPs) of each run still to train here, and its chain
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and getattr(self.stream, "isatty", lambda: False)()
        self.interval = interval
        self._last_line = 0.0
        self._current = ""

    def _emit(self, text: str, final: bool = False) -> None:
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r\x1b[K" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def _sweep_part(self) -> str:
        failed = f", {self.failed} failed" if self.failed else ""
        left = self.pace.seconds_left() if self.done < self.total else None
        pace = "" if left is None else f", about {duration(left)} left{self.scope}"
        return f"sweep {_bar(self.done, self.total, 16)} {self.done}/{self.total} runs{failed}{pace}"

    def run_progress(self, run_id: str, done: int, total: int, loss: float) -> None:
        now = time.monotonic()
        if not self.tty and now - self._last_line < self.interval and done < total:
            return
        self._last_line = now
        self._current = f"run {run_id[:8]} {_bar(done, total)} {done / total:5.1%} loss {loss:.4f}"
        self._emit(f"{self._sweep_part()} | {self._current}")

    def note(self, line: str) -> None:
        """A line of its own above the bars (the parity gate's outcome, say)."""
        self._emit(line, final=True)

    def run_finished(self, line: str, failed: bool = False, run_id: str | None = None,
                     seconds: float | None = None) -> None:
        """A run's result is stored: ``seconds`` it took (None: failed), for the pace."""
        self.done += 1
        self.failed += failed
        if run_id is not None:
            self.pace.finish(run_id, None if failed else seconds)
        self._emit(f"{self._sweep_part()} | {line}", final=True)
