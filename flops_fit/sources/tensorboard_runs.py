"""TensorBoard runs, read with TensorBoard's ``EventAccumulator``: each folder holding event files
(``events.out.tfevents.*``) is a run, its id the folder's path under the one given.

Scalars give the curves (each tag's history) and the final metrics (each tag's last value).
Parameters come from the hparams plugin (``SummaryWriter.add_hparams``, which writes into a
subfolder of the run: merged into it) or from a ``params.json`` text summary (what flops-fit's
own TensorBoard tracking writes). Event files hold no status: every run counts as finished.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from flops_fit.sources.base import TrackedRun, flat

EVENTS = "events.out.tfevents.*"


# add_hparams' own subfolder (its default run_name, ``time.time()``): part of the run it is in
HPARAMS_FOLDER = re.compile(r"\d+(\.\d+)?")
# one run's writers for its training and held-out series (Keras's ``TensorBoard`` callback writes ``train/`` and
# ``validation/`` only, none into the run's folder): the folder above them is the run
WRITERS = frozenset({"train", "validation", "eval"})


def run_folders(root: Path) -> list[Path]:
    """The folders under ``root`` with event files that are runs: each outermost one, and below it the
    folders with parameters of their own where there are several, or where it has its own too (runs
    beside a folder whose writer logged: a summary, or a run); the rest (an add_hparams subfolder, a
    run's train/ and eval/ writers, its one parameter set logged apart) belong to the run they are in.
    An outer folder without parameters holding such runs is no run (a summary written beside them). A
    ``train/``, ``validation/`` or ``eval/`` writer in a folder without events of its own (Keras's layout) is
    part of the run in that folder."""
    events = {p.parent for p in root.rglob(EVENTS)}
    folders = sorted({f.parent if f.name in WRITERS and f != root and f.parent not in events else f for f in events})
    outer = [f for f in folders if not any(f != g and g in f.parents for g in folders)]
    if len(outer) == len(folders):  # nothing nested: no event file read
        return folders
    nested = [f for f in folders if f not in outer and not HPARAMS_FOLDER.fullmatch(f.name) and _has_params(f, folders)]
    runs = []
    for folder in outer:
        inner = [g for g in nested if folder in g.parents]
        own = bool(inner) and _has_params(folder, folders)
        if len(inner) == 1 and not own:  # the run's one parameter set, in a subfolder (add_hparams(run_name=...))
            inner = []
        runs += [*inner, *([folder] if own or not inner else [])]
    return sorted(runs)


def _has_params(folder: Path, folders: list[Path]) -> bool:
    """Whether ``folder``'s own events (or its add_hparams subfolder's) hold a run's parameters."""
    parts = [folder, *(g for g in folders if g.parent == folder and HPARAMS_FOLDER.fullmatch(g.name))]
    return any(_text_params(acc) or _hparams(acc) for acc in map(_accumulator, parts))


def _parts(folder: Path, runs: list[Path]) -> list[Path]:
    """The folders with events that make up the run in ``folder``: it, and those below it that are
    no run of their own nor inside one."""
    below = sorted({p.parent for p in folder.rglob(EVENTS)} - {folder})
    inner = [r for r in runs if folder in r.parents]
    return [folder, *(p for p in below if not any(p == r or r in p.parents for r in inner))]


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


def read_run(root: Path, folder: Path, runs: list[Path] = ()) -> TrackedRun:
    """The run in ``folder`` with its subfolders' events. A tag logged in more than one of them (``loss``
    by a ``train/`` and an ``eval/`` writer, as TensorBoard shows them apart) is named with its subfolder
    (``train/loss``, ``eval/loss``): one series of both would mix training and held-out losses. ``runs``:
    the other runs' folders, some perhaps below this one (``run_folders``), whose events are not its own."""
    params: dict[str, Any] = {}
    parts: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for part in _parts(folder, list(runs)):
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
    """Every run under ``root``. Runs in several folders of their own below it (``logs/project-a/run1``,
    ``logs/project-b/run1``: two projects, or two settings, logged side by side) have that folder as a column
    ``folder``, as MLflow's runs have their experiment: the fit's note names it, and ``where`` selects one."""
    folders = run_folders(root)
    runs = [read_run(root, f, folders) for f in folders]
    parts = [f.relative_to(root).parts for f in folders]
    if all(len(p) > 1 for p in parts) and len({p[0] for p in parts}) > 1:
        for run, path in zip(runs, parts, strict=True):
            run.params.setdefault("folder", path[0])
    return runs
