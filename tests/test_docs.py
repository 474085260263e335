"""Every hook is documented in docs/plugins.md with its exact signature."""

import inspect
from pathlib import Path

import pytest

from flops_fit.plugin import hookspecs

DOC = (Path(__file__).resolve().parents[1] / "docs" / "plugins.md").read_text()
HOOKS = sorted(
    name for name, fn in vars(hookspecs).items() if inspect.isfunction(fn) and hasattr(fn, "flops_fit_spec")
)


def test_hookspecs_are_discovered():
    assert HOOKS == sorted(hookspecs.HOOK_KINDS)


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_is_documented_with_its_exact_signature(hook):
    fn = getattr(hookspecs, hook)
    params = ", ".join(inspect.signature(fn).parameters)
    assert f"### `{hook}({params})`" in DOC, f"docs/plugins.md lacks a '### `{hook}({params})`' section"
