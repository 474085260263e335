"""The sweep's progress display: the time left, measured from the runs the sweep has trained."""

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


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    return clock


def test_nothing_is_said_before_three_runs_finish(clock):
    """FLOPs alone misjudge small runs (mostly setup and per-step overhead): the time left waits
    for the cost law of three finished runs (a failed run's seconds are no cost)."""
    pace = progress.Pace({"r1": (10, 100.0), "r2": (20, 1000.0), "r3": (100, 200.0), "r4": (50, 500.0)})
    clock.now += 60
    pace.add("r4", 40)
    pace.finish("r1", 4.0)
    pace.finish("r2", None)
    assert pace.cost() is None and pace.seconds_left() is None
    pace.finish("r2", 14.0)
    assert pace.seconds_left() is None
    pace.finish("r3", 14.0)
    assert pace.cost() == pytest.approx((2.0, 0.1, 0.01)) and pace.seconds_left() is not None


def test_finished_runs_teach_the_cost_of_setup_steps_and_flops(clock):
    """Runs costing 2 s + 0.1 s a step + 0.01 s a FLOP (exactly): three finished runs give the
    law, so a fourth of 50 steps and 500 FLOPs costs 12 s; 32 s of work done in 64 s (a busy
    machine) leaves 12 s of work: 24 s at that pace."""
    pace = progress.Pace({"r1": (10, 100.0), "r2": (20, 1000.0), "r3": (100, 200.0), "r4": (50, 500.0)})
    clock.now += 64
    for run, seconds in (("r1", 4.0), ("r2", 14.0), ("r3", 14.0)):
        pace.finish(run, seconds)
    assert pace.cost() == pytest.approx((2.0, 0.1, 0.01))
    assert pace.seconds_left() == pytest.approx(24.0)
    pace.add("r4", 25)  # half of its steps: 5 s of its 10 s of steps and FLOPs done
    assert pace.seconds_left() == pytest.approx(64 * 7 / 37)


def test_the_sweep_never_ends_before_its_longest_chain_of_runs(clock):
    """Two runs left, of 12 s each, in one WSD family: one worker trains them in turn. At the
    pace of two workers (32 s of work in 16 s) 24 s of work take 12 s, but the chain takes 24 s."""
    work = {"r1": (10, 100.0), "r2": (20, 1000.0), "r3": (100, 200.0), "r4": (50, 500.0), "r5": (50, 500.0)}
    pace = progress.Pace(work, group={"r4": "family", "r5": "family"})
    alone = progress.Pace(work)  # each its own chain: a run's 12 s
    clock.now += 16
    for p in (pace, alone):
        for run, seconds in (("r1", 4.0), ("r2", 14.0), ("r3", 14.0)):
            p.finish(run, seconds)
    assert (pace.seconds_left(), alone.seconds_left()) == pytest.approx((24.0, 12.0))


def test_nothing_is_said_before_ten_seconds_or_after_the_last_run(clock):
    stream = io.StringIO()
    work = {"a": (10, 100.0), "b": (20, 1000.0), "c": (100, 200.0), "d": (50, 500.0)}
    display = progress.SweepDisplay(4, stream=stream, work=work)
    clock.now += 9
    for run, seconds in (("a", 4.0), ("b", 14.0), ("c", 14.0)):
        display.run_finished(f"run {run}", run_id=run, seconds=seconds)
    assert stream.getvalue().splitlines()[-1] == "sweep [############....] 3/4 runs | run c"
    clock.now += 7  # 32 s of work in 16 s: 12 s of work take 6 s at that pace, but d alone takes 12 s
    display.run_progress("d", 25 * 8, 50 * 8, 2.5)
    assert stream.getvalue().splitlines()[-1].startswith("sweep [############....] 3/4 runs, about 12.0s left | run d")
    display.run_finished("run d", run_id="d", seconds=12.0)
    assert stream.getvalue().splitlines()[-1] == "sweep [################] 4/4 runs | run d"
    batch = progress.SweepDisplay(4, stream=stream, work=work, scope=" in this batch")  # an adaptive sweep's batch
    clock.now += 16
    for run, seconds in (("a", 4.0), ("b", 14.0), ("c", 14.0)):
        batch.run_finished(f"run {run}", run_id=run, seconds=seconds)
    assert stream.getvalue().splitlines()[-1] == "sweep [############....] 3/4 runs, about 12.0s left in this batch | run c"
    assert progress.Pace({}).seconds_left() is None


def test_a_wsd_sweep_reports_the_steps_its_plan_executes(tmp_path, monkeypatch):
    """Every progress report adds its steps, the stable phase once per family: at the end the
    pace has heard each run's executed steps (to its last, trimmed step) and every result."""
    displays = []

    class Heard(progress.SweepDisplay):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            displays.append(self)

    monkeypatch.setattr(driver, "SweepDisplay", Heard)
    p = plan(host=HOST, **{**sweep_support.small_plan_options(budgets=[2e7, 4e7, 8e7]), "schedule": "wsd"})
    p.run(tmp_path, show_progress=False, skip_parity=True, host=HOST)
    (display,) = displays
    pace = display.pace
    assert sum(flops for _, flops in pace.work.values()) == pytest.approx(p.total_flops)
    for run_id, (steps, _) in pace.work.items():
        assert 0 <= pace.trained[run_id] - steps < 1
    assert set(pace.finished) == set(pace.work) and all(s > 0 for s in pace.finished.values())


def test_the_readme_and_speed_page_quote_the_stored_time_left_figures():
    """The medians and worst ratios the README and docs/guide/speed.md quote are
    benchmarks/results/time_left.json's."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    stored = json.loads((root / "benchmarks" / "results" / "time_left.json").read_text())
    figures = [f"x{stored[label]['all'][key]:.2f}" for label in ("examples/external-trainer, stop 55", "vit demo, stop 55", "demo, stop 55")
               for key in ("median_ratio", "worst_ratio")]
    for path in (root / "README.md", root / "docs" / "guide" / "speed.md"):
        text = path.read_text()
        start = text.index("bench_time_left.py --config")
        end = text.find("\n" if path.name == "README.md" else "\n\n", start)  # its table row, its paragraph
        quoted = " ".join(text[start:end].split())
        assert [f for f in figures if f not in quoted] == [], path.name


def test_a_term_the_finished_runs_cannot_tell_apart_is_left_out(clock):
    """Three runs of one budget share their FLOPs: the constant and the FLOPs term are one column,
    and a law that split them said 180 s for a sweep with 46 s to go. The FLOPs term is left out
    until runs of another budget finish: these cost 2 s + 0.01 s a step."""
    pace = progress.Pace({"r1": (100, 1e10), "r2": (200, 1e10), "r3": (400, 1.0001e10), "big": (800, 1e11)})
    for run, seconds in (("r1", 3.0), ("r2", 4.0), ("r3", 6.0)):
        pace.finish(run, seconds)
    assert pace.cost() == pytest.approx((2.0, 0.01, 0.0))
    clock.now += 13  # 13 s of work in 13 s: "big" costs 10 s
    assert pace.seconds_left() == pytest.approx(10.0)


def test_a_chain_in_flight_goes_at_its_own_measured_pace(clock):
    """The law (2 s + 0.1 s a step + 0.01 s a FLOP) says a run of 100 steps and 500 FLOPs costs
    17 s; the chain's run in flight has taken 0.2 s a step (a larger size than any finished): its
    80 steps left take 16 s, and the next run of its chain 2 + 100 x 0.2 = 22 s: 38 s."""
    work = {"r1": (10, 100.0), "r2": (20, 1000.0), "r3": (100, 200.0), "big": (100, 500.0), "big2": (100, 500.0)}
    pace = progress.Pace(work, group={"big": "family", "big2": "family"})
    for run, seconds in (("r1", 4.0), ("r2", 14.0), ("r3", 14.0)):
        pace.finish(run, seconds)
    clock.now += 16
    pace.add("big", 0)  # its first report: it starts
    assert pace.seconds_left() == pytest.approx(34.0)  # by the law: 17 s + 17 s
    clock.now += 1
    pace.add("big", 5)  # 1 s and 5 steps: too little to time
    assert pace.own_pace() == {}
    clock.now += 3
    pace.add("big", 15)
    assert pace.own_pace() == {"family": pytest.approx(0.2)}
    assert pace.seconds_left() == pytest.approx(38.0)
