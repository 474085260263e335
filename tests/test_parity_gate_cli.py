"""The gate (flops_fit.parity.check), the ``flops-fit parity`` command, and plugin cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from flops_fit.parity import check
from flops_fit.parity.compare import TOLERANCES, ParityReport, compare_tensors
from plugin_kit import process_host

import flops_fit
from flops_fit.cli.main import main
from flops_fit.testing import isolated_host


def _report(passed: bool) -> ParityReport:
    import torch

    ref = torch.ones(3)
    row = compare_tensors("logits", ref, ref + (0 if passed else 1), TOLERANCES["float32"])
    return ParityReport("c", "m", "r", "cpu", "float32", TOLERANCES["float32"], [row])


class _Plugin:
    """Cases for model 'toy': one passing, one failing, one raising, one needing a missing package."""

    @flops_fit.hookimpl
    def register_parity_cases(self, register):
        def case(name, run, **kw):
            register(flops_fit.ParityCaseEntry(name, model="toy", reference="ref", run=run, quick=True, **kw))
        case("good", lambda device, dtype: _report(True))
        case("bad", lambda device, dtype: _report(False))
        case("broken", lambda device, dtype: 1 / 0)
        case("absent", lambda device, dtype: _report(True), requires=("no_such_package_xyz",))


def test_gate_collects_passes_failures_errors_and_skips() -> None:
    gate = check("toy", host=isolated_host(_Plugin()))
    status = {o.case: o.status for o in gate.outcomes}
    assert status == {"absent": "skipped", "bad": "failed", "broken": "error", "good": "passed"}
    assert not gate.passed and gate.status == "failed"
    text = gate.summary()
    assert "bad: failed: c [cpu, float32]: FAILED at logits" in text
    assert "broken: error: ZeroDivisionError" in text
    # a plugin's case needs its own package, not flops-fit's parity extra (which the built-in cases need)
    assert "needs no_such_package_xyz (pip install no_such_package_xyz)" in text
    assert json.loads(json.dumps(gate.to_dict()))["status"] == "failed"


class _CaselessModel:
    """A registered model ('plain') that no plugin registers a parity case for."""

    @flops_fit.hookimpl
    def register_models(self, register):
        register(flops_fit.ModelEntry(
            "plain", builder=lambda width: None, size_param="width", valid_sizes=lambda: [8],
            param_count=lambda width: width, training_flops=lambda width, tokens: 6.0 * width * tokens,
            flops_unit="token", task=flops_fit.TASK_CAUSAL_LM, default_loss="next-token"))


def test_gate_without_cases_is_unverified_not_failed() -> None:
    gate = check("plain", host=isolated_host(_Plugin(), _CaselessModel()))
    assert gate.passed and not gate.verified and gate.status == "unverified"
    assert "no quick parity case is registered" in gate.summary()


def test_gate_of_a_misspelt_model_names_the_known_ones() -> None:
    """No case and no model by that name: a misspelling, refused with the close names (it read
    'unverified', as if the model existed and merely had no case)."""
    with pytest.raises(flops_fit.UnknownEntryError, match="no model called 'gtp'; did you mean 'gpt'"):
        flops_fit.check_parity("gtp")
    with pytest.raises(flops_fit.UnknownEntryError, match="no model called 'plian'; did you mean 'plain'"):
        check("plian", host=isolated_host(_Plugin(), _CaselessModel()))


def test_the_install_hint_is_quoted_so_zsh_runs_it() -> None:
    """"pip install flops-fit[parity]" unquoted is a glob to zsh (macOS's shell): "no matches found"."""
    from flops_fit.sweeps.gate import install_hint

    assert install_hint(["timm"]) == "pip install 'flops-fit[parity]'"  # a package the parity extra holds
    assert install_hint(["some-plugin-dependency"]) == "pip install some-plugin-dependency"


def test_builtin_gates_pass_on_cpu() -> None:
    pytest.importorskip("timm")
    for model in ("vit", "gpt"):
        gate = flops_fit.check_parity(model)
        assert gate.passed and gate.verified, gate.summary()


def test_cli_prints_a_table_and_json(capsys) -> None:
    assert main(["parity", "--case", "attention-torch-mha*"]) == 0
    out = capsys.readouterr().out
    assert "flops_fit/attention-torch-mha " in out and "flops_fit/attention-torch-mha-functional" in out
    assert "PASSED" in out and "first failure" in out
    assert main(["parity", "--case", "attention-sdpa", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["status"] == "passed" and row["report"]["passed"] and row["report"]["layers"]


def test_cli_errors_are_clear(capsys) -> None:
    assert main(["parity", "--model", "no-such-model"]) == 2
    assert "no parity case matches (model='no-such-model'" in capsys.readouterr().err
    import torch

    if not torch.cuda.is_available():
        assert main(["parity", "--device", "cuda"]) == 2
        assert "no CUDA device is available here" in capsys.readouterr().err


class _Verdict:
    """A plugin's own report: nothing but the bool ``passed`` the contract asks for."""

    def __init__(self, passed: bool) -> None:
        self.passed = passed

    def __str__(self) -> str:
        return f"own check passed={self.passed}"


class _PlainPlugin:
    @flops_fit.hookimpl
    def register_parity_cases(self, register):
        for name, run in (("plain-pass", lambda device, dtype: _Verdict(True)),
                          ("plain-fail", lambda device, dtype: _Verdict(False)),
                          ("plain-none", lambda device, dtype: None)):
            register(flops_fit.ParityCaseEntry(name, model="toy", reference="ref", run=run, quick=True))


@pytest.fixture
def plain_host():
    from flops_fit.plugin.host import Host

    with process_host(Host(builtins=False, entry_points=False, plugins=[("plain", _PlainPlugin())], env={})):
        yield


def test_a_report_with_only_passed_is_a_verdict_not_a_traceback(plain_host, capsys) -> None:
    assert main(["parity", "--case", "plain-pass"]) == 0
    assert "PASSED" in capsys.readouterr().out
    assert main(["parity", "--case", "plain-fail"]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "plain/plain-fail: own check passed=False" in out
    assert main(["parity", "--case", "plain-none"]) == 1
    assert "run returned NoneType, which has no bool 'passed'" in capsys.readouterr().out
    assert main(["parity", "--json"]) == 1
    rows = {row["case"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["plain-pass"]["report"] == {"passed": True} and rows["plain-none"]["status"] == "error"
    gate = check("toy")
    assert gate.status == "failed" and "plain-fail: failed: own check passed=False" in gate.summary()


PLUGIN = textwrap.dedent('''
    import flops_fit

    def run(device="cpu", dtype="float32"):
        from flops_fit.parity.compare import TOLERANCES, ParityReport, compare_tensors
        import torch
        row = compare_tensors("out", torch.ones(2), torch.ones(2), TOLERANCES[dtype])
        return ParityReport("toy-case", "toy", "ones", device, dtype, TOLERANCES[dtype], [row])

    @flops_fit.hookimpl
    def register_parity_cases(register):
        register(flops_fit.ParityCaseEntry("toy-case", model="toy", reference="ones", run=run))
''')


@pytest.mark.e2e
def test_plugin_cases_run_with_pytest_pyargs_from_outside_the_repository(tmp_path) -> None:
    (tmp_path / "toy_parity_plugin.py").write_text(PLUGIN)
    env = {**os.environ, "FLOPS_FIT_PLUGINS": "toy_parity_plugin", "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "flops_fit.parity.test_parity", "-k", "toy-case",
         "-p", "no:cacheprovider", "-v", "-rs"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "test_parity[toy_parity_plugin/toy-case-cpu-float32] PASSED" in result.stdout
    assert "test_parity[toy_parity_plugin/toy-case-cpu-bfloat16] PASSED" in result.stdout
    assert "2 passed, 3 skipped" in result.stdout  # the cuda runs skip without a GPU


class _BrokenSummary:
    """A failing report whose own summary() raises."""

    passed = False

    def summary(self) -> str:
        raise ValueError("summary broke")


class _UnrulyPlugin:
    """One case of model 'toy' that misbehaves in the way ``run`` does."""

    def __init__(self, name, run) -> None:
        self.name, self.run = name, run

    @flops_fit.hookimpl
    def register_parity_cases(self, register):
        register(flops_fit.ParityCaseEntry(self.name, model="toy", reference="ref", run=self.run, quick=True))


def test_a_case_whose_summary_raises_is_still_a_failed_verdict() -> None:
    """The gate called the report's summary() outside its guard: the sweep went down with the
    plugin's traceback instead of refusing to train."""
    gate = check("toy", host=isolated_host(_UnrulyPlugin("bad-summary", lambda device, dtype: _BrokenSummary())))
    (outcome,) = gate.outcomes
    assert outcome.status == "failed" and gate.status == "failed"
    assert "its report's summary() raised ValueError: summary broke" in outcome.detail


def test_a_case_that_calls_sys_exit_is_an_error_not_the_end_of_the_sweep() -> None:
    """sys.exit inside a plugin's case ended the whole process (the sweep printed only 'case
    gave up'); it is now that case's error, named, and the gate goes on."""
    gate = check("toy", host=isolated_host(_UnrulyPlugin("exits", lambda device, dtype: sys.exit("case gave up"))))
    (outcome,) = gate.outcomes
    assert outcome.status == "error" and gate.status == "failed"
    assert outcome.detail == "SystemExit: case gave up"


def test_a_model_without_a_case_is_told_how_to_get_one(capsys) -> None:
    """A registered model with no parity case: the sweep's gate line said only 'no quick parity
    case is registered', and `flops-fit parity --model` listed every other model's cases."""
    gate = check("plain", host=isolated_host(_CaselessModel()))
    assert "register one (quick=True) with register_parity_cases" in gate.summary()
    from flops_fit.plugin.host import Host

    with process_host(Host(builtins=False, entry_points=False, plugins=[("caseless", _CaselessModel())], env={})):
        assert main(["parity", "--model", "plain"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model 'plain' has no parity case registered, so a sweep's gate calls it " \
                                    "unverified; register one (quick=True) with register_parity_cases" in err
    assert main(["parity", "--model", "hf-causal-lm"]) == 2  # exempt, and says why
    assert "model 'hf-causal-lm' has no parity case, by design: the model is the transformers class itself" \
        in capsys.readouterr().err


class _BrokenToDict:
    passed = True

    def to_dict(self) -> dict:
        raise KeyError("layers")


def test_json_of_a_report_whose_to_dict_raises_is_still_printed(capsys) -> None:
    """`flops-fit parity --json` went down with the plugin report's to_dict traceback."""
    from flops_fit.plugin.host import Host

    plugin = _UnrulyPlugin("bad-to-dict", lambda device, dtype: _BrokenToDict())
    with process_host(Host(builtins=False, entry_points=False, plugins=[("unruly", plugin)], env={})):
        assert main(["parity", "--case", "bad-to-dict", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["status"] == "passed" and row["report"] == {"passed": True, "to_dict_error": "KeyError: 'layers'"}


def test_a_quick_case_for_another_device_is_named_not_called_missing() -> None:
    """A model whose one quick case runs on CUDA only: the CPU gate said 'no quick parity case is
    registered for this model: register one', though one is."""
    class CudaOnly:
        @flops_fit.hookimpl
        def register_parity_cases(self, register):
            register(flops_fit.ParityCaseEntry("on-gpu", model="toy", reference="ref", quick=True, devices=("cuda",),
                                               run=lambda device, dtype: _Verdict(True)))

    gate = check("toy", host=isolated_host(CudaOnly()))
    assert gate.status == "unverified" and "no quick parity case is registered" not in gate.summary()
    assert gate.summary().splitlines()[1] == "  on-gpu: skipped: runs on cuda only; this gate runs on cpu, float32"


def test_a_case_registered_under_a_misspelt_model_is_pointed_out() -> None:
    """A plugin whose case says model='plian' for its model 'plain': the gate said only that no
    case is registered, while `flops-fit parity` ran (and passed) the case under the typo."""
    class Misspelt:
        @flops_fit.hookimpl
        def register_parity_cases(self, register):
            register(flops_fit.ParityCaseEntry("mine", model="plian", reference="ref", quick=True,
                                               run=lambda device, dtype: _Verdict(True)))

    gate = check("plain", host=isolated_host(_CaselessModel(), Misspelt()))
    assert gate.status == "unverified"
    assert "case 'misspelt/mine' names model 'plian', which is not registered: is it meant for 'plain'?" in \
        gate.summary()
    alone = check("plain", host=isolated_host(_CaselessModel()))
    assert "is it meant for" not in alone.summary()


def test_the_gate_of_a_model_exempt_by_no_parity_gives_its_reason_not_advice() -> None:
    """check() on a model whose entry says why no case applies (hf-causal-lm) advised registering
    a case or setting no_parity, which it has."""
    gate = flops_fit.check_parity("hf-causal-lm")
    assert gate.passed and not gate.verified
    assert gate.summary().splitlines()[1] == ("  no parity case applies: the model is the transformers class itself, "
                                              "so there is nothing to convert or compare")


class _Hangs:
    """A case that waits until the test lets it go: a plugin's case that never returns."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()

    def __call__(self, device, dtype):
        self.release.wait(60)
        return _Verdict(True)


def test_a_case_that_hangs_is_an_error_after_its_time_limit_and_the_gate_goes_on(monkeypatch, capsys) -> None:
    """A case that never returned held the gate (and the sweep behind it) forever; it is now an
    error naming the limit and how to raise it, and the next case still runs."""
    hangs = _Hangs()

    class Plugin:
        @flops_fit.hookimpl
        def register_parity_cases(self, register):
            register(flops_fit.ParityCaseEntry("a-hangs", model="toy", reference="ref", run=hangs, quick=True))
            register(flops_fit.ParityCaseEntry("b-good", model="toy", reference="ref", quick=True,
                                               run=lambda device, dtype: _Verdict(True)))

    try:
        gate = check("toy", host=isolated_host(Plugin()), timeout_s=0.2)
        status = {o.case: (o.status, o.detail) for o in gate.outcomes}
        assert status["b-good"][0] == "passed" and status["a-hangs"][0] == "error" and gate.status == "failed"
        assert "still running after the time limit of 0.2 s" in status["a-hangs"][1]
        assert "FLOPS_FIT_PARITY_TIMEOUT=SECONDS (flops-fit parity --timeout SECONDS)" in status["a-hangs"][1]
        monkeypatch.setenv("FLOPS_FIT_PARITY_TIMEOUT", "0.2")  # the sweep's gate reads the variable
        assert check("toy", host=isolated_host(Plugin())).outcomes[0].status == "error"
        from flops_fit.plugin.host import Host

        with process_host(Host(builtins=False, entry_points=False, plugins=[("hanging", Plugin())], env={})):
            monkeypatch.delenv("FLOPS_FIT_PARITY_TIMEOUT")
            assert main(["parity", "--case", "a-hangs", "--timeout", "0.2"]) == 1
            assert "hanging/a-hangs: still running after the time limit of 0.2 s" in capsys.readouterr().out
            monkeypatch.setenv("FLOPS_FIT_PARITY_TIMEOUT", "soon")
            assert main(["parity", "--case", "b-good"]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and "FLOPS_FIT_PARITY_TIMEOUT='soon' is not a number of seconds" in err
    finally:
        hangs.release.set()


def test_a_preset_runs_its_familys_cases_and_says_so(capsys) -> None:
    """A preset (gpt2, vit_tiny_patch16_224) has no case of its own: its gate read 'unverified:
    register one', and `flops-fit parity --model gpt2` refused, though the family's cases test the
    very builder it uses. They now run, with a line that says whose they are."""
    class Family:
        @flops_fit.hookimpl
        def register_models(self, register):
            for name, defaults in (("fam", {}), ("fam-big", {"depth": 2})):
                register(flops_fit.ModelEntry(
                    name, builder="flops_fit.plugins.models.gpt_model:build", size_param="width", defaults=defaults,
                    valid_sizes=lambda: [8], param_count=lambda width, **c: width,
                    training_flops=lambda width, tokens, **c: 6.0 * width * tokens, flops_unit="token",
                    task=flops_fit.TASK_CAUSAL_LM, default_loss="next-token"))

        @flops_fit.hookimpl
        def register_parity_cases(self, register):
            register(flops_fit.ParityCaseEntry("fam-case", model="fam", reference="ref", quick=True,
                                               run=lambda device, dtype: _Verdict(True)))

    gate = check("fam-big", host=isolated_host(Family()))
    assert gate.status == "passed" and [o.case for o in gate.outcomes] == ["fam-case"]
    assert gate.summary().splitlines()[1] == ("  no case names 'fam-big'; its builder (flops_fit.plugins.models."
                                              "gpt_model:build) also builds model 'fam', whose cases ran")
    assert "register one" not in gate.summary() and gate.to_dict()["via"]
    assert check("fam", host=isolated_host(Family())).via == ""  # its own case: nothing to explain
    from flops_fit.plugin.host import Host

    with process_host(Host(builtins=False, entry_points=False, plugins=[("family", Family())], env={})):
        assert main(["parity", "--model", "fam-big"]) == 0
    out = capsys.readouterr().out
    assert "family/fam-case" in out and "PASSED" in out and "fam-big: no case names 'fam-big'" in out
    assert flops_fit.check_parity("gpt2").via.startswith("no case names 'gpt2'; its builder")


def test_a_selection_of_which_no_case_runs_here_is_an_error_not_an_empty_table(capsys) -> None:
    """`flops-fit parity --model attention --quick` (no quick attention case) printed an empty table
    and exited 0, as if every case had passed; so did a case for another device only."""
    assert main(["parity", "--model", "attention", "--quick"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "none of the 4 matching parity case(s) runs here: 4 not quick (drop --quick)" in captured.err

    class CudaOnly:
        @flops_fit.hookimpl
        def register_parity_cases(self, register):
            register(flops_fit.ParityCaseEntry("on-gpu", model="toy", reference="ref", quick=True, devices=("cuda",),
                                               run=lambda device, dtype: _Verdict(True)))

    from flops_fit.plugin.host import Host

    with process_host(Host(builtins=False, entry_points=False, plugins=[("gpu", CudaOnly())], env={})):
        assert main(["parity", "--model", "toy", "--json"]) == 2
    assert "none of the 1 matching parity case(s) runs here: 1 not for cpu, float32" in capsys.readouterr().err
