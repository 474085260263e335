"""One driver per store: a lease row in ``runs.sqlite`` (holder pid, host, start, heartbeat).

Two drivers resuming the same folder would train the same runs twice, so a second driver
is refused with one line naming the live one (flops-fit does not split a sweep between
drivers: one driver already spreads runs over workers or a Ray cluster). The holder beats
its heart every ``heartbeat`` seconds from a background thread. A lease is taken over when
its holder is gone: on this host, when its process no longer exists; on any host, when its
heartbeat is older than ``stale_after`` seconds (a crashed node, a reused pid). If the
holder finds its lease taken (it was suspended past ``stale_after``), ``on_lost`` is called
so that it stops. Readers (status, fit, report) never take the lease. A lease taken with
``shared=True`` is joined by the leases its process takes of the store meanwhile (an adaptive
sweep's batches, each a ``run_plan``, under the one lease of the whole design): its start and
heartbeat stay the first one's, so ``status`` sees one driver from the first batch on, fitting
between batches included.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from flops_fit.errors import StoreBusy
from flops_fit.store.run_store import cannot_write, read_only

log = logging.getLogger(__name__)
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS lease (id INTEGER PRIMARY KEY CHECK (id = 1), token TEXT NOT NULL,"
    " pid INTEGER NOT NULL, host TEXT NOT NULL, started REAL NOT NULL, heartbeat REAL NOT NULL)"
)


STALE_AFTER = 60.0  # seconds without a heartbeat after which a holder on another host is taken as gone
_SHARED: set[Path] = set()  # stores whose lease this process holds shared (``Lease(shared=True)``)
_HELD_LOCK = threading.Lock()


class Holder(NamedTuple):
    """The driver holding a store's lease: its process, host, and when it started and last beat."""

    pid: int
    host: str
    started: float
    heartbeat: float


def read_holder(row: tuple | None) -> Holder | None:
    """The lease row's (pid, host, started, heartbeat) as a ``Holder``; None for no row, or for one damaged into
    values of other kinds (a text heartbeat was a TypeError traceback in status and in every driver after)."""
    if row is None:
        return None
    pid, host, started, beat = row
    sound = (isinstance(pid, int) and isinstance(host, str)
             and all(isinstance(t, (int, float)) and math.isfinite(t) for t in (started, beat)))
    return Holder(pid, host, float(started), float(beat)) if sound else None


def alive(holder: Holder, now: float, stale_after: float = STALE_AFTER) -> bool:
    """Whether ``holder`` still drives its store: its heartbeat is fresh and, on this host, its
    process exists (a crashed driver's row stays behind until another takes the lease over)."""
    if now - holder.heartbeat > stale_after:
        return False
    return process_exists(holder.pid) if holder.host == socket.gethostname() else True


def holder(path: str | Path, now: float | None = None) -> Holder | None:
    """The live driver of the store at ``path`` (a ``runs.sqlite``), read without writing; None
    when no driver holds it: what ``status`` needs to tell a sweep in flight from one killed."""
    try:
        db = read_only(Path(path))
        try:
            row = db.execute("SELECT pid, host, started, heartbeat FROM lease WHERE id = 1").fetchone()
        finally:
            db.close()
    except sqlite3.Error:  # no lease table yet: no driver ever held it
        return None
    found = read_holder(row)
    return found if found and alive(found, time.time() if now is None else now) else None


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class Lease:
    """The driver lease on the store at ``path`` (a ``runs.sqlite``); use as a context manager."""

    def __init__(self, path: str | Path, *, heartbeat: float = 10.0, stale_after: float = STALE_AFTER,
                 on_lost: Callable[[str], None] | None = None, shared: bool = False) -> None:
        self.path = Path(path)
        self.heartbeat, self.stale_after = heartbeat, stale_after
        self.on_lost = on_lost
        self.token = uuid.uuid4().hex
        self.pid, self.host = os.getpid(), socket.gethostname()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._key = self.path.resolve()
        self.shared = shared  # joined by this process's later leases of the store
        self._joined = False  # this lease joined a shared one

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        db.execute(SCHEMA)
        return db

    def _repair(self, db: sqlite3.Connection) -> None:
        """A lease table of other columns (damaged, or made by hand) holds no driver anyone could read: it is
        made again, inside the caller's transaction; the sweep's runs are in other tables, untouched."""
        columns = [row[1] for row in db.execute("SELECT * FROM pragma_table_info('lease')")]
        if columns != ["id", "token", "pid", "host", "started", "heartbeat"]:
            log.warning("the lease table of %s was damaged (columns %s): made again", self.path, ", ".join(columns))
            db.execute("DROP TABLE lease")
            db.execute(SCHEMA)

    def acquire(self) -> Lease:
        """Take the lease, or raise ``StoreBusy`` naming the live holder (``StoreError`` where this
        user may not write the store)."""
        with _HELD_LOCK:
            if self._key in _SHARED:  # this process holds it shared: the same lease
                self._joined = True
                return self
        try:
            self._take()
        except sqlite3.OperationalError as exc:
            refused = cannot_write(self.path, exc)
            if refused is None:
                raise
            raise refused from None
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="flops-fit-lease", daemon=True)
        self._thread.start()
        if self.shared:
            with _HELD_LOCK:
                _SHARED.add(self._key)
        return self

    def _take(self) -> None:
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                self._repair(db)
                row = db.execute("SELECT token, pid, host, started, heartbeat FROM lease WHERE id = 1").fetchone()
                now = time.time()
                found = read_holder(row and row[1:])
                if row and not found:
                    log.warning("the lease row of %s was damaged (%s): taken over", self.path, str(row[1:])[:80])
                if found and row[0] != self.token and alive(found, now, self.stale_after):
                    pid, host, started, beat = found
                    raise StoreBusy(
                        f"{self.path.parent} is being swept by another driver (pid {pid} on {host}, started "
                        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}, heartbeat {now - beat:.0f}s "
                        f"ago): wait for it to finish or stop it; `flops-fit status {self.path.parent}` reads it now"
                    )
                if found:
                    log.warning("taking over the lease of %s from pid %s on %s (gone)", self.path, row[1], row[2])
                db.execute("INSERT OR REPLACE INTO lease VALUES (1, ?, ?, ?, ?, ?)",
                           (self.token, self.pid, self.host, now, now))
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    def _beat(self) -> None:
        try:
            db = self._connect()
        except sqlite3.Error as exc:  # the store unwritable from the start (a full disk): the thread's traceback told less
            log.warning("the lease heartbeat on %s cannot start (%s): a driver on another host may take the lease "
                        "over after %.0fs", self.path, exc, self.stale_after)
            return
        try:
            while not self._stop.wait(self.heartbeat):
                try:
                    held = db.execute("UPDATE lease SET heartbeat = ? WHERE id = 1 AND token = ?",
                                      (time.time(), self.token)).rowcount
                except sqlite3.Error as exc:  # busy past the timeout: try again next beat
                    log.warning("lease heartbeat on %s failed: %s", self.path, exc)
                    continue
                if not held:
                    message = f"the lease on {self.path} was taken over by another driver"
                    log.error(message)
                    if self.on_lost:
                        self.on_lost(message)
                    return
        finally:
            db.close()

    def release(self) -> None:
        """Stop the heartbeat and give the lease up (if still ours); one that joined a shared lease leaves it held."""
        with _HELD_LOCK:
            if self._joined:
                self._joined = False
                return
            if self.shared:
                _SHARED.discard(self._key)
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        try:
            db = self._connect()
            try:
                db.execute("DELETE FROM lease WHERE id = 1 AND token = ?", (self.token,))
            finally:
                db.close()
        except sqlite3.Error as exc:  # a full disk: raising here hid why the sweep stopped behind a second traceback
            log.warning("the lease on %s could not be given up (%s): the next driver takes it over, this process "
                        "being gone", self.path, exc)

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
