"""Task functions for the local executor's worker processes (imported there by name)."""

from __future__ import annotations

import os
import time


def square(item, progress):
    progress(f"run-{item}", item, 10, float(item))
    return item * item


def fail_on_three(item, progress):
    if item == 3:
        raise ValueError(f"item {item} diverged")
    return item


def die_on_two(item, progress):
    """The worker process exits mid-run, as if killed (out of memory, kill -9)."""
    if item == 2:
        os._exit(3)
    return item


def block_unless_zero(item, progress):
    """Item 0 returns at once; any other item blocks until its worker is stopped."""
    if item == 0:
        return 0
    while True:
        time.sleep(60)
