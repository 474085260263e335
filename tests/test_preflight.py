"""The preflight: a sweep that cannot work is refused once, before the parity gate and its
first run, naming the cause and the fix; a sweep whose runs fail exits 1 with a summary."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import sweep_support

import flops_fit
from flops_fit.cli.main import main
from flops_fit.cli.sweep import failure_reasons
from flops_fit.errors import PreflightError
from flops_fit.store.run_store import RunStore
from flops_fit.sweeps.driver import run_plan, sweep
from flops_fit.sweeps.planner import plan
from flops_fit.sweeps.preflight import (
    CHECKPOINT_BYTES_PER_PARAM,
    check_checkpoint_folder,
    check_datasets,
    check_losses,
    check_models,
    preflight,
)
from flops_fit.testing import isolated_host
from flops_fit.training.checkpoint import CheckpointPolicy

HOST = sweep_support.host()
TESTS = Path(__file__).resolve().parent
# The example: an hf-text sweep whose dataset names no files.
NO_FILES = """
[sweep]
model = "gpt"
dataset = "hf-text"
budgets = [1e11, 3e11]
batch_size = 8
seq_len = 64
min_steps = 5
[model]
n_layer = 2
"""


def test_a_dataset_that_does_not_open_exits_2_before_any_run(tmp_path, capsys):
    config = tmp_path / "sweep.toml"
    config.write_text(NO_FILES)
    out = tmp_path / "out"
    assert main(["sweep", str(config), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if x.startswith("flops-fit: error:")]
    assert "dataset 'hf-text' (split 'train'" in line and "does not open" in line
    assert "needs data_files=..." in line and "Traceback" not in err and "sweep [" not in err
    with RunStore(out) as store:  # no plan recorded, no parity gate run: the folder takes the fixed sweep
        assert store.planned_runs() == [] and store.get_meta("parity") is None
    # without the preflight, the old behaviour: every run fails the same way (now exit 1, grouped)
    assert main(["sweep", str(config), "--out", str(out), "--skip-preflight"]) == 1
    captured = capsys.readouterr()
    err = captured.err
    assert "the answer:" not in captured.out  # no run is done: nothing to report
    assert "flops-fit: 7 of 7 runs failed, for 1 distinct reason(s)" in err
    assert "  7 run(s) (" in err and "): DataError: hf-text needs data_files=..." in err


def test_a_refused_sweep_leaves_its_folder_to_the_corrected_one(tmp_path):
    options = sweep_support.small_plan_options(sizes=[4, 8, 12], budgets=[2e7])
    with pytest.raises(PreflightError, match="dataset 'hf-text' .* needs data_files="):
        sweep(host=HOST, out_dir=tmp_path, show_progress=False, dataset="hf-text", **options)
    before = sweep_support.CountingText.train_instances
    result = sweep(host=HOST, out_dir=tmp_path, show_progress=False, **options)
    assert set(result.runs.status) == {"done"} and len(result.runs) == 3
    assert sweep_support.CountingText.train_instances == before + 3  # the preflight opened, never trained


def test_a_device_that_is_not_here_is_refused_before_any_run(tmp_path, capsys):
    """device = "cuda" where torch sees no GPU passed the parity gate, then every run failed on its first
    tensor ("Found no NVIDIA driver"), exit 1; now one line before the gate. cuda:<device count> is absent
    on every machine; plan only notes it (a plan may be for another machine)."""
    import torch

    absent = f"cuda:{torch.cuda.device_count()}"
    options = sweep_support.small_plan_options(device=absent)
    assert any(n.startswith(f"device '{absent}' is not here") for n in plan(host=HOST, **options).notes)
    with pytest.raises(PreflightError, match=f"device '{absent}' is not here: .* set device = \"auto\""):
        sweep(host=HOST, out_dir=tmp_path, show_progress=False, **options)
    with RunStore(tmp_path) as store:
        assert store.planned_runs() == [] and store.get_meta("parity") is None


def test_a_sequence_length_mismatch_is_refused_before_any_run(tmp_path):
    """The plan test_sweep trains with skip_preflight (one run's dataset yields 8 tokens, not 16)."""
    the_plan = plan(host=HOST, **sweep_support.small_plan_options())
    broken = the_plan.runs[0]
    the_plan.runs[0] = dataclasses.replace(broken, dataset_config={**broken.dataset_config, "seq_len": 8}, run_id="")
    before = dict(sweep_support.CountingText.rows_served)
    with pytest.raises(PreflightError, match="yields sequences of 8 tokens but the plan's seq_len is 16"):
        run_plan(the_plan, tmp_path, host=HOST, show_progress=False)
    assert sweep_support.CountingText.rows_served["train"] == before["train"]  # nothing trained


class _Fragile:
    """tiny-lm's entry with a builder that refuses width 8, and a loss that forgets to average."""

    @staticmethod
    def build(width, **config):
        if width == 8:
            raise ValueError("width 8 needs an even number of groups")
        return sweep_support.TinyLM(width, **config)

    @staticmethod
    def per_token(logits, batch):
        import torch

        return torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), batch["tokens"][:, 1:],
                                                 reduction="none")

    class Clamped(sweep_support.TinyLM):
        """Reads a value out of its input: code the meta device cannot run, yet nothing wrong."""

        def forward(self, tokens):
            return super().forward(tokens.clamp(max=int(tokens.max().item())))

    @flops_fit.hookimpl
    def register_models(self, register):
        for name, builder in (("fragile-lm", self.build), ("clamped-lm", self.Clamped)):
            register(flops_fit.ModelEntry(
                name, builder=builder, size_param="width", valid_sizes=sweep_support.valid_sizes,
                param_count=sweep_support.param_count, training_flops=sweep_support.training_flops,
                flops_unit="token", task=flops_fit.TASK_CAUSAL_LM, default_loss="tiny-next-token",
                default_datasets=("counting-text",), defaults={"vocab_size": sweep_support.VOCAB, "block_size": 16},
            ))

    @staticmethod
    def as_float(logits, batch):
        return 1.0

    @staticmethod
    def raising(logits, batch):
        raise RuntimeError("the loss has a bug")

    class Renamed(sweep_support.CountingText):
        """Batches under another field name than the task's."""

        def get_batch(self, indices):
            return {"ids": super().get_batch(indices)["tokens"]}

    class Bare:
        """Map-style items that are tensors, not dicts."""

        def __init__(self, split, **config):
            self.text = sweep_support.CountingText(split, **config)

        def __len__(self):
            return len(self.text)

        def __getitem__(self, index):
            return self.text.get_batch([index])["tokens"][0]

    @flops_fit.hookimpl
    def register_losses(self, register):
        register(flops_fit.LossEntry("per-token", fn=self.per_token, task=flops_fit.TASK_CAUSAL_LM))
        register(flops_fit.LossEntry("float-loss", fn=self.as_float, task=flops_fit.TASK_CAUSAL_LM))
        register(flops_fit.LossEntry("raising-loss", fn=self.raising, task=flops_fit.TASK_CAUSAL_LM))

    @flops_fit.hookimpl
    def register_datasets(self, register):
        for name, builder in (("renamed-text", self.Renamed), ("bare-text", self.Bare)):
            register(flops_fit.DatasetEntry(
                name, builder=builder, modality="text", batch_format={"tokens": "int64[B, T]"},
                tasks=(flops_fit.TASK_CAUSAL_LM,), defaults={"seq_len": 16, "vocab_size": sweep_support.VOCAB},
            ))


FRAGILE = isolated_host(("sweep_support", sweep_support), ("fragile", _Fragile()), builtins=True)


def test_a_model_that_does_not_build_and_a_loss_that_is_not_a_scalar_are_refused(tmp_path):
    options = sweep_support.small_plan_options(model="fragile-lm")
    with pytest.raises(PreflightError, match=r"model 'fragile-lm' size 8 does not build .* ValueError: width 8 "
                                             r"needs an even number of groups; fix the \[model\] table"):
        sweep(host=FRAGILE, out_dir=tmp_path / "a", show_progress=False, **options)
    with pytest.raises(PreflightError, match=r"loss 'per-token' returns shape \(2, 15\) .* not a scalar"):
        sweep(host=FRAGILE, out_dir=tmp_path / "b", show_progress=False, loss="per-token",
              **sweep_support.small_plan_options())


@pytest.mark.parametrize(("overrides", "message"), [
    # each ended the sweep in a traceback: the forward's KeyError 'tokens', the collate's IndexError
    ({"dataset": "renamed-text"}, "dataset 'renamed-text' yields batches with fields ['ids'], but model 'tiny-lm' "
                                  "(task 'causal-lm') is called on batch['tokens']"),
    ({"dataset": "bare-text"}, "dataset 'bare-text' (split 'validation', configuration {'seq_len': 16, 'vocab_size': "
                               "256}): its samples do not make a batch: IndexError: "),
    # every run failed on it ("'float' object has no attribute 'backward'")
    ({"loss": "float-loss"}, "loss 'float-loss' returns float for model 'tiny-lm', not a tensor"),
    # it was blamed on the tables ("make the [model] and [dataset] tables agree")
    ({"loss": "raising-loss"}, "loss 'raising-loss' fails on the output of model 'tiny-lm' size 4 and a batch of "
                               "dataset 'counting-text': RuntimeError: the loss has a bug"),
])
def test_a_plugins_dataset_or_loss_that_breaks_the_batch_contract_is_refused_in_one_line(tmp_path, overrides,
                                                                                         message):
    the_plan = plan(host=FRAGILE, **sweep_support.small_plan_options(**overrides))
    with pytest.raises(PreflightError) as caught:
        preflight(the_plan, host=FRAGILE, checks=[check_datasets, check_models])
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    assert "make the [model] and [dataset] tables agree" not in str(caught.value)


def test_what_the_meta_device_cannot_run_is_left_to_the_runs():
    the_plan = plan(host=FRAGILE, **sweep_support.small_plan_options(model="clamped-lm"))
    context = preflight(the_plan, host=FRAGILE, checks=[check_datasets, check_models])
    assert context.samples and context.batches  # the datasets were opened; the forward was tried, not held against it


def test_a_loss_of_another_task_is_refused():
    the_plan = plan(host=HOST, **sweep_support.small_plan_options())
    the_plan.runs[2] = dataclasses.replace(the_plan.runs[2], loss="cross-entropy", run_id="")
    with pytest.raises(PreflightError, match="loss 'cross-entropy' is for task 'image-classification', but model "
                                             "'tiny-lm' solves 'causal-lm'"):
        preflight(the_plan, host=HOST, checks=[check_losses])


def test_the_checkpoint_folder_must_be_writable_with_room(tmp_path):
    the_plan = plan(host=HOST, **sweep_support.small_plan_options())
    (tmp_path / "a-file").write_text("")
    with pytest.raises(PreflightError, match="a-file is not a writable folder.*--checkpoint-dir"):
        preflight(the_plan, checkpoints=CheckpointPolicy(str(tmp_path / "a-file" / "checkpoints")), host=HOST,
                  checks=[check_checkpoint_folder])
    if Path("/proc/self").is_dir():  # a folder whose mode lets root in but whose file system takes no file
        with pytest.raises(PreflightError, match="/proc is not a writable folder"):
            preflight(the_plan, checkpoints=CheckpointPolicy("/proc/flops-fit-checkpoints"), host=HOST,
                      checks=[check_checkpoint_folder])
    free = __import__("shutil").disk_usage(tmp_path).free
    policy = CheckpointPolicy(str(tmp_path / "new" / "checkpoints"))
    held = policy.keep + 1  # a run holds its newest `keep` checkpoints and writes the next before pruning
    # one run at a time needs 3/4 of the free space, two need 1.5x it: the verdicts hold while other processes
    # write or free space meanwhile (sized at exactly half, another job freeing a few MB flipped the second)
    huge = [dataclasses.replace(r, params=3 * free // 4 // CHECKPOINT_BYTES_PER_PARAM // held, run_id="")
            for r in the_plan.runs]
    preflight(the_plan, huge, checkpoints=policy, concurrent=1, host=HOST, checks=[check_checkpoint_folder])
    with pytest.raises(PreflightError, match="2 run\\(s\\) at once need at least .* [GM]B for 3 checkpoints each"):
        preflight(the_plan, huge, checkpoints=policy, concurrent=2, host=HOST, checks=[check_checkpoint_folder])
    assert not (tmp_path / "new").exists()  # checked, not created


def test_a_file_in_the_place_of_a_runs_checkpoint_folder_is_refused_before_training(tmp_path):
    """A file named as a run's checkpoint folder (left by a copy, a tool): the run trained to its first checkpoint,
    then failed with 'File exists' and the advice to free space, and failed so again on --retry-failed."""
    the_plan = plan(host=HOST, **sweep_support.small_plan_options())
    policy = CheckpointPolicy(str(tmp_path / "checkpoints"))
    blocked = policy.run_dir(the_plan.runs[1].run_id)
    blocked.parent.mkdir()
    blocked.write_text("x")
    with pytest.raises(PreflightError, match=f"^{blocked} is a file, where the run's checkpoints go into a folder of "
                                             "that name: move the file away, then run again; nothing was trained$"):
        preflight(the_plan, checkpoints=policy, host=HOST, checks=[check_checkpoint_folder])
    assert blocked.read_text() == "x"


def test_a_checkpoint_folder_with_room_for_one_checkpoint_but_not_the_three_a_run_holds_is_refused(tmp_path):
    """A folder with room for one checkpoint of a run passed the preflight, and then every run of the sweep
    failed with 'No space left on device' at its third write (two kept, one being written): measured on a
    tmpfs of 20 MB under 7.6 MB checkpoints."""
    the_plan = plan(host=HOST, **sweep_support.small_plan_options())
    free = __import__("shutil").disk_usage(tmp_path).free
    half = [dataclasses.replace(r, params=free // CHECKPOINT_BYTES_PER_PARAM // 2, run_id="") for r in the_plan.runs]
    policy = CheckpointPolicy(str(tmp_path / "checkpoints"))
    with pytest.raises(PreflightError, match="1 run\\(s\\) at once need at least .* [GM]B for 3 checkpoints each "
                                             "\\(the newest 2 kept and the one being written\\)"):
        preflight(the_plan, half, checkpoints=policy, concurrent=1, host=HOST, checks=[check_checkpoint_folder])


def test_a_resumed_runs_own_checkpoints_count_as_room_for_its_next(tmp_path):
    """A sweep stopped by a full disk, resumed once space was freed, was refused: the checkpoints the run
    already held (which it prunes as it writes) were counted as taken, not as its room."""
    the_plan = plan(host=HOST, **sweep_support.small_plan_options())
    policy = CheckpointPolicy(str(tmp_path / "checkpoints"))
    run = the_plan.runs[0]
    held = policy.run_dir(run.run_id) / "step-000000010.safetensors"
    held.parent.mkdir(parents=True)
    held.write_bytes(b"\0" * (192 << 20))  # a checkpoint the run wrote before it stopped
    free = __import__("shutil").disk_usage(tmp_path).free
    # three checkpoints of this run need 64 MB more than is free, and its own 192 MB file is room for them (the
    # 128 MB left over absorbs what other tests write meanwhile)
    big = dataclasses.replace(run, params=(free + (64 << 20)) // ((policy.keep + 1) * CHECKPOINT_BYTES_PER_PARAM))
    preflight(the_plan, [big], checkpoints=policy, concurrent=1, host=HOST, checks=[check_checkpoint_folder])


def test_failures_are_grouped_by_reason_numbers_aside():
    frame = pd.DataFrame([
        {"run_id": "a" * 32, "status": "failed", "error": "diverged: train loss 9.1 exceeds 4 x 2.2 at step 12"},
        {"run_id": "b" * 32, "status": "done", "error": None},
        {"run_id": "c" * 32, "status": "failed", "error": "DataError: no file"},
        {"run_id": "d" * 32, "status": "failed", "error": "diverged: train loss 1e+05 exceeds 4 x 2.5 at step 40"},
        # a [train] command's crash names the run's own log: one reason for every run, not one each
        {"run_id": "fe1bebb11cf36ffb", "status": "failed",
         "error": "crash: the script exited with status 3 (log out/trainer-logs/fe1bebb11cf36ffb.log: boom)"},
        {"run_id": "ba10c7a60f8fe4d9", "status": "failed",
         "error": "crash: the script exited with status 3 (log out/trainer-logs/ba10c7a60f8fe4d9.log: boom)"},
    ])
    assert failure_reasons(frame) == [
        ("diverged: train loss 9.1 exceeds 4 x 2.2 at step 12", ["a" * 32, "d" * 32]),
        ("crash: the script exited with status 3 (log out/trainer-logs/fe1bebb11cf36ffb.log: boom)",
         ["fe1bebb11cf36ffb", "ba10c7a60f8fe4d9"]),
        ("DataError: no file", ["c" * 32]),
    ]


@pytest.mark.e2e
def test_cli_sweep_with_failed_runs_exits_1_with_a_summary(tmp_path):
    config = tmp_path / "sweep.toml"
    config.write_text(sweep_support.SMALL_SWEEP_TOML.replace("[2e7, 4e7]", "[2e7]")
                      + "[hparams]\nlr_rule = 'constant'\nbase_lr = 1e4\ngrad_clip = 0.0\n")
    env = {**os.environ, "PYTHONPATH": str(TESTS), "FLOPS_FIT_PLUGINS": "sweep_support"}
    proc = subprocess.run([sys.executable, "-m", "flops_fit", "sweep", str(config), "--out", str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "flops-fit: 3 of 3 runs failed, for 1 distinct reason(s)" in proc.stderr
    assert "  3 run(s) (" in proc.stderr and ": diverged: " in proc.stderr and "Traceback" not in proc.stderr


def test_a_dropout_model_trained_together_is_refused_before_any_run():
    # with stack_runs > 1 a model that draws random numbers (dropout) failed at its first step, each
    # program of runs the same way; the preflight now refuses it in one line, and trained apart it passes
    dropped = plan(host=HOST, **sweep_support.small_plan_options(model_config={"dropout": 0.1}, stack_runs=2))
    base = dropped.runs[0]
    rates = [dataclasses.replace(base, lr=base.lr * m, run_id="") for m in (0.5, 1.0)]  # a tune's cell
    together = dataclasses.replace(dropped, runs=rates)
    with pytest.raises(PreflightError, match=r"^model 'tiny-lm' size 4 draws random numbers while it trains "
                                             r"\(dropout\): .*stack_runs = 1"):
        preflight(together, host=HOST)
    alone = dataclasses.replace(together, options=dataclasses.replace(dropped.options, stack_runs=1))
    assert preflight(alone, host=HOST).batches  # one at a time it trains
    assert preflight(dropped, host=HOST).batches  # no two runs of one shape: nothing trains together
    plain = plan(host=HOST, **sweep_support.small_plan_options(stack_runs=2))
    preflight(dataclasses.replace(plain, runs=[dataclasses.replace(plain.runs[0], lr=plain.runs[0].lr * m, run_id="")
                                               for m in (0.5, 1.0)]), host=HOST)  # no dropout: trains together


def test_token_ids_beyond_the_models_vocabulary_are_refused_before_any_run(tmp_path):
    """A token file with ids up to 999 and no vocab_size, for gpt's 256-token vocabulary: the plan
    and the preflight passed (the meta-device forward cannot index), then every run failed on its
    first batch with torch's 'index out of range in self' (on CUDA, a device assert)."""
    import numpy as np

    tokens = tmp_path / "tokens.bin"
    np.arange(20_000, dtype=np.uint16).__mod__(1000).astype(np.uint16).tofile(tokens)
    options = dict(model="gpt", dataset="token-file", budgets=[5e11], sizes_per_budget=3, min_steps=5, batch_size=8,
                   seq_len=64, dataset_config={"path": str(tokens)})
    the_plan = plan(**options)
    assert the_plan.runs[0].model_config["vocab_size"] == 256 and the_plan.runs[0].dataset_config["vocab_size"] is None
    with pytest.raises(PreflightError, match=r"its token ids checked against the vocab_size 256 of model 'gpt', does "
                                             r"not open: token-file: .* holds token id 999 >= vocab_size 256; the "
                                             r"model's vocabulary must hold every id: set vocab_size = 1000 or more"):
        preflight(the_plan)
    fixed = plan(**{**options, "dataset_config": {"path": str(tokens), "vocab_size": 1000}})
    assert fixed.runs[0].model_config["vocab_size"] == 1000
    preflight(fixed)
    preflight(plan(**{**options, "model_config": {"vocab_size": 1024}}))  # a larger vocabulary of the model's own
