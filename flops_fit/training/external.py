"""Train one planned run with the user's own script (the ``[train]`` command).

The script gets the run's spec two ways: ``FLOPS_FIT_SPEC`` names a JSON file holding every
``RunSpec`` field plus ``checkpoint_dir`` and ``result_file``, and the fields a script
usually needs are environment variables (``ENV``). It trains exactly ``tokens`` tokens,
checkpoints into ``checkpoint_dir`` (started again after a kill, it finds its checkpoints
there) and writes ``result_file``: ``{"loss": <held-out loss>, "tokens": <tokens trained>}``,
optionally ``"curve": [[tokens, train_loss], ...]``, ``"steps"``, ``"bpb"``, ``"top1_error"``,
``"device"``. Other keys (the script's own metrics) are ignored, but one spelt like a known key
(``"curv"``) fails the run, as a typo would otherwise drop its curve without a word.

Whatever the script does is input at a boundary: a crash (non-zero exit), a hang past
``time_limit``, no result, an unreadable one, a non-finite loss or tokens off the plan each
give a failed ``RunResult`` whose error names the reason, and the sweep goes on. The
script's output goes to ``<logs_dir>/<run_id>.log``. A result the script wrote before the
driver could store it (the driver was killed) is read on resume instead of training again.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from flops_fit.errors import Interrupted
from flops_fit.executors.base import ProgressSink, ignore_progress
from flops_fit.executors.stopping import stop_requested
from flops_fit.store.runs import RunResult, RunSpec
from flops_fit.training.checkpoint import EXTERNAL, CheckpointPolicy, save_result
from flops_fit.training.command import TrainCommand, script_path

# environment variable -> RunSpec field handed to the script
ENV = {"FLOPS_FIT_RUN_ID": "run_id", "FLOPS_FIT_MODEL": "model", "FLOPS_FIT_SIZE": "size",
       "FLOPS_FIT_PARAMS": "params", "FLOPS_FIT_TOKENS": "tokens", "FLOPS_FIT_BATCH_SIZE": "batch_size",
       "FLOPS_FIT_SEQ_LEN": "seq_len", "FLOPS_FIT_STEPS": "steps", "FLOPS_FIT_LR": "lr",
       "FLOPS_FIT_WARMUP_STEPS": "warmup_steps", "FLOPS_FIT_MIN_LR_RATIO": "min_lr_ratio",
       "FLOPS_FIT_SCHEDULE": "schedule", "FLOPS_FIT_COOLDOWN_START": "cooldown_start", "FLOPS_FIT_SEED": "seed",
       "FLOPS_FIT_FLOPS_PER_TOKEN": "flops_per_unit", "FLOPS_FIT_PROCESSES": "processes_per_run"}
STOP_GRACE_S = 30.0  # after SIGTERM, seconds the script has to checkpoint before it is killed
POLL_S = 0.1


def _kill_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the script gets SIGTERM if the process that started it dies (kill -9 of the
    driver), so a resumed sweep never finds the old attempt still writing its checkpoints."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _end(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM the script's process group, SIGKILL it after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _log(path: Path, lines: int = 5) -> str:
    """The log's name and its last lines, for a run's error ("log PATH: a | b"), or that it is empty: a
    script that printed nothing left no clue there, and "log PATH: " read as if the lines were lost."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        text = []
    return f"log {path}: {' | '.join(text[-lines:])}" if text else f"log {path} is empty: the script printed nothing"


RESULT_KEYS = ("loss", "tokens", "steps", "curve", "bpb", "top1_error", "device")  # what a script's result may hold


def read_result(path: Path, spec: RunSpec, tolerance: float) -> dict[str, Any]:
    """The script's result, checked against the plan; ValueError names what is wrong."""
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"bad result: {path} is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f'bad result: {path} must hold an object {{"loss": ..., "tokens": ...}}')
    loss, tokens = data.get("loss"), data.get("tokens")
    if isinstance(loss, bool) or not isinstance(loss, (int, float)):
        raise ValueError(f"bad result: no held-out loss (a number under \"loss\") in {path}")
    if not math.isfinite(loss):
        raise ValueError(f"non-finite loss: the script reported a held-out loss of {loss}")
    if loss <= 0:  # the store and every fit read a loss as a positive number of nats: a sign or a metric mixed up
        raise ValueError(f"bad result: the held-out loss must be positive (a cross-entropy in nats), the script "
                         f"reported {loss} in {path}")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"bad result: \"tokens\" (the tokens trained, an integer) is {tokens!r} in {path}")
    if abs(tokens - spec.tokens) > tolerance * spec.tokens:
        raise ValueError(f"tokens off the plan: the script trained {tokens:,} tokens, the run plans "
                         f"{spec.tokens:,} (token_tolerance {tolerance:g})")
    for key, what in (("steps", "the optimizer steps taken, an integer"), ("bpb", "held-out bits per byte, a number")):
        value = data.get(key, 0)  # optional: the plan's steps and no bpb where left out
        if isinstance(value, bool) or not isinstance(value, int if key == "steps" else (int, float)):
            raise ValueError(f'bad result: "{key}" ({what}) is {value!r} in {path}; write it so or leave it out')
    top1 = data.get("top1_error", math.nan)
    if isinstance(top1, bool) or not isinstance(top1, (int, float)) or not (math.isnan(top1) or 0 <= top1 <= 1):
        raise ValueError(f'bad result: "top1_error" (the held-out top-1 error, a fraction from 0 to 1) is {top1!r} in '
                         f"{path}; write it so or leave it out")
    for key in sorted(set(data) - set(RESULT_KEYS)):
        if near := difflib.get_close_matches(key, RESULT_KEYS, n=1, cutoff=0.75):
            raise ValueError(f'bad result: "{key}" in {path} is no result key; did the script mean "{near[0]}"? '
                             f"(the keys: {', '.join(RESULT_KEYS)}; others are ignored)")
    curve = data.get("curve", [])
    if (not isinstance(curve, list)
            or not all(isinstance(p, list) and len(p) == 2 and all(isinstance(v, (int, float)) for v in p)
                       for p in curve)):
        raise ValueError("bad result: \"curve\" must be a list of [tokens, train_loss] pairs")
    return data


def run_folder(spec: RunSpec, checkpoints: CheckpointPolicy | None) -> Path:
    """The run's folder for the script: beside flops-fit's checkpoints (kept across attempts),
    or a temporary one when the sweep does not checkpoint."""
    if checkpoints is None:
        return Path(tempfile.mkdtemp(prefix=f"flops-fit-{spec.run_id}-")) / EXTERNAL
    return checkpoints.run_dir(spec.run_id) / EXTERNAL


def train_external(spec: RunSpec, trainer: TrainCommand, progress: ProgressSink = ignore_progress, *,
                   checkpoints: CheckpointPolicy | None = None) -> RunResult:
    """Run ``trainer``'s command for ``spec`` and return the run's result (failed with the
    reason when the script fails). A stop request (SIGTERM, Ctrl-C) is passed on as SIGTERM;
    the script gets ``STOP_GRACE_S`` seconds to checkpoint, then ``Interrupted`` is raised."""
    folder = run_folder(spec, checkpoints)
    try:
        return _attempt(spec, trainer, progress, folder, checkpoints)
    finally:
        if checkpoints is None:  # nothing resumes from a temporary folder
            shutil.rmtree(folder.parent, ignore_errors=True)


def _attempt(spec: RunSpec, trainer: TrainCommand, progress: ProgressSink, folder: Path,
             checkpoints: CheckpointPolicy | None) -> RunResult:
    result_file, spec_file = folder / "result.json", folder / "spec.json"
    (folder / "checkpoints").mkdir(parents=True, exist_ok=True)
    failed = RunResult(run_id=spec.run_id, status="failed", device="external")
    progress(spec.run_id, 0, spec.tokens, math.nan)
    started = time.perf_counter()
    if not result_file.exists():  # else: the script finished before the driver died; read it
        spec_file.write_text(json.dumps({**spec.to_dict(), "checkpoint_dir": str(folder / "checkpoints"),
                                         "result_file": str(result_file)}, indent=1))
        env = {**os.environ, "PATH": script_path(), **trainer.env, **{k: str(getattr(spec, f)) for k, f in ENV.items()},
               "FLOPS_FIT_SPEC": str(spec_file), "FLOPS_FIT_CHECKPOINT_DIR": str(folder / "checkpoints"),
               "FLOPS_FIT_RESULT": str(result_file)}
        logs = Path(trainer.logs_dir) if trainer.logs_dir else folder
        logs.mkdir(parents=True, exist_ok=True)
        log = logs / f"{spec.run_id}.log"
        with open(log, "ab") as out:
            try:
                process = subprocess.Popen(
                    list(trainer.command), cwd=trainer.workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                    preexec_fn=_kill_with_parent if sys.platform == "linux" else None)
            except OSError as exc:
                failed.error = f"crash: cannot start {trainer.command[0]!r}: {exc}"
                return failed
            try:
                failed.error = _wait(process, trainer, spec)
            finally:
                if process.poll() is None:
                    _end(process, grace=0)
        if failed.error:
            failed.error += f" ({_log(log)})"
            failed.timings["total_s"] = time.perf_counter() - started
            return failed
        if not result_file.exists():
            failed.error = f"no result: the script exited 0 but wrote no {result_file} ({_log(log)})"
            return failed
    try:
        data = read_result(result_file, spec, trainer.token_tolerance)
    except ValueError as exc:
        result_file.replace(result_file.with_name("result.rejected.json"))  # a retry trains again
        failed.error = str(exc)
        return failed
    result = RunResult(
        run_id=spec.run_id, status="done", loss=float(data["loss"]), tokens=data["tokens"],
        flops=data["tokens"] * spec.flops_per_unit, steps=int(data.get("steps", spec.steps)),
        curve=[[float(t), float(v)] for t, v in data.get("curve", [])], device=str(data.get("device", "external")),
        bpb=float(data.get("bpb", math.nan)), top1_error=float(data.get("top1_error", math.nan)),
        unique_tokens=spec.unique_tokens,
        epochs=data["tokens"] / spec.unique_tokens if spec.unique_tokens else math.nan,
        timings={"total_s": time.perf_counter() - started})
    progress(spec.run_id, result.tokens, spec.tokens, result.loss)
    if checkpoints is not None:
        save_result(checkpoints.run_dir(spec.run_id), result)
    return result


def _wait(process: subprocess.Popen, trainer: TrainCommand, spec: RunSpec) -> str:
    """Wait for the script; "" when it exited 0, else why the run failed."""
    deadline = None if trainer.time_limit is None else time.monotonic() + trainer.time_limit
    while process.poll() is None:
        if stop_requested() is not None:
            _end(process, STOP_GRACE_S)
            raise Interrupted(stop_requested(), f"run {spec.run_id} stopped: its script was sent SIGTERM")
        if deadline is not None and time.monotonic() > deadline:
            _end(process, grace=0)
            return f"hang: the script was still running after its time_limit of {trainer.time_limit:g} s; killed"
        time.sleep(POLL_S)
    code = process.returncode
    if code < 0:
        return f"crash: the script was killed by signal {-code}"
    return "" if code == 0 else f"crash: the script exited with status {code}"
