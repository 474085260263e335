"""The demo: its plan has the promised shape, and a scaled-down copy of that shape runs
end to end (sweep, IsoFLOP table) in seconds; the parity gate and the fit have their own tests."""

import pytest

from flops_fit.sweeps import demo
from flops_fit.training.wsd import families


def test_the_gpt_demo_plan_has_the_promised_shape():
    plan, config = demo.demo_plan("gpt")
    assert len(plan.budgets) >= 4 and plan.options.schedule == "wsd"
    for budget in plan.budgets:
        assert sum(r.budget == budget for r in plan.runs) >= 5
    assert plan.saved_fraction >= 0.4
    # one stable phase per size, each serving several budgets
    assert len(families(plan.runs)) == len({r.size for r in plan.runs}) < len(plan.runs) / 4
    assert plan.options.model_config["n_head"] == 2  # 2 heads at every width: cheap CPU attention


@pytest.fixture
def small_demo(monkeypatch):
    """The GPT demo's shape (budgets sqrt(2) apart, a size ladder of 4 sizes, WSD) at 1/1000 the compute:
    3 budgets, 12 runs (the ladder's sizes and more than 30% saved, as with 4)."""
    config = {
        "sweep": {**demo.DEMOS["gpt"]["sweep"], "budgets": [2.5e8, 3.5e8, 5e8], "sizes_per_budget": 4,
                  "span": 8.0, "batch_size": 32, "seq_len": 16, "eval_tokens": 2048, "min_steps": 10},
        "model": {"n_layer": 1, "n_head": 1, "gelu": "exact"},
        # widths down to 1, far below the shipped law's grid (6-40): extrapolate it, as said
        "hparams": {**demo.DEMOS["gpt"]["hparams"], "beyond": "extrapolate"},
        "executor": {"threads": 1},
    }
    monkeypatch.setitem(demo.DEMOS, "gpt-small", config)
    return "gpt-small"


@pytest.mark.e2e
def test_a_scaled_down_demo_runs_end_to_end(small_demo, tmp_path):
    plans = []
    outcome = demo.run_demo(small_demo, tmp_path, show_progress=False, fit=False, skip_parity=True,
                            on_plan=plans.append)
    assert plans == [outcome.plan] and outcome.plan.saved_fraction > 0.3
    frame = outcome.result.runs
    assert len(frame) == len(outcome.plan.runs) and set(frame.status) == {"done"}
    text = (tmp_path / "isoflop.txt").read_text()
    assert f"of {len(outcome.plan.budgets)} IsoFLOP curves have an interior minimum" in text
    assert "saved)" in text


def test_the_vit_demo_plan_sweeps_glyphs_with_the_promised_shape():
    plan, config = demo.demo_plan("vit")
    assert plan.options.dataset == "glyphs" and plan.options.schedule == "wsd" and config.executor_options["threads"] == 1
    assert len(plan.budgets) >= 5
    for budget in plan.budgets:
        assert sum(r.budget == budget for r in plan.runs) >= 5
    assert len(families(plan.runs)) == len({r.size for r in plan.runs}) < len(plan.runs) / 2
    assert {r.model_config["num_classes"] for r in plan.runs} == {plan.options.dataset_config["num_classes"]}


@pytest.mark.e2e
def test_a_scaled_down_vit_demo_runs_end_to_end(monkeypatch, tmp_path):
    """The ViT demo's configuration (glyphs, WSD, one stable phase per size) at 8 x 8 pixels, 3 widths, 250 steps."""
    vit = demo.DEMOS["vit"]
    config = {**vit, "sweep": {**vit["sweep"], "budgets": [4e7, 5.6e7, 8e7], "sizes": [4, 8, 12], "batch_size": 32,
                                "eval_tokens": 64, "min_steps": 10},
              "dataset": {**vit["dataset"], "image_size": 8}, "model": {**vit["model"], "patch_size": 4},
              # the shipped law holds at batch 128 on the full demo's grid: this small copy takes the rule it was
              # centred on
              "hparams": {"lr_rule": "inverse-width", "base_lr": 3e-3, "base_width": 64}}
    monkeypatch.setitem(demo.DEMOS, "vit-small", config)
    outcome = demo.run_demo("vit-small", tmp_path, show_progress=False, fit=False, skip_parity=True)
    frame = outcome.result.runs
    assert len(frame) == len(outcome.plan.runs) >= 9 and set(frame.status) == {"done"}
    assert (frame.loss < 5).all()  # a held-out cross-entropy over the demo's classes, every run finished
    assert "of 3 IsoFLOP curves have an interior minimum" in (tmp_path / "isoflop.txt").read_text()


def test_demo_refuses_no_workers_before_printing_its_plan(tmp_path, capsys):
    """`flops-fit demo --workers 0` printed the plan's headline and schedule, then refused."""
    from flops_fit.cli.main import main

    assert main(["demo", "--workers", "0", "--out", str(tmp_path / "demo")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "flops-fit: error: workers must be a positive integer, got 0\n"
    assert not (tmp_path / "demo").exists()


def demo_store(folder, budgets=(2.5e8, 3.5e8, 5e8, 7e8)):
    """The small GPT demo's plan in ``folder`` with every run done, its loss drawn from a Chinchilla law whose
    optimum lies inside each budget's sizes: a demo folder as training would leave it, in a second."""
    import numpy as np

    from flops_fit.fitting.laws.laws import law_loss
    from flops_fit.store.run_store import RunStore
    from flops_fit.store.runs import RunResult

    planned, _ = demo.demo_plan("gpt-small")
    assert tuple(planned.budgets) == budgets
    law, rng = {"E": 1.0, "A": 60.0, "B": 300.0, "alpha": 0.35, "beta": 0.35}, np.random.default_rng(0)
    with RunStore(folder, create=True) as store:
        store.add_plan(planned, spec=planned.settings)
        for r in planned.runs:
            store.mark_running(r.run_id)
            loss = float(law_loss(law, r.params, r.tokens) * np.exp(rng.normal(0, 0.01)))
            store.record(RunResult(r.run_id, "done", loss=loss, tokens=r.tokens, flops=r.flops, steps=r.steps))
    return folder


@pytest.fixture
def four_budgets(small_demo, monkeypatch):
    """The small demo at 4 budgets, the fewest that forward-chain to a forecast."""
    config = demo.DEMOS[small_demo]
    monkeypatch.setitem(demo.DEMOS, small_demo, {**config, "sweep": {**config["sweep"],
                                                                      "budgets": [2.5e8, 3.5e8, 5e8, 7e8]}})
    return small_demo


@pytest.mark.e2e
def test_the_report_of_a_demo_folder_answers_as_the_demo_did(four_budgets, tmp_path, capsys):
    """The demo fits with 200 bootstrap resamples and `report` fitted its folder with 500: on the ViT demo a
    candidate's interval reached below 0 at 500, and the report forecast N_opt 32.6k where the demo printed
    30.5k. The demo records its fit's settings and the report takes them: the same answer, and it says so."""
    from flops_fit.cli.main import main

    out = demo_store(tmp_path / "demo")
    outcome = demo.run_demo(four_budgets, out, show_progress=False, bootstrap=0, skip_parity=True)
    assert outcome.fit.forecast is not None
    capsys.readouterr()
    assert main(["report", str(out), "--workers", "1", "--tracking", "off"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(outcome.fit.summary() + "\n")
    assert captured.err == (f"flops-fit: fitting {out} as flops-fit demo did: 0 bootstrap resamples and --holdout "
                            "forward (give --bootstrap N or --holdout to fit otherwise)\n")


def test_fit_on_a_demo_folder_takes_its_recorded_bootstrap_count_unless_given(small_demo, tmp_path, capsys):
    """`fit` on a folder the demo fitted takes the demo's bootstrap count (its holdout only for the demo's
    method), saying so; a --bootstrap given is the user's."""
    import flops_fit
    from flops_fit.cli.main import main
    from flops_fit.store.run_store import FIT_META, RunStore

    out = demo_store(tmp_path / "demo", budgets=(2.5e8, 3.5e8, 5e8))
    with RunStore(out) as store:
        store.set_meta(**{FIT_META: {"by": "flops-fit demo", "method": "all", "holdout": "forward", "bootstrap": 10}})
    for given, count in (([], 10), (["--bootstrap", "20"], 20)):
        assert main(["fit", str(out), "--tracking", "off", "--workers", "1", *given]) == 0
        captured = capsys.readouterr()
        expected = flops_fit.fit(str(out), bootstrap=count, tracking=False, workers=1)
        assert captured.out == expected.summary() + "\n"
        assert captured.err == ("" if given else f"flops-fit: fitting {out} as flops-fit demo did: 10 bootstrap "
                                                 "resamples (give --bootstrap N or --holdout to fit otherwise)\n")
