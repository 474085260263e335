"""The SLURM executor, tested on submitit's local cluster (each job a process on this machine,
preemption signalled with USR2 as SLURM does).

Skipped when the ``slurm`` extra is not installed; CI installs it.
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("submitit", reason="the slurm extra is not installed: pip install 'flops-fit[slurm]'")

import executor_tasks  # noqa: E402
import slurm_tasks  # noqa: E402
import sweep_support  # noqa: E402
from plugin_kit import process_host  # noqa: E402

import flops_fit  # noqa: E402
from flops_fit.errors import FlopsFitError, OptionError, RunLost  # noqa: E402
from flops_fit.executors.slurm import SlurmExecutor  # noqa: E402
from flops_fit.executors.slurm_options import gigabytes, minutes  # noqa: E402
from flops_fit.store.run_store import RunStore  # noqa: E402

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def job_env(monkeypatch):
    """Jobs inherit this process's environment (as sbatch exports it): they import the tests'
    task functions and tiny-lm plugin."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("FLOPS_FIT_PLUGINS", "sweep_support")


def local(tmp_path, **options):
    return SlurmExecutor(tmp_path / "jobs", cluster="local", poll_seconds=0.1, **options)


def test_registered_as_a_builtin_executor():
    assert "slurm" in flops_fit.list_executors()
    assert flops_fit.executor_info("slurm").builder == "flops_fit.executors.slurm:build"


@pytest.mark.e2e
def test_results_progress_and_job_states_come_back_once_per_item(job_env, tmp_path, capsys):
    heard = []
    with local(tmp_path, workers=2, on_progress=lambda *report: heard.append(report)) as executor:
        results = dict(executor.map(executor_tasks.square, [1, 2, 3]))
    assert results == {1: 1, 2: 4, 3: 9}
    assert "slurm jobs: 2 RUNNING\n" in capsys.readouterr().err  # the first look, before any job could end
    assert sorted(heard) == [("run-1", 1, 10, 1.0), ("run-2", 2, 10, 2.0), ("run-3", 3, 10, 3.0)]
    assert list((tmp_path / "jobs" / "progress").iterdir()) == []  # relayed, then removed


@pytest.mark.e2e
def test_the_runs_exception_is_its_outcome_and_a_killed_job_is_a_lost_run(job_env, tmp_path):
    with local(tmp_path) as executor:
        ((_, failed),) = executor.map(executor_tasks.fail_on_three, [3])
        ((_, lost),) = executor.map(executor_tasks.die_on_two, [2])
    assert isinstance(failed, ValueError) and str(failed) == "item 3 diverged"
    assert isinstance(lost, RunLost)
    assert "ended without a result" in str(lost) and "_log.err" in str(lost)


@pytest.mark.e2e
def test_a_run_on_two_processes_is_one_job_of_two_tasks_and_rank_0_reports(job_env, tmp_path):
    spec = slurm_tasks.Spec("run-a", str(tmp_path), processes_per_run=2)
    heard = []
    with local(tmp_path, on_progress=lambda *report: heard.append(report)) as executor:
        assert executor.resources(spec) == {"nodes": 1, "tasks_per_node": 2, "gpus_per_node": 0}
        ((_, outcome),) = executor.map(slurm_tasks.distributed_environment, [spec])
    assert outcome == "rank 0 of 2"
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [(s["RANK"], s["LOCAL_RANK"], s["WORLD_SIZE"]) for s in ranks] == [("0", "0", "2"), ("1", "1", "2")]
    assert ranks[0]["MASTER_ADDR"] == ranks[1]["MASTER_ADDR"] and ranks[0]["MASTER_PORT"] == ranks[1]["MASTER_PORT"]
    assert heard == [("run-a", 1, 1, 0.0)]  # rank 0's reports only


@pytest.mark.skipif(importlib.util.find_spec("flops_fit.training.launch") is None,
                    reason="needs the distributed runs of processes_per_run")
@pytest.mark.e2e
def test_a_sweep_with_two_processes_per_run_trains_on_slurm_like_one_process(job_env, tmp_path):
    """Once runs span k processes (torch.distributed, gloo on CPU): a sweep with
    processes_per_run=2 through cluster 'local' gives the one-process losses (rel 1e-5)."""

    options = sweep_support.small_plan_options(budgets=[2e7])
    one = flops_fit.sweep(host=sweep_support.host(), out_dir=tmp_path / "one", show_progress=False, **options)
    with process_host():  # this process's host now loads the tiny-lm plugin (FLOPS_FIT_PLUGINS), as the jobs do
        two = flops_fit.sweep(out_dir=tmp_path / "two", executor="slurm", show_progress=False,
                              executor_options={"cluster": "local", "poll_seconds": 0.2},
                              **options, processes_per_run=2)
    assert _losses(two.runs) == pytest.approx(_losses(one.runs), rel=1e-5)
    assert len(list((tmp_path / "two" / "slurm").glob("*_1_log.out"))) == 3  # a second task per run


def test_gpus_follow_the_run_unless_set():
    executor = SlurmExecutor("unused", cluster="local")
    cuda = slurm_tasks.Spec("r", "unused", processes_per_run=4, device="cuda")
    assert executor.resources(cuda)["gpus_per_node"] == 4
    assert SlurmExecutor("unused", cluster="local", gpus_per_node=8).resources(cuda)["gpus_per_node"] == 8


def test_time_and_memory_read_sbatchs_forms():
    assert [minutes(v) for v in (90, "90", "1:30", "1:30:00", "2-00:00:00", "1-12")] == [90, 90, 2, 90, 2880, 2160]
    assert [gigabytes(v) for v in (64, "64G", "512M", "1T", "2gb")] == [64, 64, 0.5, 1024, 2]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cluster": "lsf"}, "cluster must be one of ['slurm', 'local'], got 'lsf'"),
        ({"time": "soon"}, "time must be minutes or sbatch's form like '4:00:00'"),
        ({"time": 0}, "time must be minutes or sbatch's form"),
        ({"mem": "lots"}, "mem must be GB or sbatch's form like '64G'"),
        ({"gpus_per_node": -1}, "gpus_per_node must be a non-negative integer"),
        ({"cpus_per_task": 0}, "cpus_per_task must be a positive integer"),
        ({"partition": 3}, "partition must be a name"),
        ({"slurm_params": ["--constraint=a100"]}, "slurm_params must be a table of sbatch options"),
        ({"setup": "module load cuda"}, "setup must be a list of shell lines"),
        ({"max_timeouts": -1}, "max_timeouts must be a non-negative integer"),
        ({"show_jobs": "yes"}, "show_jobs must be true or false"),
        ({"signal_delay_s": 0}, "signal_delay_s must be a positive integer"),
        # passed on to sbatch, which read "#SBATCH --partition=gpu a100" otherwise than --test-only's one argument
        ({"partition": "gpu a100"}, "partition must be a SLURM name without spaces (several: comma-separated, "
                                    "like 'gpu,cpu'), got 'gpu a100'"),
        ({"account": "my lab"}, "account must be a SLURM name without spaces"),
        ({"qos": "normal\t"}, "qos must be a SLURM name without spaces"),
        ({"time": True}, "time must be minutes or sbatch's form like '4:00:00' or '1-12:00:00', got True"),  # got None
    ],
)
def test_bad_options_are_refused_with_the_fix(options, message):
    with pytest.raises(OptionError, match=f"^{_escaped(message)}"):
        SlurmExecutor("unused", **{"cluster": "local", **options})


def test_a_folder_that_is_no_path_is_refused_naming_it():
    """A TypeError from pathlib ("executor ... does not start: TypeError: expected str, ...") before."""
    with pytest.raises(OptionError, match=r"^folder must be a folder every node sees \(a string\), got 3$"):
        flops_fit.create_executor("slurm", cluster="local", folder=3)


def test_an_unknown_option_lists_the_known_ones():
    with pytest.raises(OptionError, match=r"unknown option\(s\) \['partiton'\] for executor 'slurm'; its options: "):
        flops_fit.create_executor("slurm", cluster="local", partiton="gpu")


def test_without_sbatch_the_slurm_cluster_is_refused_naming_the_way_out(monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(OptionError, match="sbatch, which is not on PATH: run the sweep on a SLURM login node"):
        SlurmExecutor("unused")


def test_outside_a_sweep_a_folder_is_required():
    with pytest.raises(OptionError, match="needs folder="):
        list(SlurmExecutor(cluster="local").map(executor_tasks.square, [1]))


def test_without_submitit_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit now fails
    with pytest.raises(FlopsFitError, match=r"pip install 'flops-fit\[slurm\]'"):
        SlurmExecutor("unused", cluster="local")


def _escaped(text):
    import re

    return re.escape(text)


def _column(out, run_id, column):
    import sqlite3

    db = sqlite3.connect(f"file:{out / 'runs.sqlite'}?mode=ro", uri=True)
    try:
        return db.execute(f"SELECT {column} FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0]
    finally:
        db.close()


def _losses(frame):
    return frame.set_index("run_id").loss.to_dict()


SLURM_SWEEP = sweep_support.SMALL_SWEEP_TOML.replace("budgets = [2e7, 4e7]", "budgets = [2e7]") + """
[executor]
name = "slurm"
cluster = "local"
workers = 3  # every job at once: their start-ups (imports) overlap
poll_seconds = 0.1
"""


@pytest.mark.e2e
def test_a_sweep_file_on_slurm_matches_the_local_executor_and_a_preempted_job_resumes(job_env, tmp_path, monkeypatch):
    """`flops-fit sweep` with [executor] name = "slurm" (runs of 26, 13 and 7 steps): each job's
    run stops at its 8th batch, after its first curve point (the 7-step run never does); the
    first job there is sent USR2 (SLURM's preemption signal through submitit), so its run
    checkpoints, submitit requeues the job and the run resumes from that checkpoint."""
    reference = flops_fit.sweep(host=sweep_support.host(), out_dir=tmp_path / "local", show_progress=False,
                                **sweep_support.small_plan_options(budgets=[2e7])).runs
    config, out, gate = tmp_path / "sweep.toml", tmp_path / "out", tmp_path / "gate"
    config.write_text(SLURM_SWEEP)
    monkeypatch.setenv(sweep_support.GATE, f"{gate}:1:8")
    driver = subprocess.Popen([sys.executable, "-m", "flops_fit", "sweep", str(config), "--out", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        sweep_support.gate_reached(gate)
        (waiting,) = sorted(tmp_path.glob("gate.waiting.*"))[:1]
        os.kill(int(waiting.name.rsplit(".", 1)[1]), signal.SIGUSR2)
        Path(f"{gate}.release").touch()
        stdout, stderr = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.terminate()  # a stop request: the driver cancels its jobs and waits for them
            driver.communicate(timeout=120)
    assert driver.returncode == 0, stderr
    assert "3 runs: 3 done" in stdout
    rows = sweep_support.store_rows(out / "runs.sqlite")
    assert {k: v[1] for k, v in rows.items()} == pytest.approx(_losses(reference), rel=1e-6)
    assert sorted(v[3] for v in rows.values()) == [1, 1, 2]  # the preempted run: a second attempt
    with RunStore(out) as store:
        assert store.counts() == {"done": 3}  # each run recorded once
        accounting = {row["run_id"]: row for row in store.accounting()}
    (preempted,) = [k for k, v in rows.items() if v[3] == 2]
    timings = json.loads(_column(out, preempted, "timings"))
    assert timings["resumed_from_step"] == 8  # from the checkpoint the USR2 made, not from scratch
    assert accounting[preempted]["steps_trained"] == accounting[preempted]["steps"]  # no step trained twice
    logs = "".join(p.read_text() for p in (out / "slurm").glob("*_log.out"))
    assert "Requeued job" in logs  # submitit requeued it rather than it running again from scratch
    assert not any((out / "checkpoints").glob("*/*.safetensors"))  # stored, so its checkpoints are gone


def _slurm_doc_example():
    import re

    text = (TESTS.parent / "docs" / "guide" / "clusters.md").read_text()
    return re.findall(r"```toml\n(.*?)```", text[text.index("### SLURM"):], re.S)[0]


FAKE_SLURM = {  # stand-ins for SLURM's commands: record what they were asked, answer like SLURM
    "sbatch": 'if [ "$1" = --test-only ]; then echo "$@" >> "$FAKE_SLURM_LOG/test-only"; '
              'echo "sbatch: Job 4240 to start at 2026-11-29T10:00:00 using 1 processors" >&2; exit 0; fi; '
              'n=$(($(ls "$FAKE_SLURM_LOG"/sbatch-* 2>/dev/null | wc -l) + 1)); '
              'cp "$1" "$FAKE_SLURM_LOG/sbatch-$n"; echo "Submitted batch job $((4240 + n))"',
    "scancel": 'echo "$@" >> "$FAKE_SLURM_LOG/scancel"',
    "sacct": "exit 0",
    "srun": "exit 0",
}


def fake_slurm(tmp_path, monkeypatch, **override):
    """SLURM's commands as shell scripts on PATH (``override``: other bodies); their log folder."""
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir(), log.mkdir()
    for name, body in {**FAKE_SLURM, **override}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_LOG", str(log))
    return log


def test_the_docs_sweep_file_submits_one_sbatch_array_per_set_of_resources(tmp_path, monkeypatch):
    """No SLURM here: fake sbatch / scancel record what the executor asked for. The docs'
    [executor] table reaches the sbatch scripts; a job a killed driver left for one of these
    runs is cancelled before they are submitted; a stop cancels every job submitted."""
    from flops_fit.executors.stopping import clear_stop, request_stop
    from flops_fit.sweeps.config import load_config

    log = fake_slurm(tmp_path, monkeypatch)
    (tmp_path / "sweep.toml").write_text(_slurm_doc_example())
    config = load_config(tmp_path / "sweep.toml")
    assert config.executor == "slurm"
    specs = [slurm_tasks.Spec(f"r{i}", str(tmp_path), device="cuda") for i in range(3)]
    specs.append(slurm_tasks.Spec("r3", str(tmp_path), processes_per_run=2, device="cuda"))
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "jobs.json").write_text(json.dumps({"r1": "4000_1", "other-run": "4000_9"}))
    for options in ({"array_parallelism": 2}, {"workers": 2, "signal_delay_s": 300}):  # %2: below the array's size
        executor = flops_fit.create_executor("slurm", folder=tmp_path / "jobs", **{**config.executor_options, **options})
        request_stop()  # the driver's Ctrl-C, right after submitting
        try:
            with pytest.raises(KeyboardInterrupt), executor:
                next(executor.map(executor_tasks.square, specs))
        finally:
            clear_stop()
    again = (log / "sbatch-3").read_text()
    assert "#SBATCH --array=0-2%2\n" in again and "#SBATCH --signal=USR2@300\n" in again  # --workers 2 caps it too
    array, single = (log / "sbatch-1").read_text(), (log / "sbatch-2").read_text()
    for line in ("--array=0-2%2", "--partition=gpu", "--time=720", "--mem=64GB", "--cpus-per-task=8",
                 "--account=my-lab", "--qos=normal", "--constraint=a100", "--gpus-per-node=1",
                 "--ntasks-per-node=1", "--signal=USR2@90"):
        assert f"#SBATCH {line}\n" in array
    assert "\n# setup\nmodule load cuda/12.4\n" in array
    assert "#SBATCH --array" not in single
    assert "#SBATCH --ntasks-per-node=2\n" in single and "#SBATCH --gpus-per-node=2\n" in single
    first, *stopped = (log / "scancel").read_text().splitlines()
    assert first == "4000_1"  # run r1's orphan, first; other-run's job is not this sweep's business
    assert sorted(stopped) == ["4241_0", "4241_1", "4241_2", "4242", "4243_0", "4243_1", "4243_2", "4244"]
    assert json.loads((tmp_path / "jobs" / "jobs.json").read_text()) == {"other-run": "4000_9"}


def test_a_bad_executor_option_in_a_sweep_file_exits_2_with_one_line(job_env, tmp_path, capsys):
    from flops_fit.cli import main as cli

    config = tmp_path / "sweep.toml"
    config.write_text(sweep_support.SMALL_SWEEP_TOML + '\n[executor]\nname = "slurm"\ncluster = "local"\nmem = "lots"\n')
    with process_host():  # this process's host now loads the tiny-lm plugin (FLOPS_FIT_PLUGINS)
        assert cli.main(["sweep", str(config), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"flops-fit: error: {config} [executor] (or its command-line options): mem must "
                                        "be GB or sbatch's form like '64G' or '500M', got 'lots'"]
    assert not (tmp_path / "out").exists()  # refused before anything was written


@pytest.mark.parametrize("sigint", ["default", "ignored"])
@pytest.mark.e2e
def test_a_stop_of_the_driver_cancels_its_jobs_and_ends_their_processes(job_env, tmp_path, sigint):
    """Also when the driver ignores SIGINT (started in the background by a shell without job
    control), which a local job's controller would inherit and then ignore submitit's cancel."""
    import signal

    from flops_fit.errors import Interrupted
    from flops_fit.executors.stopping import clear_stop, request_stop

    before = signal.getsignal(signal.SIGINT)
    if sigint == "ignored":
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    heard = []

    def stop(*report):  # Ctrl-C once the run trains
        heard.append(report)
        request_stop()

    executor = local(tmp_path, on_progress=stop)
    try:
        with pytest.raises(Interrupted), executor:
            next(executor.map(slurm_tasks.report_then_block, [1]))
    finally:
        clear_stop()
        assert signal.getsignal(signal.SIGINT) == (signal.SIG_IGN if sigint == "ignored" else before)
        signal.signal(signal.SIGINT, before)
    (submitted,) = (tmp_path / "jobs").glob("*_submitted.pkl")  # the local cluster's files share the folder
    with pytest.raises(ProcessLookupError):  # the job's controller (its id is its pid) has ended
        os.kill(int(submitted.name.split("_")[0]), 0)
    task = Path(f"/proc/{heard[0][0].removeprefix('pid-')}/status")
    assert not task.exists() or "\nState:\tZ" in task.read_text()  # the run's process: gone (or a zombie)


def test_options_sbatch_refuses_are_one_line_naming_its_reason(tmp_path, monkeypatch, caplog, capsys):
    """sbatch's refusal at submission was printed twice (submitit echoes sbatch's stderr before raising it)
    and did not say the plan was already stored, so a rerun needed --resume."""
    fake_slurm(tmp_path, monkeypatch, sbatch='echo "sbatch: error: invalid partition specified: gpux" >&2; exit 1')
    executor = SlurmExecutor(tmp_path / "jobs", partition="gpux")
    specs = [slurm_tasks.Spec(f"r{i}", str(tmp_path), device="auto") for i in range(2)]
    with pytest.raises(OptionError, match=r"^sbatch refused the sweep's jobs \(sbatch: error: invalid partition "
                                          r"specified: gpux\): check the \[executor\] options \(partition, ") as err:
        list(executor.map(executor_tasks.square, specs))
    assert str(err.value).endswith("; the plan is recorded in the sweep's folder: once they are fixed, continue it "
                                   "with --resume (resume=True)")
    assert "invalid partition" not in capsys.readouterr().err  # said once: in the error's line
    assert "runs with device 'auto' get no GPU (a job gets GPUs only by asking" in caplog.text  # said first


def test_a_partition_sbatch_refuses_is_refused_before_the_sweeps_folder_is_written(job_env, tmp_path, monkeypatch,
                                                                                    capsys):
    """A partition sbatch rejects was refused only at submission, after the plan was stored: the rerun
    with the partition fixed was told the folder already holds this sweep (--resume). sbatch --test-only
    now asks first, with the jobs' resources, and the sweep exits 2 with one line, nothing written."""
    from flops_fit.cli import main as cli

    refuse = ('echo "$@" >> "$FAKE_SLURM_LOG/asked"; '
              'echo "sbatch: error: invalid partition specified: gpux" >&2; exit 1')
    log = fake_slurm(tmp_path, monkeypatch, sbatch=refuse)
    config = tmp_path / "sweep.toml"
    config.write_text(sweep_support.SMALL_SWEEP_TOML + '\n[executor]\nname = "slurm"\npartition = "gpux"\n'
                      'time = "1:00:00"\nslurm_params = { constraint = "a100" }\n')
    with process_host():  # this process's host now loads the tiny-lm plugin (FLOPS_FIT_PLUGINS)
        assert cli.main(["sweep", str(config), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("invalid partition") == 1 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == ("flops-fit: error: sbatch refused the sweep's jobs (sbatch: error: invalid "
                                            "partition specified: gpux): check the [executor] options (partition, "
                                            "account, qos, time, mem, slurm_params)")
    assert not (tmp_path / "out").exists()  # nothing recorded: the corrected sweep file starts afresh
    asked = (log / "asked").read_text().split()
    assert asked[0] == "--test-only" and asked[-2:] == ["--wrap", "true"]
    for flag in ("--partition=gpux", "--time=60", "--constraint=a100", "--nodes=1", "--ntasks-per-node=1"):
        assert flag in asked
