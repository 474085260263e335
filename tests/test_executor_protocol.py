"""A plugin's executor that breaks its protocol: the sweep ends in one line naming it, and keeps what it returned."""

import pytest
import sweep_support

import flops_fit
from flops_fit.cli.main import main
from flops_fit.executors.base import ClosingExecutor, ignore_progress
from flops_fit.plugin import host as host_module
from flops_fit.plugin.host import Host
from flops_fit.store.run_store import RunStore


class Unreachable(ClosingExecutor):
    def __init__(self, on_progress=ignore_progress, workers=1):
        raise ConnectionError("cannot reach the cluster")


class FirstOnly(ClosingExecutor):
    """Trains the first item and stops, as a scheduler that dropped the rest of a job array."""

    def __init__(self, on_progress=ignore_progress, workers=1):
        self.progress = on_progress

    def map(self, fn, items):
        yield items[0], fn(items[0], self.progress)


class Results(FirstOnly):
    """Yields each result without its item."""

    def map(self, fn, items):
        for item in items:
            yield fn(item, self.progress)


class Rejected(FirstOnly):
    def map(self, fn, items):
        raise RuntimeError("scheduler rejected the job array")
        yield


class Executors:
    @flops_fit.hookimpl
    def register_executors(self, register):
        for name, builder in (("unreachable", Unreachable), ("first-only", FirstOnly), ("results", Results),
                              ("rejected", Rejected)):
            register(flops_fit.ExecutorEntry(name, builder=builder))


@pytest.fixture
def cli_host():
    host_module.reset_host(Host(builtins=False, entry_points=False, env={},
                                plugins=[("sweep_support", sweep_support), ("odd", Executors())]))
    yield
    host_module.reset_host(None)


@pytest.mark.parametrize(("executor", "message", "done"), [
    # each ended the sweep in a traceback (the builder's ConnectionError; the driver's "cannot unpack
    # non-iterable RunResult"; the map's own RuntimeError) ...
    ("unreachable", "does not start: ConnectionError: cannot reach the cluster", None),
    ("results", "yielded RunResult, not an (item, result) pair of an item it was given", 0),
    ("rejected", "failed while running the sweep: RuntimeError: scheduler rejected the job array", 0),
    # ... or, for this one, exit 0 and "the answer: flops-fit report" with two runs never trained
    ("first-only", "ended with 2 of 3 work items without a result", 1),
])
def test_an_executor_that_breaks_its_protocol_is_one_line_naming_it(cli_host, tmp_path, capsys, executor, message,
                                                                     done):
    config = tmp_path / "sweep.toml"
    config.write_text(sweep_support.SMALL_SWEEP_TOML.replace("[2e7, 4e7]", "[2e7]")
                      + f'[executor]\nname = "{executor}"\n')
    assert main(["sweep", str(config), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if x.startswith("flops-fit: error:")]
    assert f"executor 'odd/{executor}' (plugin 'odd') {message}" in line and "Traceback" not in err
    if done is not None:  # what it returned before it broke off is stored; the rest waits for --resume
        with RunStore(tmp_path / "out") as store:
            statuses = list(store.statuses().values())
        assert statuses.count("done") == done and len(statuses) == 3
