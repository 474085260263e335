"""Files that survive a kill and a crowd: atomic writes and an inter-process lock.

A write goes to a temporary name beside the target, is fsynced, renamed over the target and
the folder fsynced, so a reader sees the old file or the new one, never a torn one. The
lock is an advisory ``flock`` on a lock file, so workers that need the same derived file
(a token cache, a trained tokenizer) build it once while the others wait for it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from flops_fit.errors import OptionError


def write_atomically(path: Path, write: Callable[[Path], Any]) -> None:
    """``write`` a temporary file beside ``path``, fsync it, rename it over ``path`` and fsync the
    folder: a kill at any instant leaves the old file or the new one, never a torn one."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(temporary)
        fsync(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    fsync(path.parent)


def check_writable(path: Path, what: str, fix: str) -> None:
    """Refuse, before any work, a file this process cannot write: its folder made where missing, a probe
    created and removed in it, and the file itself opened to append where it exists (a read-only or
    immutable folder otherwise fails only at the end, after a whole fit, with a traceback)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        probe = path.with_name(f".{path.name}.{os.getpid()}.probe")
        probe.touch()
        probe.unlink()
        if path.exists():
            with open(path, "a"):
                pass
    except OSError as exc:
        raise OptionError(f"cannot write {what} {path} ({exc.strerror or exc}): {fix}") from None


def fsync(path: Path) -> None:
    """Flush a file's (or a folder's) data to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) across processes; waits for it."""
    import fcntl  # POSIX only; imported here so the module still imports elsewhere

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


CACHE_ENV = "FLOPS_FIT_CACHE"


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """``cache_dir``, else ``$FLOPS_FIT_CACHE``, else ``flops-fit`` in the user's cache folder:
    where what is worth keeping between sweeps lives (token files, probed micro-batch sizes)."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "flops-fit"
