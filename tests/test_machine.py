"""How many processes work that chooses its own (``workers=None``) gets: the free cores, but never
from a script whose top level each worker would run again."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from flops_fit import machine
from flops_fit.errors import FitInputError
from flops_fit.fitting.synthetic import synthetic_runs
from flops_fit.machine import free_cores, guarded, resolve_workers


@pytest.mark.parametrize("source, expected", [
    ('import flops_fit\nif __name__ == "__main__":\n    flops_fit.fit("runs.csv")\n', True),
    ("def main():\n    pass\nif '__main__' == __name__:\n    main()\n", True),
    ('import flops_fit\nflops_fit.fit("runs.csv")\n', False),
    ('def main():\n    if __name__ == "__main__":\n        pass\nmain()\n', False),  # not at the top level
    ('if __name__ != "__main__":\n    pass\n', False),
    ("if __name__ == ", False),  # not Python
])
def test_a_script_is_guarded_only_by_a_top_level_main_test(tmp_path, source, expected):
    script = tmp_path / "script.py"
    script.write_text(source)
    assert guarded(str(script)) is expected


def test_an_unreadable_script_counts_as_unguarded(tmp_path):
    assert guarded(str(tmp_path / "gone.py")) is False


def test_workers_given_are_checked_and_none_takes_the_free_cores_within_the_machine(monkeypatch):
    assert resolve_workers(3, "workers", FitInputError) == 3
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(FitInputError, match="workers must be a positive integer"):
            resolve_workers(bad, "workers", FitInputError)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "getloadavg", lambda: (5.2, 5.0, 5.0))  # a busy machine: 3 cores free
    monkeypatch.setattr(machine, "running_elsewhere", lambda: None)  # a platform with the average alone
    assert free_cores() == 3
    monkeypatch.setattr(machine, "running_elsewhere", lambda: 5)
    assert free_cores() == 3
    monkeypatch.setattr(machine, "running_elsewhere", lambda: 1)  # the jobs behind the average just ended
    assert free_cores() == 7
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    monkeypatch.setattr(machine, "running_elsewhere", lambda: 12)
    assert free_cores() == 1


def test_the_tasks_running_elsewhere_are_read_from_this_machine():
    now = machine.running_elsewhere()
    assert now is None or 0 <= now < 10_000


def test_an_unguarded_script_fits_in_its_own_process_by_default_and_a_guarded_one_may_use_workers(tmp_path):
    """The unguarded script with workers=2 breaks the pool (test_fit_holdout.py); left to choose,
    the fit stays in the script's process and answers. The same fit, guarded, may start workers."""
    csv = tmp_path / "runs.csv"
    synthetic_runs(budgets=(1e17, 1e18, 1e19, 1e20), sizes_per_budget=7, curve_points=0, seed=1).to_csv(csv, index=False)
    body = ("import flops_fit, flops_fit.machine\n"
            "print(flops_fit.machine.can_start_workers())\n"
            f"r = flops_fit.fit({str(csv)!r}, 'isoflop', bootstrap=10, holdout='forward')\n"
            "print(len(r.holdout_checks))\n")
    (tmp_path / "unguarded.py").write_text(body)
    (tmp_path / "guarded.py").write_text('if __name__ == "__main__":\n' + "".join(
        f"    {line}\n" for line in body.splitlines()))
    out = {}
    for name in ("unguarded", "guarded"):
        done = subprocess.run([sys.executable, f"{name}.py"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert done.returncode == 0, done.stderr
        out[name] = done.stdout.split()
    assert out["unguarded"][0] == "False" and out["guarded"][0] == "True"
    assert out["unguarded"][1] == out["guarded"][1] and int(out["unguarded"][1]) > 0
