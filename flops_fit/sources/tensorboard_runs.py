"""TensorBoard runs, read with TensorBoard's ``EventAccumulator``: each folder holding event files
(``events.out.tfevents.*``) is a run, its id the folder's path under the one given.

Scalars give the curves (each tag's history) and the final metrics (each tag's last value).
Parameters come from the hparams plugin (``SummaryWriter.add_hparams``, which writes into a
subfolder of the run: merged into it) or from a ``params.json`` text summary (what flops-fit's
own TensorBoard tracking writes). Event files hold no status: every run counts as finished.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flops_fit.sources.base import TrackedRun, flat

EVENTS = "events.out.tfevents.*"


def run_folders(root: Path) -> list[Path]:
    """The folders under ``root`` with event files, an add_hparams subfolder left to its run."""
    folders = sorted({p.parent for p in root.rglob(EVENTS)})
    return [f for f in folders if not any(f != g and g in f.parents for g in folders)]


def _accumulator(folder: Path) -> Any:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def _hparams(acc: Any) -> dict[str, Any]:
    from tensorboard.plugins.hparams import plugin_data_pb2

    out: dict[str, Any] = {}
    try:
        contents = acc.PluginTagToContent("hparams").values()
    except KeyError:  # no hparams plugin data in this folder
        return out
    for content in contents:
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if data.HasField("session_start_info"):
            for name, value in data.session_start_info.hparams.items():
                kind = value.WhichOneof("kind")
                out[name] = getattr(value, kind) if kind else None
    return out


def _text_params(acc: Any) -> dict[str, Any]:
    from tensorboard.util import tensor_util

    for tag in acc.Tags().get("tensors", []):
        if tag.split("/")[0] == "params.json":
            text = tensor_util.make_ndarray(acc.Tensors(tag)[0].tensor_proto).item()
            text = text.decode() if isinstance(text, bytes) else str(text)
            try:
                return flat(json.loads("\n".join(line.removeprefix("    ") for line in text.splitlines())))
            except json.JSONDecodeError:
                return {}
    return {}


def read_run(root: Path, folder: Path) -> TrackedRun:
    """The run in ``folder`` with its subfolders' events. A tag logged in more than one of them (``loss``
    by a ``train/`` and an ``eval/`` writer, as TensorBoard shows them apart) is named with its subfolder
    (``train/loss``, ``eval/loss``): one series of both would mix training and held-out losses."""
    params: dict[str, Any] = {}
    parts: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for part in [folder] + sorted({p.parent for p in folder.rglob(EVENTS)} - {folder}):
        acc = _accumulator(part)
        params.update(_text_params(acc))
        params.update(_hparams(acc))
        parts[part.relative_to(folder).as_posix()] = {
            tag: [(float(e.step), float(e.value)) for e in acc.Scalars(tag)] for tag in acc.Tags().get("scalars", [])}
    tags = [tag for scalars in parts.values() for tag in scalars]
    series: dict[str, list[tuple[float, float]]] = {}
    for sub, scalars in parts.items():
        for tag, points in scalars.items():
            name = f"{sub}/{tag}" if sub != "." and tags.count(tag) > 1 else tag
            series.setdefault(name, []).extend(points)
    metrics = {tag: max(points)[1] for tag, points in series.items() if points}  # the value at the last step
    run_id = folder.relative_to(root).as_posix() if folder != root else folder.name
    return TrackedRun(run_id, None, params, metrics, series)


def read_logs(root: Path) -> list[TrackedRun]:
    return [read_run(root, f) for f in run_folders(root)]
