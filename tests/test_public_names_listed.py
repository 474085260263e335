"""The lazy public names are listed by ``dir(flops_fit)`` and seen by IDEs, and both lists
stay equal to the table that imports them (``flops_fit._LAZY``)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import flops_fit

ROOT = Path(__file__).resolve().parents[1]


def test_dir_lists_the_lazy_names_without_importing_them():
    code = ("import sys, flops_fit; names = dir(flops_fit); "
            "print('fit' in names, 'plan' in names, 'sweep' in names, 'torch' in sys.modules, "
            "'flops_fit.fitting' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "True", "False", "False"]


def test_the_names_ides_see_are_the_lazy_table():
    tree = ast.parse((ROOT / "flops_fit" / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    seen = {(a.asname or a.name): f"{node.module}:{a.name}" for node in block.body for a in node.names}
    assert seen == flops_fit._LAZY
