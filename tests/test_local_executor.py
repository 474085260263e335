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


SCRIPT = '''
import flops_fit

plan = flops_fit.plan(model="gpt", budgets=[3e8], sizes=[16, 32, 48], batch_size=5, seq_len=32, min_steps=3,
                      eval_tokens=320, model_config={{"n_layer": 2, "block_size": 32}}, device="cpu")
{body}
'''


def _script(tmp_path, body: str):
    import subprocess
    import sys

    path = tmp_path / "my_sweep.py"
    path.write_text(SCRIPT.format(body=body))
    return path, subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path,
                                timeout=300)


@pytest.mark.parametrize("body", ['plan.run("out", workers=2, show_progress=False)',
                                  'flops_fit.plan(plan.options.replace(processes_per_run=2)).run("out", show_progress=False)'])
def test_a_script_without_a_main_guard_is_refused_before_any_worker_or_folder(tmp_path, body):
    """Worker processes (a sweep's, or a run's ranks) start by running the ``__main__`` script's top
    level again (spawn): a script that runs a sweep on 2 workers without ``if __name__ == "__main__":``
    used to start the sweep again in each worker (StoreBusy tracebacks, runs lost, a
    ConnectionResetError); now one error names the fix before anything starts."""
    path, done = _script(tmp_path, body)
    assert done.returncode == 1 and not (tmp_path / "out").exists()
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"flops_fit.errors.OptionError: {path} starts flops-fit's worker processes")
    assert 'if __name__ == "__main__":' in last and "or pass workers=1" in last


@pytest.mark.e2e
def test_a_sweep_call_a_worker_reaches_outside_the_guard_is_named_and_the_driver_ends_cleanly(tmp_path):
    """A script with a guard that leaves the sweep outside it: each worker, re-running the script,
    stops at the call with the fix; the driver records its runs as lost and ends (no
    ConnectionResetError from a worker that died before it could speak)."""
    path, done = _script(tmp_path, 'result = plan.run("out", workers=2, show_progress=False)\n'
                                   'if __name__ == "__main__":\n    print(sorted(set(result.runs.status)))')
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "['failed']"
    assert f"a flops-fit worker process, importing {path}, reached a call that starts a sweep" in done.stderr
    assert "ConnectionResetError" not in done.stderr


def test_a_workers_checkpoint_warning_is_one_line_as_the_cli_prints_it(capfd):
    """A resumed sweep whose worker skipped a damaged checkpoint printed Python's raw warning: the
    source file and line, the category, and the source line below it."""
    with LocalExecutor(workers=2, threads=1) as executor:
        assert dict(executor.map(executor_tasks.warn_checkpoint_skipped, [7])) == {7: 7}
    assert capfd.readouterr().err.splitlines() == [
        "flops-fit: step-7.safetensors is corrupt; falling back to an earlier checkpoint"]


DRIVER = """
import sys
sys.path.insert(0, {tests!r})
import executor_tasks
from flops_fit.executors.local import LocalExecutor

if __name__ == "__main__":
    with LocalExecutor(workers=2, threads=1) as executor:
        list(executor.map(executor_tasks.train_until_stopped, [sys.argv[1]]))
"""


def test_a_worker_whose_driver_is_killed_stops_instead_of_training_on(tmp_path):
    """kill -9 of the driver left its workers training (until their next report found the pipe
    closed), beside the driver that resumed the sweep, their steps counted nowhere."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    script, pid_file = tmp_path / "driver.py", tmp_path / "worker.pid"
    script.write_text(DRIVER.format(tests=str(Path(__file__).resolve().parent)))
    driver = subprocess.Popen([sys.executable, str(script), str(pid_file)])
    deadline = time.monotonic() + 120
    while not (pid_file.exists() and pid_file.read_text()):
        assert time.monotonic() < deadline and driver.poll() is None, "the worker never started its run"
        time.sleep(0.05)
    worker = int(pid_file.read_text())
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()

    def running(pid):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        return state != "Z"  # a zombie has ended (nobody reaps orphans in some containers)

    deadline = time.monotonic() + 30
    while running(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    stopped = not running(worker)
    if not stopped:
        os.kill(worker, signal.SIGKILL)
    assert stopped, "the orphaned worker was still training 30 s after its driver was killed"
