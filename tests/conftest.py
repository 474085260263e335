"""Shared fixtures. The tests folder goes on sys.path so helper modules (plugin_kit) import."""

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


@pytest.fixture(autouse=True, scope="session")
def _token_cache_in_a_temporary_folder(tmp_path_factory):
    """Token files and trained tokenizers go to a folder of the session's, never the user's cache
    (worker processes inherit the variable)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FLOPS_FIT_CACHE", str(tmp_path_factory.mktemp("flops-fit-cache")))
        yield


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "e2e: an end-to-end scenario across processes or a whole workflow (a driver killed and "
                   "resumed, ranks under torchrun, a Ray or SLURM cluster, worker-process sweeps, plugins pip "
                   "installed, a scaled-down demo or tune with its held-out cell); `pytest -m e2e` runs them")


def pytest_collection_modifyitems(config, items):
    """`pytest` alone runs the quick tier; end-to-end tests run with `-m e2e` (CI runs both) or when
    a test file or test is named on the command line."""
    if config.option.markexpr or _names_tests(config):
        return
    quick = [item for item in items if item.get_closest_marker("e2e") is None]
    if len(quick) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("e2e")])
        items[:] = quick


def _names_tests(config) -> bool:
    """Whether the command line names test files or tests (not only folders, or nothing)."""
    return any(Path(arg.split("::")[0]).suffix == ".py" for arg in config.args)
