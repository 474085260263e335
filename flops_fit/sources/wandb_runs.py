"""Weights & Biases runs: offline run folders (``wandb/offline-run-*/run-*.wandb``, what
``wandb.init(mode="offline")`` writes) and the runs table the W&B web page exports as CSV.

An offline run's file is wandb's transaction log: a 7-byte header (":W&B", magic, version),
then LevelDB-style log records (32 KiB blocks; each chunk a 7-byte header: CRC, length, type
full / first / middle / last) whose payloads are wandb's own ``Record`` protobufs, decoded
with ``wandb.proto.wandb_internal_pb2``. The config, summary and history records and the
exit code give the run's parameters, final metrics, curves and status. wandb 0.31 ships no
Python reader for this file (its reader is in the Go service), so the framing is read here;
the records are the library's.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pandas as pd

from flops_fit.errors import FitInputError
from flops_fit.sources.base import TrackedRun, flat, unique_names

HEADER = b":W&B"
BLOCK = 32768
CHUNK = struct.Struct("<IHB")  # crc32, length, type
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
EXPORT_COLUMNS = ("Name", "State")  # the W&B runs table's CSV export names runs and states so


def run_files(folder: Path) -> list[Path]:
    """The offline run files under ``folder`` (a run folder, a ``wandb`` folder or above it), each
    once (wandb's ``latest-run`` link names one of them again)."""
    for pattern in ("run-*.wandb", "*/run-*.wandb", "wandb/*/run-*.wandb"):
        found = sorted(p for p in folder.glob(pattern) if not p.parent.is_symlink() or p.parent == folder)
        if found:
            return found
    return []


def _payloads(path: Path) -> list[bytes]:
    data = path.read_bytes()
    if not data.startswith(HEADER) or len(data) < 7:
        raise FitInputError(f"{path}: not a W&B run file (no ':W&B' header); give the run folder wandb wrote")
    out, pos, parts = [], 7, b""
    while pos + CHUNK.size <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK.size:
            pos += left
            continue
        _, length, kind = CHUNK.unpack_from(data, pos)
        pos += CHUNK.size
        if kind == 0 and length == 0:  # zero padding at the end of a block
            pos += left - CHUNK.size
            continue
        if pos + length > len(data):
            break  # a record still being written: the run is live, and reads as running
        chunk = data[pos:pos + length]
        pos += length
        parts = chunk if kind in (FULL, FIRST) else parts + chunk
        if kind in (FULL, LAST):
            out.append(parts)
    return out


def _key(item: Any) -> str:
    return ".".join(item.nested_key) if item.nested_key else item.key


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _number(value: Any) -> Any:
    try:
        return float(value)
    except ValueError:
        return value


def read_file(path: Path) -> TrackedRun:
    """One offline run from its ``run-*.wandb`` file."""
    from wandb.proto import wandb_internal_pb2 as pb

    config: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    series: dict[str, list[tuple[float, float]]] = {}
    run_id, status, shown, project = path.stem.removeprefix("run-"), "running", None, None
    for payload in _payloads(path):
        record = pb.Record()
        try:
            record.ParseFromString(payload)
        except Exception as exc:  # protobuf's DecodeError: the file is cut or not wandb's
            raise FitInputError(f"{path}: unreadable W&B record ({exc}); is the run file complete?") from None
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run_id = record.run.run_id or run_id
            shown = record.run.display_name or shown  # wandb.init(name=...); offline, none unless given
            project = record.run.project or project
            config.update({_key(u): _value(u.value_json) for u in record.run.config.update})
        elif kind == "config":
            config.update({_key(u): _value(u.value_json) for u in record.config.update})
        elif kind == "summary":
            summary.update({_key(u): _value(u.value_json) for u in record.summary.update})
        elif kind == "history":
            items = {_key(i): _value(i.value_json) for i in record.history.item}
            step = items.get("_step", record.history.step.num)
            for name, value in items.items():
                if not name.startswith("_") and isinstance(value, (int, float)):
                    series.setdefault(name, []).append((float(step), float(value)))
        elif kind == "exit":
            status = "finished" if record.exit.exit_code == 0 else f"failed (exit code {record.exit.exit_code})"
    params = {k: v for k, v in flat({k: (v.get("value", v) if isinstance(v, dict) and "value" in v else v)
                                     for k, v in config.items() if not k.startswith("_")}).items()}
    # a number logged as text ("3.21") reads as the number, as the runs table's CSV export has it; other text is
    # kept for the fit to refuse by name; a non-finite loss is kept too: the run reads as unscored, or diverged
    metrics = {k: _number(v) for k, v in summary.items() if not k.startswith("_")
               and (isinstance(v, (int, float, str)) and not isinstance(v, bool))}
    return TrackedRun(run_id, status, params, metrics, series, shown, project)


def read_offline(folder: Path) -> list[TrackedRun]:
    """Every offline run under ``folder`` (or the one run file ``folder``). A run resumed offline (the same
    run id, ``resume=...``) writes a new folder each attempt: its files are one run, read in the order
    written (folders are named by start time), the last attempt's status its status. A run's id is its name
    (``wandb.init(name=...)``, as W&B's pages and its CSV export show it), or W&B's id where it has none."""
    files = [folder] if folder.is_file() else run_files(folder)
    runs: dict[tuple[str | None, str], TrackedRun] = {}
    for path in files:
        run = read_file(path)
        first = runs.setdefault((run.group, run.run_id), run)
        if first is not run:
            first.params.update(run.params)
            first.metrics.update(run.metrics)
            for name, points in run.series.items():  # a step the attempt logged again: its value
                first.series[name] = sorted({**dict(first.series.get(name, [])), **dict(points)}.items())
            first.status = run.status
            first.name = run.name or first.name
    merged = list(runs.values())
    if len({r.group for r in merged}) > 1:  # one wandb/ folder holds every project a script logged to
        for run in merged:
            run.params.setdefault("project", run.group)
    for run, name in zip(merged, unique_names([r.name or r.run_id for r in merged], [r.run_id for r in merged]),
                         strict=True):
        run.run_id = name
    return merged


def is_export(frame: pd.DataFrame) -> bool:
    return all(c in frame for c in EXPORT_COLUMNS)


def from_export(frame: pd.DataFrame) -> pd.DataFrame:
    """The W&B runs table's CSV: its ``Name`` is the run id and its ``State`` the status, unless the
    table has those columns of its own."""
    out = frame.copy()
    if "run_id" not in out:
        names = out["Name"].astype(str).tolist()
        own = out["ID"].astype(str).tolist() if "ID" in out else [f"row {i + 1}" for i in range(len(out))]
        out["run_id"] = unique_names(names, own)
    if "status" not in out:
        out["status"] = out["State"].astype(str).str.lower()
    return out
