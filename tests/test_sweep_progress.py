"""The sweep's progress display: the time left, measured from the FLOPs the sweep has trained."""

import io

import pytest
import sweep_support

from flops_fit.sweeps import driver, progress
from flops_fit.sweeps.planner import plan

HOST = sweep_support.host()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_time_left_follows_the_measured_pace_once_it_means_something(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    stream = io.StringIO()
    display = progress.SweepDisplay(10, stream=stream, flops=1000.0)
    clock.now += 30
    display.trained(40.0)  # 4% in 30 s: too little to say
    assert display.seconds_left() is None
    display.trained(210.0)  # a quarter in 30 s: three quarters take 90 s more
    assert display.seconds_left() == pytest.approx(90.0)
    display.run_finished("run a")
    assert stream.getvalue().splitlines()[-1] == "sweep [#...............] 1/10 runs, about 1.5min left | run a"
    clock.now += 60  # at the same pace it would be 3/4 in: 50% in 90 s says 90 s more
    display.trained(250.0)
    assert display.seconds_left() == pytest.approx(90.0)
    display.done = 9
    display.run_finished("run j")  # the last run: nothing is left to say
    assert stream.getvalue().splitlines()[-1] == "sweep [################] 10/10 runs | run j"


def test_nothing_is_said_before_ten_seconds_or_when_nothing_is_to_train(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    display = progress.SweepDisplay(2, flops=100.0)
    display.trained(50.0)
    clock.now += 9
    assert display.seconds_left() is None
    assert progress.SweepDisplay(2, 2, flops=0.0).seconds_left() is None


def test_a_wsd_sweep_reports_the_flops_its_plan_executes(tmp_path, monkeypatch):
    """Every progress report adds its steps' FLOPs, the stable phase once per family: at the end
    the display has heard the plan's executed FLOPs (to each run's last, trimmed step)."""
    displays = []

    class Heard(progress.SweepDisplay):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            displays.append(self)

    monkeypatch.setattr(driver, "SweepDisplay", Heard)
    p = plan(host=HOST, **{**sweep_support.small_plan_options(budgets=[2e7, 4e7, 8e7]), "schedule": "wsd"})
    p.run(tmp_path, show_progress=False, skip_parity=True, host=HOST)
    (display,) = displays
    assert display.flops == pytest.approx(p.total_flops)
    step = max(r.flops_per_unit * r.batch_size * r.seq_len for r in p.runs)
    assert 0 <= display.flops_done - display.flops < step * len(p.runs)
    assert display.flops_done > 0.9 * p.total_flops
