"""One registry per entry kind: qualified ids, the name policy, lookup and listing."""

from __future__ import annotations

import difflib
import fnmatch
from dataclasses import dataclass
from typing import Protocol

from flops_fit.errors import UnknownEntryError
from flops_fit.plugin.contracts import Entry


class Provider(Protocol):
    """What the registry needs to know about the plugin behind an entry (the host's PluginInfo)."""

    name: str
    namespace: str
    builtin: bool


@dataclass(frozen=True)
class Registered:
    """An entry together with the plugin that registered it."""

    entry: Entry
    plugin: Provider

    @property
    def qualified_id(self) -> str:
        return f"{self.plugin.namespace}/{self.entry.name}"


class Registry:
    """Entries of one kind, keyed by qualified id ``namespace/name``.

    A bare name resolves when exactly one plugin provides it; when two third-party
    plugins use one name, both are kept and the bare name is refused with a message
    listing the qualified ids.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._by_id: dict[str, Registered] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def add(self, entry: Entry, plugin: Provider) -> str:
        item = Registered(entry, plugin)
        self._by_id[item.qualified_id] = item
        return item.qualified_id

    def has_name(self, name: str, *, namespace: str | None = None, builtin: bool | None = None) -> bool:
        return any(
            r.entry.name == name
            and (namespace is None or r.plugin.namespace == namespace)
            and (builtin is None or r.plugin.builtin == builtin)
            for r in self._by_id.values()
        )

    def items(self) -> list[Registered]:
        return [self._by_id[k] for k in sorted(self._by_id)]

    def lookup(self, name: str) -> Registered:
        """Resolve a bare name or a qualified id, with a helpful error."""
        if not isinstance(name, str):
            raise UnknownEntryError(f"{self.kind} name must be a string, got {name!r}")
        if "/" in name:
            if name in self._by_id:
                return self._by_id[name]
            candidates = [name.split("/", 1)[1]]
        else:
            matches = [r for r in self._by_id.values() if r.entry.name == name]
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                ids = ", ".join(sorted(r.qualified_id for r in matches))
                raise UnknownEntryError(
                    f"{self.kind} name {name!r} is ambiguous: it is provided by several plugins "
                    f"({ids}); use one of these qualified ids"
                )
            candidates = [name]
        known = sorted({r.entry.name for r in self._by_id.values()})  # bare names: one suggestion per entry
        close = difflib.get_close_matches(candidates[0], known, n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else "."
        listing = ", ".join(known) or "none registered"
        raise UnknownEntryError(
            f"no {self.kind} called {name!r}{hint} Known {_plural(self.kind)}: {listing}. "
            f"Run `flops-fit plugins` to see which plugins loaded."
        )

    def names(self, pattern: str | None = None, *, qualified: bool = False) -> list[str]:
        """Sorted names matching an fnmatch ``pattern`` (against name or qualified id).

        Bare names are listed, except where a name is ambiguous (or ``qualified=True``):
        then the qualified ids are listed instead.
        """
        counts: dict[str, int] = {}
        for r in self._by_id.values():
            counts[r.entry.name] = counts.get(r.entry.name, 0) + 1
        out = set()
        for r in self._by_id.values():
            if pattern is not None and not (
                fnmatch.fnmatchcase(r.entry.name, pattern) or fnmatch.fnmatchcase(r.qualified_id, pattern)
            ):
                continue
            out.add(r.qualified_id if qualified or counts[r.entry.name] > 1 else r.entry.name)
        return sorted(out)


def _plural(kind: str) -> str:
    """"loss" -> "losses", "model" -> "models"."""
    return kind + ("es" if kind.endswith("s") else "s")
