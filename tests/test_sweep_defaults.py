"""Defaults that are fast for the run's size and honest about time: the threads a run gets, the
planner's notes when it cannot plan what was asked, and the probe-calibrated estimate."""

from __future__ import annotations

import dataclasses
import os

import executor_tasks
import pytest
import sweep_support

from flops_fit import machine
from flops_fit.executors import threads
from flops_fit.executors.local import LocalExecutor
from flops_fit.sweeps.demo import demo_plan
from flops_fit.sweeps.estimate import Timing, run_seconds
from flops_fit.sweeps.planner import plan

HOST = sweep_support.host()


@dataclasses.dataclass
class _Run:
    flops_per_unit: float
    batch_size: int = 32
    seq_len: int = 64


def test_a_small_run_gets_one_thread_whatever_the_machine_has(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert threads.default_threads([_Run(6 * 10_000)], workers=1) == 1  # a 10k-parameter GPT step
    assert threads.default_threads([_Run(6 * 50e6)], workers=1) > 1


def test_threads_never_exceed_the_free_cores_share(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    big = [_Run(6 * 1e9)]
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert threads.default_threads(big, workers=1) == 8 and threads.default_threads(big, workers=3) == 2
    monkeypatch.setattr(machine, "running_elsewhere", lambda: None)  # the load average alone says
    monkeypatch.setattr(os, "getloadavg", lambda: (6.2, 6.0, 6.0))  # a busy machine: 2 cores free
    assert threads.default_threads(big, workers=1) == 2 and threads.default_threads(big, workers=4) == 1


@pytest.mark.e2e
def test_the_executor_gives_runs_the_default_threads_in_process_and_in_workers(monkeypatch):
    run = sweep_support.small_plan_options()  # a tiny model: one thread either way
    spec = plan(host=HOST, **run).runs[0]
    assert threads.default_threads([spec], 1) == 1
    with LocalExecutor(workers=1) as serial:
        assert [n for _, n in serial.map(executor_tasks.torch_threads, [spec])] == [1]
    with LocalExecutor(workers=2) as parallel:
        assert [n for _, n in parallel.map(executor_tasks.torch_threads, [spec, spec])] == [1, 1]
    with LocalExecutor(workers=1, threads=2) as chosen:  # a given count is kept
        assert [n for _, n in chosen.map(executor_tasks.torch_threads, [spec])] == [2]


def test_the_planner_says_when_it_plans_fewer_sizes_than_asked_and_why():
    p = plan(host=HOST, **sweep_support.small_plan_options(sizes=None, sizes_per_budget=7, span=3.0, budgets=[1e9, 2e9]))
    fewer = [n for n in p.notes if "sizes asked for" in n]
    assert len(fewer) == 2 and all("of the 7 sizes asked for" in n and "widen span" in n for n in fewer)
    assert len(p.runs) == 7  # 3 + 4 sizes, as the notes say
    assert "note: " + fewer[0] in p.table()


def test_the_planner_says_when_every_size_misses_the_tokens_per_parameter_target():
    p = plan(host=HOST, **sweep_support.small_plan_options(tokens_per_param=1e6))
    notes = [n for n in p.notes if "tokens per parameter" in n]
    assert len(notes) == 2 and all("fewer tokens per parameter" in n and "target 1e+06" in n for n in notes)


def test_the_demo_plan_needs_no_note():
    assert demo_plan("gpt")[0].notes == []


def test_a_run_estimate_adds_setup_steps_and_evaluation_interpolated_in_size():
    probed = [Timing(1_000, 1.0, 0.01, 0.5), Timing(100_000, 3.0, 0.09, 1.5)]
    spec = plan(host=HOST, **sweep_support.small_plan_options()).runs[0]
    at = dataclasses.replace(spec, params=10_000)  # halfway in log parameters: geometric means
    assert run_seconds(at, 100, probed) == pytest.approx(3 ** 0.5 + 100 * 0.03 + 0.75 ** 0.5 * 1.0, rel=1e-9)
    below = dataclasses.replace(spec, params=10)
    assert run_seconds(below, 10, probed) == pytest.approx(1.0 + 0.1 + 0.5)


def test_calibrate_times_the_plans_own_runs_and_the_table_says_so():
    p = plan(host=HOST, **sweep_support.small_plan_options())
    assert "a guess" in p.table()
    p.calibrate(host=HOST, threads=1)
    sizes = sorted({r.params for r in p.runs})
    assert [t.params for t in p.timings] == sorted({sizes[0], sizes[len(sizes) // 2], sizes[-1]})
    assert all(t.step_s > 0 and t.setup_s >= 0 and t.eval_s > 0 for t in p.timings)
    assert p.estimated_seconds() == pytest.approx(sum(p.estimated_seconds(r) for r in p.runs))
    assert "measured: 3 sizes probed" in p.table()
