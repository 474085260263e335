"""benchmarks/gpu_suite.py proven on the CPU before a GPU runs it: the smoke mode writes the
JSON a GPU run writes, every step ran and nothing failed; a step that raises is recorded and
the others still run. Compilation is left out here (--no-compile: it alone takes a minute of
CPU); ``python benchmarks/gpu_suite.py --device cpu --smoke`` runs it too."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_suite.py"


@pytest.fixture(scope="module")
def suite():
    spec = importlib.util.spec_from_file_location("gpu_suite", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_suite"] = module  # its dataclass looks its module up by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("gpu_suite", None)


@pytest.fixture(scope="module")
def smoke(suite, tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-suite")
    suite.run_suite("cpu", True, out, list(suite.STEPS), False, 1.0)
    return json.loads((out / "gpu-cpu.json").read_text())


@pytest.mark.e2e
def test_smoke_runs_every_step_and_fails_nothing(smoke):
    assert smoke["device"] == "cpu" and smoke["smoke"] is True
    assert smoke["torch"] and "cuda" in smoke
    assert {name: step["status"] for name, step in smoke["steps"].items()} == dict.fromkeys(
        ("parity", "trainer", "speed", "packed", "stacked"), "done")
    assert smoke["failed"] == 0, [c for c in smoke["checks"] if not c["passed"]]
    assert len(smoke["checks"]) >= 12


@pytest.mark.e2e
def test_parity_reports_worst_ratio_per_case_and_dtype(smoke):
    rows = {(r["case"], r["dtype"]): r for r in smoke["steps"]["parity"]["cases"]}
    gpt2 = rows[("flops_fit/hf-gpt2", "float32")]
    assert gpt2["status"] == "passed" and 0 <= gpt2["worst_ratio"] < 1
    assert rows[("flops_fit/hf-gpt2", "bfloat16")]["status"] == "passed"
    assert rows[("flops_fit/hf-gpt2", "float16")] == {
        "case": "flops_fit/hf-gpt2", "model": "gpt", "dtype": "float16", "status": "skipped",
        "detail": "fp16 runs on CUDA only"}
    assert 0 <= smoke["steps"]["parity"]["worst_ratio"]["bfloat16"] < 1


@pytest.mark.e2e
def test_trainer_paths_match_the_fp32_cpu_curve(smoke):
    for model in ("gpt", "vit"):
        rows = smoke["steps"]["trainer"]["models"][model]
        # on the CPU the fp32 variant is the reference's own spec: deterministic, so equal
        assert rows["fp32"]["max_rel_diff"] == 0.0
        assert rows["fp32"]["curve"] == rows["reference"]["curve"]
        assert rows["bf16"]["status"] == "passed" and 0 < rows["bf16"]["max_rel_diff"] <= 3e-2
        assert rows["bf16-compiled"]["status"] == "skipped: compile turned off (--no-compile)"
        assert rows["bf16-micro-auto"]["status"].startswith(("skipped", "passed"))


@pytest.mark.e2e
def test_speed_has_tokens_per_second_ratio_and_no_mfu_on_cpu(smoke):
    speed = smoke["steps"]["speed"]
    assert set(speed["variants"]) == {"ours-eager", "hf-eager"} | (
        {"litgpt-eager"} if "litgpt" not in speed["skipped"] else set())
    ours, hf = speed["variants"]["ours-eager"], speed["variants"]["hf-eager"]
    assert ours["tokens_per_s"] > 0 and ours["mfu"] is None and speed["peak_bf16"] is None
    assert speed["ratios"]["ours/hf eager"] == pytest.approx(ours["tokens_per_s"] / hf["tokens_per_s"])
    # 6 N + attention per token of the tiny gpt2-shaped model: 2 layers of width 64, vocab 256, 64 tokens
    assert speed["flops_per_token"] > 6 * (2 * 12 * 64 * 64 + 256 * 64)
    profile = speed["profile"]  # where the step's time goes: the CPU's operators by their own time
    assert profile["variant"] == "ours-eager" and profile["time"] == "self_cpu_time_total"
    assert any(e["name"] in ("aten::mm", "aten::addmm") for e in profile["top"])
    assert 0 < sum(e["share"] for e in profile["top"]) <= 1 + 1e-9 and profile["busy_ms_per_step"] > 0


@pytest.mark.e2e
def test_packed_runs_give_the_same_losses_as_one_at_a_time(smoke):
    groups = smoke["steps"]["packed"]["groups"]
    assert len(groups) == 2
    for group in groups.values():
        assert group["identical"] is True and group["problems"] == []
        assert group["max_rel_diff"] == 0.0 and group["rtol"] == 0.0  # bit for bit on a CPU
        assert group["one_at_a_time_s"] > 0 and group["packed_s"] > 0
        assert group["throughput_ratio"] == pytest.approx(group["one_at_a_time_s"] / group["packed_s"])


@pytest.mark.e2e
def test_stacked_runs_give_the_same_losses_as_one_at_a_time(smoke):
    stacked = smoke["steps"]["stacked"]
    assert stacked["runs"] == 4 and stacked["problems"] == []
    assert stacked["identical"] is True and stacked["max_rel_diff"] == 0.0  # bit for bit on a CPU
    assert stacked["spread_one_at_a_time"] is None  # within rtol: the runs were not trained again
    assert stacked["speedup"] == pytest.approx(stacked["one_at_a_time_s"] / stacked["together_s"])


def result(run_id: str, curve: list[float], loss: float):
    from flops_fit import RunResult

    return RunResult(run_id=run_id, status="done", loss=loss, curve=[[i, v] for i, v in enumerate(curve)])


def test_a_difference_within_the_devices_own_spread_passes_and_a_larger_one_fails(suite, monkeypatch):
    """A CUDA run is not bitwise reproducible: a group that misses rtol is trained one at a time
    again, and a difference up to NOISE_FACTOR times that spread passes; beyond it, or with no
    spread at all (the CPU), it fails."""
    specs = [suite.stacked_specs(True, "cpu")[0]]
    key = specs[0].run_id
    alone = {key: result(key, [4.0, 3.0], 2.0)}
    other = {key: result(key, [4.0, 3.06], 2.0)}  # 2% off
    monkeypatch.setattr(suite, "NOISE_FACTOR", 3.0)

    def spread(rel: float):
        return lambda: {key: result(key, [4.0, 3.0 * (1 + rel)], 2.0)}

    problems, bitwise, worst, measured = suite.judged_against_spread(specs, alone, other, "packed", 5e-3, spread(0.01))
    assert problems == [] and bitwise is False
    assert worst == pytest.approx(0.02) and measured == pytest.approx(0.01)
    problems, _, _, measured = suite.judged_against_spread(specs, alone, other, "packed", 5e-3, spread(0.005))
    assert measured == pytest.approx(0.005) and len(problems) == 1 and "max rel diff 2.00e-02" in problems[0]
    problems, _, _, measured = suite.judged_against_spread(specs, alone, other, "packed", 0.0, spread(0.0))
    assert measured == 0.0 and len(problems) == 1
    never = pytest.fail  # within rtol, or a run that failed: nothing is trained again
    assert suite.judged_against_spread(specs, alone, alone, "packed", 0.0, never) == ([], True, 0.0, None)
    broken = {key: dataclasses.replace(other[key], status="failed", error="diverged")}
    problems, _, _, measured = suite.judged_against_spread(specs, alone, broken, "packed", 5e-3, never)
    assert measured is None and any("packed: 'diverged'" in p for p in problems)


def test_merge_keeps_the_other_steps_and_their_checks(suite, tmp_path, monkeypatch):
    def first(step):
        step.check("first ran", True)
        return {"value": 1}

    def second(step):
        step.check("second ran", False, "broken")
        return {"value": 2}

    monkeypatch.setitem(suite.STEP_FUNCTIONS, "parity", first)
    monkeypatch.setitem(suite.STEP_FUNCTIONS, "speed", second)
    suite.run_suite("cpu", True, tmp_path, ["parity", "speed"], False, 1.0)
    monkeypatch.setitem(suite.STEP_FUNCTIONS, "speed", first)  # the fix
    suite.run_suite("cpu", True, tmp_path, ["speed"], False, 1.0, merge=True)
    record = json.loads((tmp_path / "gpu-cpu.json").read_text())
    assert record["steps"]["parity"]["value"] == 1 and record["steps"]["speed"]["value"] == 1
    assert [(c["step"], c["name"]) for c in record["checks"]] == [("parity", "first ran"), ("speed", "first ran")]
    assert record["failed"] == 0 and record["steps"]["trainer"] == {"status": "skipped: not in --only"}


@pytest.mark.parametrize(("text", "message"), [
    (json.dumps({"device": "cpu", "smoke": False, "torch": "0.0"}),
     "holds a run of cpu (torch 0.0, smoke=False), not this one; give another --out"),
    ('{"device": "cpu", "sm', "is not a readable suite JSON"),
])
def test_merge_refuses_another_devices_json_or_a_damaged_one(suite, tmp_path, capsys, text, message):
    (tmp_path / "gpu-cpu.json").write_text(text)
    with pytest.raises(SystemExit) as exit_:
        suite.main(["--device", "cpu", "--smoke", "--only", "speed", "--merge", "--out", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--merge: " in err and message in err and (tmp_path / "gpu-cpu.json").read_text() == text


def test_a_step_that_raises_is_recorded_and_the_json_still_written(suite, tmp_path, monkeypatch):
    def broken(step):
        step.result["partial"] = 1
        raise RuntimeError("no kernel image is available")

    monkeypatch.setitem(suite.STEP_FUNCTIONS, "speed", broken)
    suite.run_suite("cpu", True, tmp_path, ["speed"], False, 1.0)
    record = json.loads((tmp_path / "gpu-cpu.json").read_text())
    assert record["failed"] == 1
    assert record["steps"]["speed"]["status"] == "error"
    assert record["steps"]["speed"]["error"] == "RuntimeError: no kernel image is available"
    assert record["steps"]["speed"]["partial"] == 1
    assert record["steps"]["parity"] == {"status": "skipped: not in --only"}


@pytest.mark.e2e
def test_a_trainer_variant_that_raises_is_a_failed_check_and_the_others_still_run(suite, tmp_path, monkeypatch):
    real = suite.train

    def train(spec):
        if spec.precision == "bf16" and spec.model == "gpt":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return real(spec)

    monkeypatch.setattr(suite, "train", train)
    monkeypatch.setattr(suite, "trainer_reads_micro_batches", lambda: False)
    suite.run_suite("cpu", True, tmp_path, ["trainer"], False, 1.0)
    record = json.loads((tmp_path / "gpu-cpu.json").read_text())
    gpt, vit = (record["steps"]["trainer"]["models"][m] for m in ("gpt", "vit"))
    assert record["steps"]["trainer"]["status"] == "done"
    assert gpt["bf16"] == {"status": "failed",
                           "error": "RuntimeError: CUDA error: an illegal memory access was encountered"}
    assert gpt["fp32"]["status"] == "passed" and vit["bf16"]["status"] == "passed"
    assert [c["name"] for c in record["checks"] if not c["passed"]] == ["trainer gpt bf16"]
    assert record["failed"] == 1


@pytest.mark.parametrize(("name", "peak"), [
    ("NVIDIA H100 80GB HBM3", 989.4e12), ("NVIDIA H100 PCIe", 756e12), ("NVIDIA H200", 989.4e12),
    ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA L4", 121e12), ("NVIDIA L40S", 362.05e12), ("cpu", None),
])
def test_peak_table_matches_device_names(suite, name, peak):
    assert suite.peak_bf16(name) == peak


@pytest.mark.e2e
def test_summary_gathers_the_headline_figures(smoke):
    figures = smoke["summary"]
    assert figures["parity_worst_ratio"] == smoke["steps"]["parity"]["worst_ratio"]
    assert figures["mfu"] == {}  # no peak on a CPU
    assert figures["speed_ratios"] == smoke["steps"]["speed"]["ratios"]
    assert set(figures["packed_ratios"]) == set(smoke["steps"]["packed"]["groups"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--device", "cpu", "--only", "parity,nope"], "--only: unknown step(s) nope"),
    (["--device", "tpu"], "--device 'tpu': use cuda, cuda:N or cpu"),
    (["--device", "cpu", "--budget-scale", "0"], "--budget-scale 0.0: give a positive number"),
])
def test_bad_arguments_exit_2_with_one_line(suite, argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        suite.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
