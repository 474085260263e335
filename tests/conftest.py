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
