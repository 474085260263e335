"""The plugin host: discovers, loads and isolates plugins, and owns the registries.

Order (as pytest does it): block list, built-ins, ``flops_fit`` entry points (filtered by
the allow list), then modules named in ``FLOPS_FIT_PLUGINS`` (local, unpublished plugins).
Each plugin is loaded on its own: a failure at any stage skips that plugin with one
``PluginWarning`` naming it, unless strict mode turns it into an error.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import pluggy

from flops_fit._version import __version__
from flops_fit.errors import EntryError, PluginError, PluginWarning
from flops_fit.plugin import hookspecs
from flops_fit.plugin.contracts import ENTRY_TYPES, Entry
from flops_fit.plugin.registry import Registry

ENTRY_POINT_GROUP = "flops_fit"
BUILTIN_NAMESPACE = "flops_fit"

# The built-in plugins, registered through the same hooks as third-party ones. Module
# paths only: each is imported when the host loads (none imports torch at module level).
BUILTIN_PLUGINS: tuple[str, ...] = (
    "flops_fit.plugins.models.vit",
    "flops_fit.plugins.models.swin",
    "flops_fit.plugins.models.gpt",
    "flops_fit.plugins.models.llama",
    "flops_fit.plugins.models.cait",
    "flops_fit.plugins.models.pvt_v2",
    "flops_fit.plugins.models.declared",
    "flops_fit.plugins.models.hf_causal_lm",
    "flops_fit.plugins.losses",
    "flops_fit.plugins.data.datasets",
    "flops_fit.executors.local",
    "flops_fit.executors.ray",
    "flops_fit.executors.slurm",
    "flops_fit.parity.cases",
)

ENV_LOAD = "FLOPS_FIT_LOAD_PLUGINS"
ENV_DISABLE = "FLOPS_FIT_DISABLE_PLUGINS"
ENV_STRICT = "FLOPS_FIT_STRICT_PLUGINS"
ENV_LOCAL = "FLOPS_FIT_PLUGINS"


@dataclass
class PluginInfo:
    """What the host knows about one plugin: where it came from, and how loading went."""

    name: str
    namespace: str
    builtin: bool
    source: str  # "builtin" | "entry-point" | "env" | "code"
    distribution: str | None = None
    version: str | None = None
    status: str = "pending"  # loaded | error | blocked
    stage: str | None = None  # import | validate | hooks | register
    error: str | None = None
    hooks: list[str] = field(default_factory=list)
    contributed: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def failure_line(self) -> str:
        """The one line reported for a plugin that failed to load."""
        where = f" ({self.distribution} {self.version})" if self.distribution else ""
        fix = f"set {ENV_DISABLE}={self.name}"
        if self.distribution and not self.builtin:
            fix += f" or `pip uninstall {self.distribution}`"
        return (
            f"plugin {self.name!r}{where} failed at {self.stage}: {self.error}; "
            f"skipped (to silence this, {fix})"
        )


def _env_list(value: str | None) -> set[str] | None:
    if value is None:
        return None
    return {item.strip() for item in value.split(",") if item.strip()}


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


class _PluginFailed(Exception):
    def __init__(self, stage: str, error: BaseException | str) -> None:
        self.stage = stage
        self.error = error if isinstance(error, str) else _one_line(error)
        super().__init__(self.error)


class Host:
    """A plugin manager plus one registry per entry kind.

    ``builtins``: register the built-in plugins; ``entry_points``: discover installed
    third-party plugins; ``plugins``: extra ``(name, module_or_object)`` pairs registered
    last (tests and in-code use); ``env`` replaces ``os.environ`` for the switches.
    Nothing is loaded until ``load()`` (called on first use by the registry API).
    """

    def __init__(
        self,
        *,
        builtins: bool = True,
        entry_points: bool = True,
        plugins: Iterable[tuple[str, Any]] = (),
        env: Mapping[str, str] | None = None,
        strict: bool | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self._use_builtins = builtins
        self._use_entry_points = entry_points
        self._extra = list(plugins)
        self.allow = _env_list(env.get(ENV_LOAD))
        self.disable = _env_list(env.get(ENV_DISABLE)) or set()
        self.local_modules = sorted(_env_list(env.get(ENV_LOCAL)) or ())
        self.strict = strict if strict is not None else env.get(ENV_STRICT, "").lower() in {"1", "true", "yes"}
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.registries: dict[str, Registry] = {kind: Registry(kind) for kind in ENTRY_TYPES}
        self.plugins: list[PluginInfo] = []
        self._loaded = False
        self._lock = threading.RLock()

    # ----------------------------------------------------------------- loading
    def load(self) -> Host:
        """Load every plugin once; later calls do nothing."""
        with self._lock:
            if self._loaded:
                return self
            self._loaded = True
            if self._use_builtins:
                for module_name in BUILTIN_PLUGINS:
                    info = PluginInfo(module_name, BUILTIN_NAMESPACE, True, "builtin", "flops-fit", __version__)
                    self._add(info, lambda m=module_name: importlib.import_module(m))
            if self._use_entry_points:
                for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
                    dist = getattr(ep, "dist", None)
                    info = PluginInfo(
                        ep.name, ep.name, False, "entry-point",
                        dist.metadata["Name"] if dist else None, dist.version if dist else None,
                    )
                    self._add(info, ep.load)
            for module_name in self.local_modules:
                info = PluginInfo(module_name, module_name, False, "env")
                self._add(info, lambda m=module_name: importlib.import_module(m))
            for name, obj in self._extra:
                info = PluginInfo(name, name, False, "code")
                self._add(info, lambda o=obj: o)
        return self

    def _blocked_reason(self, info: PluginInfo) -> str | None:
        names = {info.name, info.distribution} - {None}
        if names & self.disable:
            return f"disabled by {ENV_DISABLE}"
        if not info.builtin and info.source == "entry-point" and self.allow is not None and not names & self.allow:
            return f"not listed in {ENV_LOAD}"
        return None

    def _add(self, info: PluginInfo, load: Callable[[], Any]) -> None:
        self.plugins.append(info)
        reason = self._blocked_reason(info)
        if reason:
            info.status, info.error = "blocked", reason
            return
        try:
            self._register(info, load)
            info.status = "loaded"
        except _PluginFailed as failed:
            info.status, info.stage, info.error = "error", failed.stage, failed.error
            if self.strict:
                raise PluginError(info.failure_line().replace("; skipped", "") + f" ({ENV_STRICT} is set)") from failed
            warnings.warn(info.failure_line(), PluginWarning, stacklevel=2)

    def _register(self, info: PluginInfo, load: Callable[[], Any]) -> None:
        if not info.builtin and info.namespace == BUILTIN_NAMESPACE:
            raise _PluginFailed("validate", f"the plugin name {BUILTIN_NAMESPACE!r} is reserved for built-ins")
        try:
            plugin = load()
        except BaseException as exc:  # noqa: BLE001 - an import may raise anything, even SystemExit
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise _PluginFailed("import", exc) from exc
        try:
            self.pm.register(plugin, name=info.name)
        except Exception as exc:
            raise _PluginFailed("validate", exc) from exc
        try:
            callers = self.pm.get_hookcallers(plugin) or []
            unknown = sorted(c.name for c in callers if c.spec is None)
            if unknown:
                raise _PluginFailed(
                    "hooks",
                    f"hook {', '.join(unknown)} matches no flops-fit hook; the hooks are "
                    f"{', '.join(hookspecs.HOOK_KINDS)}",
                )
            info.hooks = sorted(c.name for c in callers)
            if not info.hooks:
                raise _PluginFailed(
                    "hooks", "implements no flops-fit hook (are its functions marked with @flops_fit.hookimpl?)"
                )
            staged = self._collect(info, plugin)
        except _PluginFailed:
            self.pm.unregister(plugin)
            raise
        for kind, entry in staged:
            qid = self.registries[kind].add(entry.from_plugin(info.name), info)
            info.contributed.setdefault(kind, []).append(qid)

    def _collect(self, info: PluginInfo, plugin: Any) -> list[tuple[str, Entry]]:
        """Call each of the plugin's hooks alone, so a failure is charged to this plugin."""
        staged: list[tuple[str, Entry]] = []
        for hook_name in info.hooks:
            kind = hookspecs.HOOK_KINDS[hook_name]
            register = self._register_callback(info, kind, staged)
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                if impl.plugin is not plugin:
                    continue
                try:
                    returned = impl.function(**{arg: register for arg in impl.argnames})
                except _PluginFailed:
                    raise
                except Exception as exc:
                    raise _PluginFailed("register", f"in {hook_name}: {_one_line(exc)}") from exc
                if returned is not None:  # entries returned, not registered: the plugin loaded with none of them
                    raise _PluginFailed("register", f"in {hook_name}: returned a {type(returned).__name__}; a hook "
                                        "registers nothing by returning: call register(entry) for each entry")
        return staged

    def _register_callback(self, info: PluginInfo, kind: str, staged: list) -> Callable[[Entry], None]:
        expected = ENTRY_TYPES[kind]
        registry = self.registries[kind]

        def register(entry: Entry) -> None:
            if not isinstance(entry, expected):
                raise EntryError(f"expects {expected.__name__} objects, got {entry!r}")
            name = entry.name
            if any(k == kind and e.name == name for k, e in staged) or registry.has_name(
                name, namespace=info.namespace
            ):
                raise EntryError(f"{kind} {name!r} is registered twice by this plugin")
            if not info.builtin and registry.has_name(name, builtin=True):
                raise EntryError(f"{kind} name {name!r} is reserved by a built-in plugin; choose another name")
            staged.append((kind, entry))

        return register

    # ---------------------------------------------------------------- queries
    def registry(self, kind: str) -> Registry:
        self.load()
        return self.registries[kind]

    def entry(self, kind: str, name: str) -> Entry:
        return self.registry(kind).lookup(name).entry


_default: Host | None = None
_default_lock = threading.Lock()


def get_host() -> Host:
    """The process-wide host, created and loaded on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Host()
    return _default.load()


def reset_host(host: Host | None = None) -> None:
    """Replace (or forget) the process-wide host; the next use reloads plugins."""
    global _default
    with _default_lock:
        _default = host
