"""Shared fixtures. The tests folder goes on sys.path so helper modules (plugin_kit) import."""

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
