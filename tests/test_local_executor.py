"""The local executor's worker processes: every outcome comes back once, progress travels
to the driver, a worker that dies costs only its own run, and close() stops the workers."""

from __future__ import annotations

import multiprocessing

import executor_tasks
import pytest

from flops_fit.errors import OptionError, RunLost
from flops_fit.executors.local import LocalExecutor


def test_worker_processes_return_every_outcome_and_route_progress():
    heard = []
    with LocalExecutor(workers=2, threads=1, on_progress=lambda *m: heard.append(m)) as executor:
        pairs = dict(executor.map(executor_tasks.square, range(5)))
    assert pairs == {i: i * i for i in range(5)}
    assert sorted(heard) == [(f"run-{i}", i, 10, float(i)) for i in range(5)]


def test_an_exception_is_that_runs_outcome():
    with LocalExecutor(workers=2, threads=1) as executor:
        pairs = dict(executor.map(executor_tasks.fail_on_three, range(5)))
    assert isinstance(pairs.pop(3), ValueError)
    assert pairs == {0: 0, 1: 1, 2: 2, 4: 4}


def test_an_outcome_that_cannot_be_sent_back_arrives_as_an_error_naming_it():
    """The one fallback (``executors.base.transportable``) every executor and the rank launcher use."""
    with LocalExecutor(workers=2, threads=1) as executor:
        pairs = dict(executor.map(executor_tasks.fail_unpicklably, range(3)))
    lost = pairs.pop(1)
    assert type(lost) is RuntimeError
    assert str(lost).startswith("NeedsTwoArguments: item 1: a custom constructor (could not be sent back: ")
    assert pairs == {0: 0, 2: 2}


def test_a_dead_worker_loses_only_its_run_and_a_new_worker_takes_the_rest():
    with LocalExecutor(workers=2, threads=1) as executor:
        pairs = dict(executor.map(executor_tasks.die_on_two, range(6)))
    lost = pairs.pop(2)
    assert isinstance(lost, RunLost) and "exit code 3" in str(lost)
    assert pairs == {0: 0, 1: 1, 3: 3, 4: 4, 5: 5}


def test_close_stops_workers_still_running_after_an_abandoned_map():
    before = set(multiprocessing.active_children())
    executor = LocalExecutor(workers=2, threads=1)
    outcomes = executor.map(executor_tasks.block_unless_zero, [0, 1])
    assert next(outcomes) == (0, 0)  # item 1 is still running, and never finishes by itself
    executor.close()
    assert set(multiprocessing.active_children()) <= before


def test_workers_of_runs_that_span_processes_may_start_them():
    with LocalExecutor(workers=2, threads=1) as executor:
        outcomes = [outcome for _, outcome in executor.map(executor_tasks.start_a_process,
                                                           [executor_tasks.Gang(3), executor_tasks.Gang(4)])]
    assert sorted(outcomes) == [3, 4]  # a daemonic worker could not have started them


def test_a_worker_of_multi_process_runs_gets_one_gpu_per_rank():
    with LocalExecutor(devices=["cuda:0,1", "cuda:2,3"], threads=1) as executor:
        seen = [outcome for _, outcome in executor.map(executor_tasks.visible_gpus,
                                                       [executor_tasks.Gang(i) for i in range(4)])]
    assert sorted(set(seen)) == ["0,1", "2,3"]  # each worker's ranks see their own two GPUs


def test_runs_of_k_processes_on_workers_with_fewer_gpus_are_refused():
    executor = LocalExecutor(devices=["cuda:0", "cuda:1", "cuda:2", "cuda:3"])
    with pytest.raises(OptionError, match=r"runs of 2 processes need 2 GPUs per worker, one per rank, but devices "
                                          r"\['cuda:0', 'cuda:1', 'cuda:2', 'cuda:3'\] name fewer: list each "
                                          r"worker's GPUs, e.g. devices = \['cuda:0,1', 'cuda:2,3'\]"):
        list(executor.map(executor_tasks.visible_gpus, [executor_tasks.Gang(0)]))
    assert executor._supervisor is None  # refused before any worker started


def test_bad_options_are_refused():
    with pytest.raises(OptionError, match="workers must be a positive integer, got 0"):
        LocalExecutor(workers=0)
    with pytest.raises(OptionError, match="threads must be a positive integer, got -1"):
        LocalExecutor(threads=-1)
    with pytest.raises(OptionError, match=r"devices must look like 'cuda:0' \(or 'cuda:0,1': a worker's GPUs\), "
                                          r"got \['gpu0', 'cuda:0,'\]"):
        LocalExecutor(devices=["gpu0", "cuda:0,"])
