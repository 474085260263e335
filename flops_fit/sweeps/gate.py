"""The parity gate: run a model's quick parity cases before any compute is spent.

``check("vit")`` runs every registered quick case whose ``model`` is ``"vit"`` on CPU in
fp32 and returns a ``GateReport``. A case that raises counts as failed (its error is kept);
a case whose optional reference package is not installed is skipped. A model with no
runnable quick case is ``unverified``: ``passed`` is True (nothing failed) but
``verified`` is False, so callers can insist on verification. A case that runs past its time
limit (``CASE_TIMEOUT_S``, or ``$FLOPS_FIT_PARITY_TIMEOUT``) is an error too, and the gate goes on.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
import threading
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from flops_fit.checks import positive_number
from flops_fit.errors import OptionError
from flops_fit.plugin import api
from flops_fit.plugin.contracts import ParityCaseEntry, resolve

# A case's time limit in seconds: the built-in quick cases take under 10 s each on a loaded 2-core CPU
# (importing torch, timm and transformers included), so a case still running at this limit is hung.
CASE_TIMEOUT_S = 120.0
TIMEOUT_VARIABLE = "FLOPS_FIT_PARITY_TIMEOUT"
# what the owner of a model without a parity case can do about it
HOW_TO_VERIFY = ("register one (quick=True) with register_parity_cases, or give its ModelEntry no_parity saying "
                 "why none applies (docs/guide/plugins.md)")


@dataclass
class CaseOutcome:
    """One case's result: ``status`` is passed | failed | error | skipped."""

    case: str
    status: str
    report: Any = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        report = self.report
        if report is not None:  # a plugin's own report may have nothing but ``passed``, or a to_dict that breaks
            try:
                report = report.to_dict() if callable(getattr(report, "to_dict", None)) else {"passed": report.passed}
            except Exception as exc:  # noqa: BLE001
                report = {"passed": self.report.passed, "to_dict_error": f"{type(exc).__name__}: {exc}"}
        return {"case": self.case, "status": self.status, "detail": self.detail, "report": report}


@dataclass
class GateReport:
    model: str
    device: str
    dtype: str
    outcomes: list[CaseOutcome] = field(default_factory=list)
    note: str = ""  # said where no case ran: a case registered under a misspelt model name
    via: str = ""  # a preset's: the cases ran are its family's (``family_cases``), and why they apply
    exempt: str = ""  # the model entry's no_parity: why no case applies to it

    @property
    def passed(self) -> bool:
        return all(o.status in ("passed", "skipped") for o in self.outcomes)

    @property
    def verified(self) -> bool:
        return any(o.status == "passed" for o in self.outcomes)

    @property
    def status(self) -> str:
        return "failed" if not self.passed else ("passed" if self.verified else "unverified")

    def summary(self) -> str:
        lines = [f"parity gate for {self.model!r} [{self.device}, {self.dtype}]: {self.status}"]
        lines += [f"  {self.via}"] if self.via else []
        lines += [f"  {o.case}: {o.status}{': ' + o.detail if o.detail else ''}" for o in self.outcomes]
        if not self.outcomes and self.exempt:
            lines.append(f"  no parity case applies: {self.exempt}")
        elif not self.outcomes:
            lines.append(f"  no quick parity case is registered for this model: {HOW_TO_VERIFY}")
            lines += [f"  {self.note}"] if self.note else []
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "device": self.device, "dtype": self.dtype, "status": self.status,
                "passed": self.passed, "verified": self.verified, "via": self.via,
                "cases": [o.to_dict() for o in self.outcomes]}


def missing_requirements(entry: ParityCaseEntry) -> list[str]:
    return [name for name in entry.requires if importlib.util.find_spec(name) is None]


def install_hint(missing: list[str]) -> str:
    """How to install what a case needs: flops-fit's ``parity`` extra where it holds every package
    (the built-in cases'), else the packages themselves (a plugin's case needs its own)."""
    try:
        extra = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower()
                 for r in metadata.requires("flops-fit") or () if 'extra == "parity"' in r}
    except metadata.PackageNotFoundError:  # a checkout not installed: the extra is not known
        extra = set()
    # quoted: zsh reads an unquoted [parity] as a glob and refuses the command
    return "pip install 'flops-fit[parity]'" if {m.lower() for m in missing} <= extra else f"pip install {' '.join(missing)}"


def case_timeout(timeout_s: float | None = None) -> float:
    """The time limit a case gets: ``timeout_s``, else ``$FLOPS_FIT_PARITY_TIMEOUT``, else ``CASE_TIMEOUT_S``."""
    if timeout_s is not None:
        return positive_number(timeout_s, "the parity case time limit (seconds)")
    raw = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not raw:
        return CASE_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = None
    if value is None or not 0 < value < float("inf"):
        raise OptionError(f"{TIMEOUT_VARIABLE}={raw!r} is not a number of seconds above zero; set it to one "
                          f"(e.g. 600) or unset it for the default {CASE_TIMEOUT_S:g}")
    return value


def run_case(entry: ParityCaseEntry, device: str, dtype: str, *, timeout_s: float | None = None) -> CaseOutcome:
    """Run one case, turning exceptions into an ``error`` outcome that keeps the message.

    The case runs on a daemon thread, which the gate waits on for ``case_timeout(timeout_s)``
    seconds; a case still running then is an ``error`` naming the limit and how to raise it.
    A thread cannot be killed, so a hung case is abandoned: it runs on in the background (a
    daemon, so it never keeps the process alive) while the gate goes on. A thread, not a
    subprocess, because a case is whatever the host registered (a plugin object, a custom
    ``host=``) and must run with that host's state, and a child would import torch and the
    references again for every case. A case that hangs in C code holding the GIL is beyond both.
    """
    missing = missing_requirements(entry)
    if missing:
        return CaseOutcome(entry.name, "skipped", detail=f"needs {', '.join(missing)} ({install_hint(missing)})")
    limit = case_timeout(timeout_s)
    done: dict[str, Any] = {}

    def call() -> None:
        try:
            done["report"] = resolve(entry.run)(device=device, dtype=dtype)
        except BaseException as exc:  # noqa: BLE001 - a failing case (sys.exit too) must not stop the gate
            done["error"] = exc

    worker = threading.Thread(target=call, name=f"parity case {entry.name}", daemon=True)
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        return CaseOutcome(entry.name, "error", detail=(
            f"still running after the time limit of {limit:g} s, so the gate left it (it may be hung); if it is "
            f"only slow, raise the limit: {TIMEOUT_VARIABLE}=SECONDS (flops-fit parity --timeout SECONDS)"))
    if "error" in done:
        exc = done["error"]
        if not isinstance(exc, (Exception, SystemExit)):  # Ctrl-C and the like belong to the caller
            raise exc
        return CaseOutcome(entry.name, "error", detail=f"{type(exc).__name__}: {exc}")
    report = done["report"]
    if not isinstance(getattr(report, "passed", None), bool):  # the contract is a bool ``passed``, nothing more
        return CaseOutcome(entry.name, "error", detail=(
            f"run returned {type(report).__name__}, which has no bool 'passed'; return a report whose passed is a "
            "bool (flops_fit.parity.compare.ParityReport gives the layer table)"))
    if report.passed:
        return CaseOutcome(entry.name, "passed", report)
    summary = getattr(report, "summary", None)
    try:  # a plugin's own report: its text must not take the gate down either
        detail = summary() if callable(summary) else str(report)
    except Exception as exc:  # noqa: BLE001
        detail = f"its report's summary() raised {type(exc).__name__}: {exc}"
    return CaseOutcome(entry.name, "failed", report, detail)


def check(model_name: str, *, device: str = "cpu", dtype: str = "float32", quick_only: bool = True,
          host: Any = None, timeout_s: float | None = None) -> GateReport:
    """Run ``model_name``'s quick parity cases (all its cases with ``quick_only=False``), each
    within ``timeout_s`` seconds (``case_timeout``).

    A name with no case that is no registered model either is a misspelling (or a plugin that
    did not load), not an unverified model: the registry's error names the models it knows."""
    limit = case_timeout(timeout_s)  # a bad limit is refused before any case runs
    gate = GateReport(model_name, device, dtype)
    names = api.list_parity_cases(model=model_name, qualified=True, host=host)
    if not names:
        gate.exempt = api.model_info(model_name, host=host).no_parity or ""  # UnknownEntryError names close ones
        names, gate.via = ([], "") if gate.exempt else family_cases(model_name, host)
        gate.note = "" if names else _misspelt_cases(model_name, host)
    for name in names:
        entry = api.parity_case_info(name, host=host)
        if quick_only and not entry.quick:
            continue
        if device not in entry.devices or dtype not in entry.dtypes:  # named, so it is not taken for missing
            where = [", ".join(entry.devices)] if device not in entry.devices else []
            where += [", ".join(entry.dtypes)] if dtype not in entry.dtypes else []
            gate.outcomes.append(CaseOutcome(entry.name, "skipped", detail=(
                f"runs on {' in '.join(where)} only; this gate runs on {device}, {dtype}")))
            continue
        gate.outcomes.append(run_case(entry, device, dtype, timeout_s=limit))
    return gate


def family_cases(model_name: str, host: Any = None) -> tuple[list[str], str]:
    """A preset's cases: those of the registered models built by the same builder (``gpt2`` is
    ``gpt``'s builder with other defaults), and the line that says so; ([], "") where none is.
    A preset has no case of its own, and its gate read 'unverified: register one' though the
    family's cases prove the very code it builds."""
    builder = api.model_info(model_name, host=host).builder
    registered = set(api.list_models(host=host))
    names, family = [], []
    for name in api.list_parity_cases(qualified=True, host=host):
        model = api.parity_case_info(name, host=host).model
        if model != model_name and model in registered and api.model_info(model, host=host).builder == builder:
            names.append(name)
            family += [model] if model not in family else []
    if not names:
        return [], ""
    shown = builder if isinstance(builder, str) else getattr(builder, "__qualname__", repr(builder))
    whose = f"model{'s' if len(family) > 1 else ''} {', '.join(map(repr, family))}"
    return names, f"no case names {model_name!r}; its builder ({shown}) also builds {whose}, whose cases ran"


def _misspelt_cases(model_name: str, host: Any) -> str:
    """Cases that name an unregistered model spelt close to ``model_name``: likely meant for it."""
    models = {name: api.parity_case_info(name, host=host).model
              for name in api.list_parity_cases(qualified=True, host=host)}
    unknown = sorted(set(models.values()) - set(api.list_models(host=host)))
    close = set(difflib.get_close_matches(model_name, unknown, n=3, cutoff=0.75))
    return "; ".join(f"case {name!r} names model {model!r}, which is not registered: is it meant for {model_name!r}?"
                     for name, model in models.items() if model in close)


def gate_line(gate: dict[str, Any]) -> str:
    """A stored gate's outcome (``driver.parity_gate``'s, or just a status) in one line, its status and each case's:
    "parity gate for 'gpt' [cpu, float32]: unverified (hf-gpt2: skipped: needs transformers ...)"."""
    lines = gate.get("reason", "").splitlines()
    if not lines or not lines[0].startswith("parity gate"):  # not run: skip_parity, or a [train] command
        lines = [f"parity gate: {gate['status']}", *lines]
    return lines[0] + (f" ({'; '.join(c.strip() for c in lines[1:])})" if lines[1:] else "")
