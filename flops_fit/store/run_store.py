"""RunStore: the sweep's durable record, an SQLite file ``runs.sqlite`` in its output folder.

WAL journal, one transaction per write: a process killed at any instant leaves every
committed run intact and no half-written row. One driver process writes; readers (the
fitter, ``flops-fit status``) may read while it runs.

An existing file is read first through a read-only connection (``check_store``): a damaged
file, or an SQLite file that is not a store, is refused with a ``StoreError`` before anything
writes into it, so whatever it still holds stays as it was.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from flops_fit._version import __version__
from flops_fit.errors import StoreError
from flops_fit.store.runs import RunResult, RunSpec

STORE_NAME = "runs.sqlite"
FINAL = ("done", "failed")  # statuses that resuming never repeats
# The store's meta: the settings a fit of the folder was made with by flops-fit itself (``flops-fit demo``:
# method, holdout, bootstrap), so that ``fit`` and ``report`` on the folder answer as it did (``cli.fit``).
FIT_META = "fit"
# A run's spec fields that give its learning rate at every step (``sweeps.schedules``).
SCHEDULE_FIELDS = ("schedule", "steps", "warmup_steps", "cooldown_start", "cooldown_shape", "min_lr_ratio",
                   "batch_size", "seq_len")
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    position INTEGER NOT NULL,
    model TEXT NOT NULL,
    size INTEGER NOT NULL,
    params INTEGER NOT NULL,
    budget REAL NOT NULL,
    tokens_planned INTEGER NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    loss REAL,
    tokens INTEGER,
    flops REAL,
    steps INTEGER,
    curve TEXT,
    error TEXT,
    timings TEXT,
    device TEXT,
    started REAL,
    finished REAL
);
"""
# Columns added after the first release: (name, definition). A store written before them
# gets them on open (ALTER TABLE ADD COLUMN), so old sweeps stay readable and resumable.
ADDED_COLUMNS = (
    ("steps_trained", "INTEGER NOT NULL DEFAULT 0"),  # optimizer steps over all attempts, lost ones included
    ("bpb", "REAL"),  # held-out bits per byte (text runs whose dataset counts bytes)
    ("top1_error", "REAL"),  # held-out top-1 error (image classification runs)
    ("lr_source", "TEXT"),  # where the run's learning rate came from (RunSpec.lr_source)
    ("epochs", "REAL"),  # tokens trained / the dataset's unique tokens (meta unique_tokens), when known
)


def _number(value: float) -> float | None:
    """NULL for NaN: the store keeps no NaN."""
    return None if math.isnan(value) else value


@cache
def _schema_columns() -> dict[str, frozenset[str]]:
    """Each table of ``SCHEMA`` and its columns (the added ones aside: opening adds those)."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(SCHEMA)
        return {table: frozenset(row[1] for row in db.execute("SELECT * FROM pragma_table_info(?)", (table,)))
                for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        db.close()


def read_only(path: Path) -> sqlite3.Connection:
    """A connection that only reads the store at ``path``. A store no process has open (its WAL merged on
    the last close: no ``-wal`` file) is opened as immutable, so reading it creates no side file: a plain
    read-only connection made ``-wal`` and ``-shm`` (and left them, or failed where this user may not write
    the folder). A store in use (a ``-wal`` file: a sweep writing it, or one killed) is read through its
    WAL, which holds what the writer committed. (An immutable reader does not see a writer that opens
    the store after it: status and fit read in milliseconds, then close.)"""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    if not any(path.with_name(path.name + side).exists() for side in ("-wal", "-journal")):
        uri += "&immutable=1"
    return sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None)


JSON_COLUMNS = {"meta": ("value",), "runs": ("spec", "curve", "timings")}


def _garbled_text(db: sqlite3.Connection, tables: dict[str, set[str]]) -> str | None:
    """Where a store's text is no longer what flops-fit wrote (bytes that are no UTF-8, JSON that does not
    parse), or None: ``quick_check`` checks SQLite's pages, not the text in them, and such a value was a
    traceback in every command that read it."""
    db.text_factory = bytes
    try:
        for table, key, label in (("meta", "key", "the entry {}"), ("runs", "run_id", "run {}")):
            if key not in tables.get(table, ()):
                continue
            columns = sorted(tables[table])
            for row in db.execute(f"SELECT {', '.join(columns)} FROM {table}"):  # noqa: S608 - the schema's names
                values = dict(zip(columns, row, strict=True))
                name = label.format(bytes(values[key] or b"").decode("utf-8", "replace"))
                for column, value in values.items():
                    if not isinstance(value, bytes):
                        continue
                    try:
                        text = value.decode("utf-8")
                        if column in JSON_COLUMNS[table]:
                            json.loads(text)
                    except UnicodeDecodeError:
                        return f"{name}: its {column} holds bytes that are no text"
                    except ValueError:
                        return f"{name}: its {column} is no longer the JSON flops-fit wrote"
    finally:
        db.text_factory = str
    return None


def check_store(path: Path) -> set[str]:
    """The table names of the store file ``path``, read without writing a byte into it.

    Raises ``StoreError`` for a file SQLite cannot read (random bytes, a truncated or
    otherwise damaged file) and for an SQLite file that is not a flops-fit store; an empty
    SQLite file (no tables) passes, for ``RunStore(create=True)`` to fill. The read-only
    connection may create the WAL's side files; a refused file is left without them.
    """
    sides = [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]
    new_sides = [side for side in sides if not side.exists()]
    try:
        db = read_only(path)
        try:
            problems = [row[0] for row in db.execute("PRAGMA quick_check")]
            tables = {name: {row[1] for row in db.execute("SELECT * FROM pragma_table_info(?)", (name,))}
                      for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if problems == ["ok"] and (garbled := _garbled_text(db, tables)):
                problems = [garbled]
        finally:
            db.close()
    except sqlite3.OperationalError as exc:  # locked past the timeout, no permission to read
        raise StoreError(f"cannot read the store {path} ({exc}): check that it is readable and that no other "
                         "program holds it locked, then try again") from None
    except sqlite3.DatabaseError as exc:  # not a database, malformed pages
        problems, tables = [str(exc)], {}
    except UnicodeDecodeError as exc:  # SQLite's own message quotes garbled bytes (a damaged schema's names)
        problems, tables = [bytes(exc.object).decode("utf-8", "replace")], {}
    wrong = [f"no {table} table" if table not in tables else f"{table} lacks {', '.join(sorted(columns - tables[table]))}"
             for table, columns in _schema_columns().items() if not columns <= tables.get(table, set())]
    if problems == ["ok"] and (not tables or not wrong):
        return set(tables)
    for side in new_sides:
        side.unlink(missing_ok=True)
    untouched = "flops-fit wrote nothing into it"
    if problems != ["ok"]:
        raise StoreError(f"the store {path} is damaged ({' '.join(problems[0].split())[:200]}): restore it from a "
                         f"backup, or move it away and run the sweep again into a new --out folder; {untouched}")
    raise StoreError(f"{path} is an SQLite file but not a flops-fit store ({'; '.join(wrong)}): give a sweep's "
                     f"output folder, or move the file away; {untouched}")


def cannot_write(path: Path, exc: sqlite3.OperationalError) -> StoreError | None:
    """The one line for a store this user may not write (a read-only folder or file), or None for
    another SQLite error: a sweep resumed there, or a result recorded into it, fails on its first
    write with nothing changed."""
    if "disk is full" in str(exc) or "disk I/O error" in str(exc):  # a full disk, a quota, a file-size limit
        return StoreError(f"cannot write the store {path} ({exc}): free space on its disk (or lift the quota or "
                          "file-size limit that stopped the write), then go on (a sweep: the same command with --resume); "
                          "what it held before is kept, nothing was half-written")
    if "readonly" not in str(exc) and "unable to open" not in str(exc):
        return None
    return StoreError(f"cannot write the store {path} ({exc}): make {path.parent} and its files writable for this "
                      "user, or copy the folder somewhere writable and go on there; nothing in it was changed")


def _not_a_file(out_dir: Path, create: bool = True) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise StoreError(f"{out_dir} is an existing file, not a folder: choose a folder for the sweep's store" if create
                         else f"{out_dir} is a file, not a sweep's output folder: give the folder the sweep wrote (it "
                         f"holds {STORE_NAME})")


def check_folder(out_dir: Path) -> Path:
    """``out_dir`` unless it names an existing file (a store needs a folder) or holds a
    store that ``check_store`` refuses (StoreError)."""
    _not_a_file(out_dir)
    if (out_dir / STORE_NAME).exists():
        check_store(out_dir / STORE_NAME)
    return out_dir


def chosen_runs(design: dict[str, Any]) -> set[str]:
    """The run ids an adaptive sweep's stored design (meta ``adaptive``) has chosen so far (its batches'): the
    rest of its plan stays pending by design."""
    return {run_id for batch in design.get("run_ids", []) for run_id in batch}


SHORT_ID = 8  # the run ids status, progress and failure summaries print


def planned_run(runs: list[RunSpec], run_id: str, out_dir: str | Path) -> RunSpec:
    """The planned run named by ``run_id`` or a unique prefix of it (of at least the ``SHORT_ID``
    characters printed), so an id copied from a summary works; StoreError, one line, naming the
    matches of an ambiguous prefix or how to list the ids."""
    exact = next((r for r in runs if r.run_id == run_id), None)
    if exact is not None:
        return exact
    matches = [r for r in runs if len(run_id) >= SHORT_ID and r.run_id.startswith(run_id)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise StoreError(f"run id {run_id!r} is ambiguous in {out_dir}: it starts "
                         f"{', '.join(r.run_id for r in matches)}; give more of the id")
    short = (f" (a prefix needs at least {SHORT_ID} characters)"
             if len(run_id) < SHORT_ID and any(r.run_id.startswith(run_id) for r in runs) else "")
    raise StoreError(f"run {run_id!r} is not in the plan stored in {out_dir}{short}: `flops-fit status {out_dir} "
                     "--json` lists its run ids")


class RunStore:
    """Open (``create=True``: create) the store in ``out_dir``; an existing file is checked
    (``check_store``) before anything writes into it. ``reading=True``, for a command that only reads
    (status, fit, report): a read-only connection (``read_only``) that leaves the folder and its files as
    they were, where a writer's connection made and removed the WAL's files (the folder's time changed)."""

    def __init__(self, out_dir: str | Path, *, create: bool = False, reading: bool = False) -> None:
        self.dir = Path(out_dir)
        if not create and self.dir.name == STORE_NAME and self.dir.is_file():  # the store named, not its folder
            self.dir = self.dir.parent
        self.path = self.dir / STORE_NAME
        _not_a_file(self.dir, create)
        if self.path.exists():
            if not check_store(self.path) and not create:
                raise StoreError(f"{self.path} holds no sweep yet (an empty store): run a sweep with --out "
                                 f"{self.dir} first")
        elif not create:
            raise StoreError(f"no sweep store at {self.path}: run a sweep with --out {self.dir} first")
        else:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot make the sweep's folder {self.dir} ({exc.strerror}): choose an --out folder "
                                 "this user may write") from None
        writable = os.access(self.dir, os.W_OK) and os.access(self.path, os.W_OK)
        if self.path.exists() and (reading or not writable):
            self.db = read_only(self.path)  # readers read it as it is; the first write is refused (``_tx``)
            have = {row[1] for row in self.db.execute("PRAGMA table_info(runs)")}
            missing = [name for name, _ in ADDED_COLUMNS if name not in have]
            if not missing:
                return
            self.db.close()
            if not writable:
                raise StoreError(f"{self.path} was written by an older flops-fit (no {', '.join(missing)}) and this "
                                 "user may not write it, so it cannot be brought up to date: copy the folder somewhere "
                                 "writable and read it there")
            # an older store this user may write is brought up to date once (below), a reader's open too
        try:
            self.db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        except sqlite3.OperationalError as exc:  # a new store in a folder this user may not write
            raise cannot_write(self.path, exc) or exc from None
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        with self._tx():
            for statement in filter(str.strip, SCHEMA.split(";")):
                self.db.execute(statement)
            self._migrate()

    def _migrate(self) -> None:
        """Add the columns a store from an older flops-fit lacks (inside the open transaction)."""
        have = {row[1] for row in self.db.execute("PRAGMA table_info(runs)")}
        for name, definition in ADDED_COLUMNS:
            if name not in have:
                self.db.execute(f"ALTER TABLE runs ADD COLUMN {name} {definition}")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[None]:
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:  # a store opened read-only: this user may not write it
            raise (cannot_write(self.path, exc) or exc) from None
        try:
            yield
        except sqlite3.OperationalError as exc:
            self._rollback()
            refused = cannot_write(self.path, exc)
            if refused is None:
                raise
            raise refused from None
        except BaseException:
            self._rollback()
            raise
        try:
            self.db.execute("COMMIT")
        except sqlite3.OperationalError as exc:  # a full disk refuses the commit itself: nothing of it is kept
            self._rollback()
            raise (cannot_write(self.path, exc) or exc) from None

    def _rollback(self) -> None:
        """Undo the open transaction; one SQLite already undid (after a failed write) needs nothing, and a
        ROLLBACK that fails too (the disk failing) must not hide the first error behind a second traceback."""
        if self.db.in_transaction:
            try:
                self.db.execute("ROLLBACK")
            except sqlite3.OperationalError:
                pass

    # ------------------------------------------------------------------ meta
    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def set_meta(self, **values: Any) -> None:
        with self._tx():
            self._put_meta(values)

    def _put_meta(self, values: dict[str, Any]) -> None:
        """Write meta rows inside the caller's transaction."""
        for key, value in values.items():
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value, default=str)))

    # ------------------------------------------------------------------ runs
    def add_plan(self, plan: Any, **meta: Any) -> None:
        """Record ``plan`` (anything with ``runs`` and ``to_dict()``) and its runs (pending)
        with ``meta`` (spec, versions, ...), atomically. A plan that grows the recorded one (a sweep
        extended, ``sweeps.extend``) adds its new runs; the stored ones keep their rows, moved to
        their place in the new plan's order."""
        with self._tx():
            self._put_meta({"plan": plan.to_dict(), **meta})
            for position, run in enumerate(plan.runs):
                self.db.execute(
                    "INSERT INTO runs (run_id, position, model, size, params, budget, tokens_planned, spec,"
                    " lr_source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT(run_id) DO UPDATE SET position = excluded.position",
                    (run.run_id, position, run.model, run.size, run.params, run.budget, run.tokens,
                     json.dumps(run.to_dict()), run.lr_source),
                )
        self._merge()

    def planned_runs(self) -> list[RunSpec]:
        """The recorded plan's runs, in plan order (empty before ``add_plan``). A run this release
        cannot read (a newer flops-fit's fields, a spec edited by hand) is a ``StoreError`` naming
        the release that wrote the store, not a traceback."""
        data = self.get_meta("plan")
        try:
            return [RunSpec.from_dict(r) for r in data["runs"]] if data else []
        except (TypeError, ValueError, KeyError) as exc:
            wrote = (self.get_meta("versions") or {}).get("flops-fit", "an unknown release")
            raise StoreError(f"the plan in {self.path} cannot be read by flops-fit {__version__} ({exc}); the store "
                             f"was written by flops-fit {wrote}: read and resume it with that release, or run the "
                             "sweep again into a new --out folder; its runs were left as they are") from None

    def statuses(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT run_id, status FROM runs"))

    def unfinished(self, plan: Any) -> list[RunSpec]:
        """The plan's runs without a final result, in plan order."""
        status = self.statuses()
        return [r for r in plan.runs if status.get(r.run_id) not in FINAL]

    def mark_running(self, run_id: str) -> None:
        """A new attempt of a run without a final result (a start heard late, its result stored, is none)."""
        with self._tx():
            self.db.execute(
                "UPDATE runs SET status = 'running', attempts = attempts + 1, started = ? WHERE run_id = ?"
                " AND status NOT IN ('done', 'failed')",
                (time.time(), run_id),
            )

    def add_steps_trained(self, run_id: str, steps: int) -> None:
        """Count ``steps`` more optimizer steps trained on a run (whether or not they survive)."""
        with self._tx():
            self.db.execute("UPDATE runs SET steps_trained = steps_trained + ? WHERE run_id = ?", (steps, run_id))

    def accounting(self) -> list[dict[str, Any]]:
        """Per run, in plan order: what it cost. ``steps`` is the finished result's step count
        (None until it finishes), ``steps_trained`` every step trained over all ``attempts``,
        lost ones (trained after a run's last checkpoint, then killed) included; ``steps_reused``
        the steps a WSD branch took over from its family's stable phase (trained, and counted, once
        for the family), so a finished run lost ``steps_trained - (steps - steps_reused)``. With them
        what the status table shows of each run: parameters, planned tokens, learning rate, error."""
        rows = self.db.execute(
            "SELECT run_id, budget, size, status, loss, steps, spec, steps_trained, attempts, timings, params,"
            " tokens_planned, error FROM runs ORDER BY position"
        ).fetchall()
        return [
            {"run_id": r[0], "budget": r[1], "size": r[2], "status": r[3], "loss": r[4],
             "steps": r[5] if r[3] in FINAL else None, "steps_planned": spec["steps"],
             "steps_trained": r[7], "attempts": r[8],
             "steps_reused": int(json.loads(r[9] or "{}").get("stable_steps_reused", 0)) if r[3] in FINAL else 0,
             "params": r[10], "tokens_planned": r[11], "lr": spec.get("lr"), "error": r[12]}
            for r in rows for spec in [json.loads(r[6])]
        ]

    def timeline(self) -> list[dict[str, Any]]:
        """Per run, in plan order: its status, steps trained (all attempts), when its latest attempt
        started and its result was stored, and the seconds it took: what a reader needs to say how
        long a sweep another process is training has left."""
        rows = self.db.execute(
            "SELECT run_id, status, steps_trained, started, finished, timings FROM runs ORDER BY position").fetchall()
        return [{"run_id": r[0], "status": r[1], "steps_trained": r[2], "started": r[3], "finished": r[4],
                 "seconds": json.loads(r[5] or "{}").get("total_s")} for r in rows]

    def reset(self, run_ids: list[str]) -> None:
        """Put runs back to pending (e.g. failed ones to retry)."""
        with self._tx():
            self.db.executemany("UPDATE runs SET status = 'pending' WHERE run_id = ?", [(r,) for r in run_ids])

    def record(self, result: RunResult, *, once: bool = False, replacing_failed: bool = False) -> None:
        """Store a run's final result in one transaction (``once``: only if it has none yet;
        ``replacing_failed``: or only a failed one, which it replaces)."""
        with self._tx():
            cursor = self.db.execute(
                "UPDATE runs SET status = ?, loss = ?, tokens = ?, flops = ?, steps = ?, curve = ?, error = ?,"
                " timings = ?, device = ?, finished = ?, bpb = ?, top1_error = ?, epochs = ? WHERE run_id = ?"
                + ((" AND status != 'done'" if replacing_failed else " AND status NOT IN ('done', 'failed')")
                   if once else ""),
                (result.status, _number(result.loss), result.tokens, result.flops,
                 result.steps, json.dumps(result.curve), result.error, json.dumps(result.timings),
                 result.device, time.time(), _number(result.bpb), _number(result.top1_error),
                 _number(result.epochs), result.run_id),
            )
            if cursor.rowcount != 1:
                raise StoreError(f"run {result.run_id} already has a result" if once else
                                 f"run {result.run_id} is not in this sweep's plan")
            if result.unique_tokens:  # the sweep's data budget, as its dataset reported it
                self._put_meta({"unique_tokens": int(result.unique_tokens)})
        self._merge()

    def _merge(self) -> None:
        """Copy what the WAL holds into the store file itself (a passive checkpoint: readers are not waited
        for), so that a copy of ``runs.sqlite`` alone, or the file after its ``-wal`` was lost, holds every plan
        and result stored: after a killed driver the file alone held none of them, and a sweep resumed without
        the ``-wal`` planned and trained every run again. A failure leaves the WAL holding them, as before."""
        try:
            self.db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.OperationalError:
            pass

    def counts(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT status, COUNT(*) FROM runs GROUP BY status"))

    def runs_frame(self, include_failed: bool = True, include_unfinished: bool = False):
        """One row per finished run: run_id, model, size, params, tokens, flops, budget, loss,
        status, curve, plus error, steps, tokens_planned, lr (and lr_source: where it came from; ``schedule``: the
        fields that set its learning rate at each step, for laws of the whole curve), timings, bpb (held-out bits per
        byte), top1_error (held-out top-1 error of image classifiers), epochs (tokens trained / unique tokens), the
        other scales
        (embedding_params, non_embedding_flops_per_unit) and model_config. Failed runs have loss NaN, runs without bits per byte bpb NaN;
        ``include_failed=False`` leaves failed runs out; ``include_unfinished`` adds the runs not trained yet or
        cut short (pending, running; loss NaN), for a fit to say that it read a sweep still under way."""
        import pandas as pd

        wanted = ("done", "failed") if include_failed else ("done",)
        wanted += ("pending", "running") if include_unfinished else ()
        rows = self.db.execute(
            "SELECT run_id, model, size, params, tokens, flops, budget, loss, status, curve, error, steps,"
            f" tokens_planned, spec, timings, bpb, top1_error, lr_source, epochs FROM runs WHERE status IN ({','.join('?' * len(wanted))})"
            " ORDER BY position",
            wanted,
        ).fetchall()
        columns = ["run_id", "model", "size", "params", "tokens", "flops", "budget", "loss", "status", "curve",
                   "error", "steps", "tokens_planned", "lr", "timings", "bpb", "embedding_params",
                   "non_embedding_flops_per_unit", "model_config", "top1_error", "lr_source", "epochs", "schedule"]
        records = []
        for row in rows:
            r = dict(zip(columns[:13], row[:13], strict=True))
            r["loss"] = math.nan if r["loss"] is None else r["loss"]
            r["curve"] = json.loads(r["curve"] or "[]")
            spec = json.loads(row[13])
            r["lr"] = spec["lr"]
            r["model_config"] = spec["model_config"]
            for scale in ("embedding_params", "non_embedding_flops_per_unit"):  # None in stores before them
                r[scale] = math.nan if spec.get(scale) is None else spec[scale]
            r["timings"] = json.loads(row[14] or "{}")
            r["bpb"] = math.nan if row[15] is None else row[15]
            r["top1_error"] = math.nan if row[16] is None else row[16]
            r["lr_source"] = row[17] or ""
            r["epochs"] = math.nan if row[18] is None else row[18]
            r["schedule"] = {k: spec.get(k) for k in SCHEDULE_FIELDS}
            records.append(r)
        return pd.DataFrame.from_records(records, columns=columns)
