"""The Ray executor on a local Ray started inside the tests (2 CPUs).

Skipped when the ``ray`` extra is not installed; CI installs it.
"""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'flops-fit[ray]'")

import sweep_support  # noqa: E402

import flops_fit  # noqa: E402
from flops_fit.errors import FlopsFitError, RunLost  # noqa: E402
from flops_fit.executors.ray import RayExecutor  # noqa: E402
from flops_fit.plugin.host import reset_host  # noqa: E402
from flops_fit.store.run_store import RunStore  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")  # one local Ray per xdist worker, not per test
TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray (2 CPUs) whose workers, like this process, load the tests' tiny-lm plugin."""
    from ray import cloudpickle

    # functions defined in this test module travel to the Ray workers by value
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    saved = {k: os.environ.get(k) for k in ("FLOPS_FIT_PLUGINS", "PYTHONPATH", "RAY_worker_niceness")}
    os.environ["FLOPS_FIT_PLUGINS"] = "sweep_support"
    # Ray starts its workers at niceness 15: beside any other busy process they all but stop,
    # and the tests' sweeps run out of their time limits. At 0 they share the CPU fairly.
    os.environ["RAY_worker_niceness"] = "0"
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), saved["PYTHONPATH"]]))
    reset_host()
    executor = RayExecutor(num_cpus=2)
    executor.connect()
    yield executor
    executor.close()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    reset_host()


class Spec:
    def __init__(self, run_id, marker_dir=None, params=1000, device="cpu"):
        self.run_id, self.marker_dir, self.params, self.device = run_id, marker_dir, params, device


def square(spec, progress):
    return int(spec.run_id) ** 2


def fails(spec, progress):
    raise ValueError(f"loss diverged in run {spec.run_id}")


def dies_once(spec, progress):
    """Kill this worker process the first time; succeed when Ray runs it again."""
    marker = Path(spec.marker_dir) / f"attempt-{spec.run_id}"
    attempts = int(marker.read_text()) if marker.exists() else 0
    marker.write_text(str(attempts + 1))
    if attempts == 0:
        os._exit(1)
    return f"run {spec.run_id} finished on attempt {attempts + 1}"


def test_registered_as_a_builtin_executor():
    assert "ray" in flops_fit.list_executors()
    assert flops_fit.executor_info("ray").builder == "flops_fit.executors.ray:build"


@pytest.mark.e2e
def test_results_stream_back_once_per_item(local_ray):
    items = [Spec(str(i)) for i in range(6)]
    results = list(local_ray.map(square, items))
    assert sorted(int(item.run_id) for item, _ in results) == list(range(6))
    assert all(result == int(item.run_id) ** 2 for item, result in results)


@pytest.mark.e2e
def test_an_exception_in_the_run_is_its_result_and_not_retried(local_ray):
    ((item, outcome),) = list(local_ray.map(fails, [Spec("7")]))
    assert isinstance(outcome, ValueError)
    assert "loss diverged in run 7" in str(outcome)


@pytest.mark.e2e
def test_a_killed_worker_is_retried(local_ray, tmp_path):
    executor = RayExecutor(max_retries=2)
    ((item, outcome),) = list(executor.map(dies_once, [Spec("3", tmp_path)]))
    assert outcome == "run 3 finished on attempt 2"
    assert (tmp_path / "attempt-3").read_text() == "2"


@pytest.mark.e2e
def test_a_worker_dying_past_the_retry_limit_fails_the_run_with_the_reason(local_ray, tmp_path):
    executor = RayExecutor(max_retries=0)
    ((item, outcome),) = list(executor.map(dies_once, [Spec("4", tmp_path)]))
    assert isinstance(outcome, RunLost)
    assert "died 1 time(s) (max_retries=0)" in str(outcome)
    assert (tmp_path / "attempt-4").read_text() == "1"  # not run again


def test_resources_follow_the_run():
    executor = RayExecutor(cpus_per_run=2)
    cpu = executor.resources(Spec("1", params=10_000_000))
    assert cpu["num_cpus"] == 2 and cpu["num_gpus"] == 0
    assert cpu["memory"] == 512 * 2**20 + 16 * 10_000_000
    assert executor.resources(Spec("1", device="cuda:0"))["num_gpus"] == 1


@pytest.mark.e2e
def test_a_run_of_two_processes_is_one_task_that_launches_its_ranks(local_ray):
    """The gang reserves both CPUs of the local Ray and trains one process's run (to 1e-5)."""
    from flops_fit.training.loop import train
    from flops_fit.training.task import train_item

    spec = flops_fit.plan(host=sweep_support.host(), **sweep_support.small_plan_options(budgets=[2e7])).runs[-1]
    gang = dataclasses.replace(spec, processes_per_run=2)
    ((_, outcome),) = list(RayExecutor(cpus_per_run=1).map(train_item, [gang]))
    assert outcome.status == "done", outcome
    assert outcome.loss == pytest.approx(train(spec, host=sweep_support.host()).loss, rel=1e-5)


@pytest.mark.parametrize(
    ("options", "message"),
    [({"max_retries": -1}, "max_retries must be a non-negative integer"),
     ({"cpus_per_run": 0}, "cpus_per_run must be a finite positive number"),
     # accepted, then refused by Ray (or failing unnamed) after the plan was recorded in the sweep's folder
     ({"num_cpus": -1}, "num_cpus must be a positive integer, got -1"),
     ({"num_cpus": "2"}, "num_cpus must be a positive integer, got '2'"),
     ({"gpus_per_run": -1}, "gpus_per_run must be a finite number >= 0, got -1"),
     ({"workers": 0}, "workers must be a positive integer, got 0"),
     ({"init_options": 5}, "init_options must be a table of ray.init"),
     ({"address": "garbage"}, r"the Ray address must be HOST:PORT \(as `ray start --head` prints it\), "
                              r"ray://HOST:PORT, 'auto' or 'local', got 'garbage'")],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(FlopsFitError, match=message):
        RayExecutor(**options)


def test_a_bad_ray_option_in_a_sweep_file_is_one_line_and_no_store(tmp_path):
    """A negative num_cpus passed the sweep's checks; Ray refused it once the plan was in the folder."""
    config = tmp_path / "sweep.toml"
    config.write_text(sweep_support.SMALL_SWEEP_TOML + '\n[executor]\nname = "ray"\nnum_cpus = -1\n')
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "flops_fit", "sweep", str(config), "--out", str(out)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
             "FLOPS_FIT_PLUGINS": "sweep_support"},
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [f"flops-fit: error: {config} [executor] (or its command-line "
                                                  "options): num_cpus must be a positive integer, got -1"]
    assert not out.exists()


@pytest.mark.e2e
def test_the_cluster_is_joined_before_the_sweeps_folder_is_written(local_ray):
    """The driver asks check_submission before it writes the folder: the cluster at the address is joined
    there, so a cluster that will not take the driver is refused with nothing recorded (it was refused
    only once the plan was stored)."""
    address = ray.get_runtime_context().gcs_address
    joined = subprocess.run(
        [sys.executable, "-c", "import ray; from flops_fit.executors.ray import RayExecutor; "
         f"RayExecutor(address={address!r}).check_submission([]); print(ray.is_initialized())"],
        capture_output=True, text=True, timeout=120,
    )
    assert joined.returncode == 0, joined.stderr
    assert joined.stdout.split() == ["True"]


@pytest.mark.e2e
def test_a_cluster_that_refuses_the_driver_is_one_line_naming_token_auth_and_no_store(local_ray, tmp_path):
    """A driver without RAY_AUTH_MODE=token is refused by a token-authenticated cluster (Ray's default for one
    it starts): the line asked only whether the address was a head's, after the plan was recorded."""
    if os.environ.get("RAY_AUTH_MODE") != "token":
        pytest.skip("this Ray started its cluster without token authentication")
    config = tmp_path / "sweep.toml"
    config.write_text(sweep_support.SMALL_SWEEP_TOML)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    result = subprocess.run(
        [sys.executable, "-m", "flops_fit", "sweep", str(config), "--out", str(out), "--executor", "ray",
         "--address", ray.get_runtime_context().gcs_address],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("flops-fit: error:")]
    assert len(errors) == 1 and errors[0].endswith("is joined with RAY_AUTH_MODE=token set and its token in "
                                                   "~/.ray/auth_token"), result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def _losses(frame):
    return frame.set_index("run_id").loss.to_dict()


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    """The reference: the same small sweep on the local executor, in this process."""
    out = tmp_path_factory.mktemp("local")
    return flops_fit.sweep(
        host=sweep_support.host(), out_dir=out, show_progress=False, **sweep_support.small_plan_options()
    ).runs


@pytest.mark.e2e
def test_a_sweep_on_ray_gives_the_local_executors_run_ids_and_losses(local_ray, local_sweep, tmp_path):
    result = flops_fit.sweep(
        out_dir=tmp_path / "ray", executor="ray", show_progress=False, **sweep_support.small_plan_options()
    )
    on_ray = result.runs
    assert len(on_ray) == len(local_sweep) == 6 and set(on_ray.status) == {"done"}
    assert _losses(on_ray) == pytest.approx(_losses(local_sweep), rel=1e-6)  # same ids, same losses
    with RunStore(result.out_dir) as store:
        assert store.counts() == {"done": 6}  # each run recorded once


@pytest.mark.e2e
def test_cli_sweep_joins_a_running_cluster_by_address(local_ray, local_sweep, tmp_path):
    config = tmp_path / "sweep.toml"
    config.write_text(sweep_support.SMALL_SWEEP_TOML)
    address = ray.get_runtime_context().gcs_address
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "flops_fit", "sweep", str(config), "--out", str(out),
         "--executor", "ray", "--address", address],
        capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )
    assert result.returncode == 0, result.stderr
    assert "6 runs: 6 done" in result.stdout
    assert _losses(RunStore(out).runs_frame()) == pytest.approx(_losses(local_sweep), rel=1e-6)


def test_address_without_the_ray_executor_is_refused(tmp_path):
    config = tmp_path / "sweep.toml"
    config.write_text(sweep_support.SMALL_SWEEP_TOML)
    result = subprocess.run(
        [sys.executable, "-m", "flops_fit", "sweep", str(config), "--address", "127.0.0.1:6379"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(TESTS), "FLOPS_FIT_PLUGINS": "sweep_support"},
    )
    assert result.returncode == 2
    assert "--address is for the ray executor (this sweep uses 'local'): add --executor ray" in result.stderr


def _closed_port():
    """A local port nothing listens on: bound by the OS, then released."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_that_does_not_answer_is_refused_when_the_executor_is_built(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    port = _closed_port()
    with pytest.raises(FlopsFitError, match=f"the Ray address 127.0.0.1:{port} does not answer"):
        RayExecutor(address=f"127.0.0.1:{port}")
    monkeypatch.setenv("RAY_ADDRESS", f"ray://127.0.0.1:{port}")
    with pytest.raises(FlopsFitError, match="does not answer"):
        RayExecutor()


def test_cli_sweep_to_an_address_that_does_not_answer_is_one_line_and_no_store(tmp_path):
    """ray.init retried a dead address for ever, after the plan was recorded in the store."""
    config = tmp_path / "sweep.toml"
    config.write_text(sweep_support.SMALL_SWEEP_TOML)
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "flops_fit", "sweep", str(config), "--out", str(out),
         "--executor", "ray", "--address", f"127.0.0.1:{_closed_port()}"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
             "FLOPS_FIT_PLUGINS": "sweep_support"},
    )
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("flops-fit: error:")]
    assert len(errors) == 1 and "does not answer (Connection refused)" in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


@pytest.mark.e2e
def test_a_driver_killed_mid_sweep_resumes_from_the_store(local_ray, local_sweep, tmp_path):
    import signal
    import time

    config = tmp_path / "sweep.toml"
    config.write_text(sweep_support.SMALL_SWEEP_TOML)
    out, address = tmp_path / "out", ray.get_runtime_context().gcs_address
    command = [sys.executable, "-m", "flops_fit", "sweep", str(config), "--out", str(out),
               "--executor", "ray", "--address", address]
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, rows = time.monotonic() + 240, {}
    while time.monotonic() < deadline and driver.poll() is None:
        rows = sweep_support.store_rows(out / "runs.sqlite") if (out / "runs.sqlite").exists() else {}
        statuses = [r[0] for r in rows.values()]
        if "done" in statuses and "running" in statuses:
            break
        time.sleep(0.02)
    assert driver.poll() is None, "the sweep finished before its driver could be killed"
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    killed = sweep_support.store_rows(out / "runs.sqlite")
    finished_before = {k: v for k, v in killed.items() if v[0] == "done"}

    resumed = subprocess.run(command + ["--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    final = sweep_support.store_rows(out / "runs.sqlite")
    for run_id, before in finished_before.items():
        assert final[run_id] == before  # kept as it was: same loss, same finish time, trained once
    assert {k: v[1] for k, v in final.items()} == pytest.approx(_losses(local_sweep), rel=1e-6)


def train_preempted_once(spec, progress, *, folder, preempt):
    """Train ``spec`` with checkpoints in ``folder``; with ``preempt``, the first attempt's
    worker gets SIGTERM (what a preempted node receives) after the run's first curve point."""
    import math
    import signal

    from flops_fit.training.checkpoint import CheckpointPolicy
    from flops_fit.training.task import train_item

    marker = Path(folder) / f"preempted-{spec.run_id}"
    marker.parent.mkdir(parents=True, exist_ok=True)

    def listen(run_id, done, total, loss):
        progress(run_id, done, total, loss)
        if preempt and not math.isnan(loss) and not marker.exists():
            marker.write_text(str(done))
            os.kill(os.getpid(), signal.SIGTERM)

    policy = CheckpointPolicy(str(Path(folder) / "checkpoints"), seconds=600)  # only the stop saves
    return train_item(spec, listen, checkpoints=policy)


@pytest.mark.e2e
def test_a_preempted_task_checkpoints_and_its_retry_resumes_bit_for_bit(local_ray, tmp_path):
    import functools

    spec = flops_fit.plan(host=sweep_support.host(), **sweep_support.small_plan_options(budgets=[2.1e7])).runs[1]
    executor = RayExecutor(max_retries=1)
    runs = {}
    for name, preempt in (("uninterrupted", False), ("preempted", True)):
        task = functools.partial(train_preempted_once, folder=str(tmp_path / name), preempt=preempt)
        ((_, runs[name]),) = list(executor.map(task, [spec]))
    reference, result = runs["uninterrupted"], runs["preempted"]
    stopped_at = int((tmp_path / "preempted" / f"preempted-{spec.run_id}").read_text())
    assert 0 < stopped_at < spec.tokens
    # the retry went on from the checkpoint the SIGTERM made, one step after the report
    resumed = result.timings["resumed_from_step"]
    assert stopped_at // (spec.batch_size * spec.seq_len) <= resumed <= stopped_at // (spec.batch_size * spec.seq_len) + 1
    assert "resumed_from_step" not in reference.timings
    assert (result.status, result.loss, result.curve) == (reference.status, reference.loss, reference.curve)
