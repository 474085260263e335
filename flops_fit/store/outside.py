"""Results trained outside flops-fit: a lab's own scheduler trains the planned runs and hands
each result back (``flops-fit record OUT RUN_ID --result result.json``, ``record_result``).

The store's checks hold as for a run flops-fit trained: the run is in the stored plan, it
trained the tokens the plan gave it, its held-out loss is a finite positive number, and a run
with a result is never recorded twice (checked in the transaction that records it, so jobs
may record their runs at once). Record runs that no sweep driver trains (``flops-fit sweep
--record-only`` stores the plan alone). A refused result changes nothing stored.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

from flops_fit.errors import StoreBusy, StoreError
from flops_fit.store.lease import holder
from flops_fit.store.run_store import FINAL, STORE_NAME, RunStore, planned_run
from flops_fit.store.runs import RunResult

FIELDS = {"loss": "held-out loss at the end (per token or sample)", "tokens": "units trained",
          "steps": "optimizer steps (default: the plan's)", "curve": "[[tokens seen, training loss], ...]",
          "status": '"done" (default) or "failed"', "error": "why it failed", "bpb": "held-out bits per byte",
          "top1_error": "held-out top-1 error", "timings": "{name: seconds}", "device": "where it ran"}
TRAINING_META = "train_run"  # the run a train-run trains alone, and its process (``mark_training``)


def read_result(path: str | Path) -> dict[str, Any]:
    """A result file's JSON object; StoreError naming what is wrong with it."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:  # a binary file given as the result: a traceback
        raise StoreError(f"{path}: not a text file, so not the result's JSON; write one object such as "
                         '{"loss": 3.21, "tokens": 1048576}') from None
    except OSError as exc:
        raise StoreError(f"{path}: cannot read the result ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise StoreError(f"{path}: not JSON ({exc.msg} at line {exc.lineno}); write one object such as "
                         '{"loss": 3.21, "tokens": 1048576}') from None
    if not isinstance(data, dict):
        raise StoreError(f"{path}: the result must be one JSON object with loss and tokens, got {type(data).__name__}")
    return data


def _number(data: dict[str, Any], key: str, default: float = math.nan) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        hint = ""
        if key == "loss" and isinstance(value, str) and value.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
            hint = '; a run that diverged is recorded with "status": "failed" and its "error"'
        raise StoreError(f"result field {key!r} must be a number, got {value!r}{hint}")
    return float(value)


def record_result(out_dir: str | Path, run_id: str, result: dict[str, Any] | RunResult, *,
                  retry_failed: bool = False) -> RunResult:
    """Store ``result`` (a mapping of ``FIELDS`` or a ``RunResult``) for the planned run ``run_id``
    in the sweep folder ``out_dir``; StoreError (one line) for a result the store refuses. A run
    is recorded once; ``retry_failed`` replaces a failed result with its retry's (a lab that trains
    a failed run again on its own scheduler), as ``sweep --retry-failed`` trains one again."""
    out_dir = Path(out_dir)
    if not (out_dir / STORE_NAME).is_file():
        raise StoreError(f"{out_dir}: no {STORE_NAME}; record the plan first (`flops-fit sweep CONFIG --out {out_dir} "
                         "--record-only`)")
    data = result.to_dict() if isinstance(result, RunResult) else dict(result)
    data.pop("run_id", None)
    unknown = sorted(set(data) - set(FIELDS) - {"flops", "unique_tokens", "epochs"})
    if unknown:
        raise StoreError(f"unknown result field(s) {', '.join(unknown)}; a result holds "
                         + "; ".join(f"{k}: {v}" for k, v in FIELDS.items()))
    with RunStore(out_dir) as store:
        spec = planned_run(store.planned_runs(), run_id, out_dir)  # or a unique prefix of its id
        run_id = spec.run_id
        busy(out_dir, store, run_id)
        status = store.statuses().get(run_id)
        if status in FINAL and not (retry_failed and status == "failed"):
            retry = ("; to record a retry of the failed run in its place, add --retry-failed (API: retry_failed=True)"
                     if status == "failed" else "")
            raise StoreError(f"run {run_id} already has a result in {out_dir} ({status}); a run is recorded once{retry}")
        outcome = _result(spec, run_id, data)
        try:  # a retry's result replaces the failure in the same transaction: one the store refuses loses nothing
            store.record(outcome, once=True, replacing_failed=status == "failed")
        except StoreError:
            if store.statuses().get(run_id) not in FINAL:  # not recorded meanwhile: a store this user may not write
                raise
            raise StoreError(f"run {run_id} already has a result in {out_dir}; a run is recorded once") from None
    return outcome


def mark_training(store: RunStore, run_id: str) -> None:
    """Say in the store that this process, holding its lease, trains ``run_id`` alone (``train-run``), so
    ``record`` may store the other runs meanwhile."""
    store.set_meta(**{TRAINING_META: {"run_id": run_id, "pid": os.getpid(), "host": socket.gethostname()}})


def busy(out_dir: Path, store: RunStore, run_id: str) -> None:
    """StoreBusy while another process drives the folder: a sweep driver trains every run it found without a
    result and stores its own, so a result recorded meanwhile was said to be recorded, then replaced without a
    word. A ``train-run`` trains and records its one run only: the others may be recorded beside it. Records
    need no lease of their own: jobs may record at once."""
    live = holder(out_dir / STORE_NAME)
    if live is None or (live.pid, live.host) == (os.getpid(), socket.gethostname()):
        return
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(live.started))
    alone = store.get_meta(TRAINING_META) or {}
    if (alone.get("pid"), alone.get("host")) == (live.pid, live.host):  # the live holder is a train-run
        if alone.get("run_id") != run_id:
            return
        raise StoreBusy(f"run {run_id} is being trained in {out_dir} by `flops-fit train-run` (pid {live.pid} on "
                        f"{live.host}, started {since}), which records its own result when it ends: let it finish, "
                        "or stop it, then record")
    raise StoreBusy(f"{out_dir} is being swept by a driver (pid {live.pid} on {live.host}, started {since}), which "
                    "trains its runs without a result and stores its own: record once it ends (or stop it), into "
                    "a folder no driver sweeps (`flops-fit sweep CONFIG --out OUT --record-only`)")


def _result(spec: Any, run_id: str, data: dict[str, Any]) -> RunResult:
    state = data.get("status", "done")
    if state not in FINAL:
        raise StoreError(f"result status must be 'done' or 'failed', got {state!r}")
    loss = _number(data, "loss")
    if state == "done" and "tokens" not in data:
        raise StoreError(f"run {run_id}: the result needs tokens (the units it trained; the plan gives {spec.tokens:,})")
    tokens = _number(data, "tokens", spec.tokens if state == "failed" else math.nan)
    if state == "done":
        if not (math.isfinite(loss) and loss > 0):
            raise StoreError(f"run {run_id}: the loss must be a finite positive number, got {data.get('loss')!r}; "
                             'a run that diverged is recorded with "status": "failed" and its "error"')
        if tokens != spec.tokens:
            raise StoreError(f"run {run_id}: trained {data['tokens']!r} tokens, the plan gives it {spec.tokens:,}; record a "
                             "run that trained its planned tokens (its budget is what the fit compares)")
    elif not (math.isfinite(tokens) and 0 <= tokens <= spec.tokens and tokens == int(tokens)):
        # 1e400 was an OverflowError traceback, -5 was stored and shown as the tokens it trained
        raise StoreError(f"run {run_id}: a failed run's tokens are the whole number it trained before it failed, from "
                         f"0 to the plan's {spec.tokens:,} (leave them out if unknown), got {data.get('tokens')!r}")
    curve = data.get("curve") or []
    try:
        curve = [[float(t), float(v)] for t, v in curve]
    except (TypeError, ValueError):
        raise StoreError(f"run {run_id}: curve must be [[tokens seen, training loss], ...]") from None
    # a done run's curve of NaN losses, or at -5 tokens seen, was stored for the curve law to read (a failed
    # run's losses may be what blew up: ``fitting.inputs.divergence`` reads them)
    if bad := next((p for p in curve if not _in_curve(p, state)), None):
        raise StoreError(f"run {run_id}: curve must be [[tokens seen, training loss], ...] with tokens seen a finite "
                         "number from 0" + (" and finite losses" if state == "done" else "") + f"; got {bad}")
    # -1 bits per byte, a 700% error were stored (NaN: not measured, as a RunResult of the loop's has it)
    bpb, top1 = _number(data, "bpb"), _number(data, "top1_error")
    if not (math.isnan(bpb) or (math.isfinite(bpb) and bpb > 0)):
        raise StoreError(f"run {run_id}: bpb must be a finite positive number of bits per byte, "
                         f"got {data['bpb']!r}")
    if not (math.isnan(top1) or 0 <= top1 <= 1):
        raise StoreError(f"run {run_id}: top1_error must be a fraction from 0 to 1, got {data['top1_error']!r}")
    timings = data.get("timings") or {}
    if not isinstance(timings, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                for v in timings.values()):
        raise StoreError(f'run {run_id}: timings must map names to seconds, e.g. {{"total_s": 3600}}; got {timings!r}')
    steps = _number(data, "steps", spec.steps)
    if not (math.isfinite(steps) and steps >= 0 and steps == int(steps)):
        raise StoreError(f"run {run_id}: steps must be the whole number of optimizer steps it took (the plan gives "
                         f"{spec.steps:,}), got {data.get('steps')!r}")
    device = data.get("device", "outside")
    if not isinstance(device, str) or not device:  # 5 was stored as the text "5"
        raise StoreError(f'run {run_id}: device must be text naming where it ran, e.g. "cuda:0" or "node12", got '
                         f"{device!r}")
    error = data.get("error")
    if error is not None and not isinstance(error, str):  # a list failed in SQLite with a traceback, a number was kept
        raise StoreError(f"run {run_id}: error must be text saying why the run failed, got {error!r}")
    return RunResult(run_id=run_id, status=state, loss=loss, tokens=int(tokens), flops=tokens * spec.flops_per_unit,
                     steps=int(steps), curve=curve, error=error,
                     timings={str(k): float(v) for k, v in timings.items()},
                     device=device, bpb=bpb, top1_error=top1)


def _in_curve(point: list[float], state: str) -> bool:
    """Whether a curve point is at a finite count of tokens seen, its loss finite where the run is done."""
    seen, loss = point
    return math.isfinite(seen) and seen >= 0 and (state == "failed" or math.isfinite(loss))
