"""Exceptions raised at flops-fit's boundaries; each message names the problem and the fix."""

from __future__ import annotations


class FlopsFitError(Exception):
    """Base class for every error flops-fit raises on purpose."""


class EntryError(FlopsFitError, ValueError):
    """A registered entry (model, dataset, loss, executor, parity case) breaks its contract."""


class PluginError(FlopsFitError):
    """A plugin could not be loaded; raised only in strict mode (FLOPS_FIT_STRICT_PLUGINS=1)."""


class UnknownEntryError(FlopsFitError, KeyError):
    """No entry of that kind has that name (or the bare name is ambiguous)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""
