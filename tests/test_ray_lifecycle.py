"""A local Ray that the executor started is shut down when the executor closes (the sweep
driver closes it through ``with``). Runs in a fresh process, so the suite's own Ray does not count."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'flops-fit[ray]'")

pytestmark = pytest.mark.xdist_group("ray")

SCRIPT = """
import ray
from flops_fit.executors.ray import RayExecutor

with RayExecutor(num_cpus=1) as executor:
    executor.connect()
    print("inside", ray.is_initialized())
print("after", ray.is_initialized())
"""


@pytest.mark.e2e
def test_closing_the_executor_stops_the_local_ray_it_started():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["inside", "True", "after", "False"]
