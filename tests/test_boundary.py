"""No tracebacks at the boundary: every key of a sweep file, given a wrong type, a wrong
sign, NaN, or an unknown sibling, gives one line on stderr and exit 2."""

import dataclasses
import math

import pytest
from flops_fit.plugins.models.gpt import GPTConfig

from flops_fit.cli.main import main
from flops_fit.sweeps.config import sweep_keys
from flops_fit.sweeps.hparams import HyperParams
from flops_fit.tracking.options import TrackingOptions

# A valid sweep file of the built-in GPT; every table's keys are set so each is exercised.
BASE = {
    "sweep": {"model": "gpt", "dataset": "python-stdlib", "budgets": [1e11], "sizes_per_budget": 3,
              "span": 4.0, "tokens_per_param": 20.0, "batch_size": 8, "min_steps": 5, "eval_tokens": 512,
              "curve_points": 4, "seed": 0, "eval_split": "validation", "precision": "fp32", "device": "cpu",
              "compile": False, "throughput": 1e10, "max_size": 256, "flops_accounting": "model",
              "checkpoint_seconds": 600.0, "keep_weights": False, "stack_runs": 1, "loss": "next-token", "schedule": "wsd",
              "cooldown_fraction": 0.2, "cooldown_shape": "linear", "size_ladder": True,
              "micro_batch_size": 4, "processes_per_run": 1, "parallel": "ddp",
              "out": "out", "checkpoint_dir": "ck"},
    "model": {"n_layer": 1, "n_head": 2, "n_kv_head": 1, "head_dim": 8, "vocab_size": 256, "block_size": 32,
              "layer_norm_eps": 1e-5, "bias": True, "gelu": "tanh", "parametrization": "mup", "base_width": 16},
    "dataset": {},
    "hparams": {"lr_rule": "constant", "base_lr": 3e-3, "base_width": 128, "warmup_fraction": 0.05,
                "max_warmup_steps": 100, "min_lr_ratio": 0.1, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95,
                "eps": 1e-8, "grad_clip": 1.0, "divergence_factor": 3.0, "lr": 1e-3, "reach": 4.0, "beyond": "refuse"},
    "tracking": {"backends": ["tensorboard", "mlflow"], "dir": "logs", "experiment": "lab", "wandb_mode": "offline",
                 "mlflow_uri": "file:///tmp/mlruns"},
    "executor": {"name": "local", "workers": 1, "threads": 1},
}
# keys that a plan does not read, with the value that fills them in BASE
OPTIONAL = {("sweep", "sizes"): [16, 32, 48], ("sweep", "seq_len"): 32,
            ("sweep", "hparams"): "a-tune-folder", ("hparams", "tuned"): "a-tune-folder",
            ("sweep", "unique_tokens"): 10_000_000}
WRONG = {"type": {"a": 1}, "sign": -5, "nan": math.nan}


def toml(data):
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float) and math.isnan(v):
            return "nan"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v) if isinstance(v, (int, float)) else f'"{v}"'

    return "\n".join(f"[{t}]\n" + "\n".join(f"{k} = {value(v)}" for k, v in keys.items()) for t, keys in data.items())


def cases():
    keys = [("sweep", k) for k in sweep_keys()] + [("hparams", f.name) for f in dataclasses.fields(HyperParams)]
    keys += [("model", f.name) for f in dataclasses.fields(GPTConfig)[1:]] + [("executor", k) for k in BASE["executor"]]
    keys += [("tracking", k) for k in TrackingOptions.keys()]
    for table, key in keys:
        for kind in WRONG:
            yield table, key, kind
        yield table, key, "unknown sibling"


def test_every_known_key_is_in_the_base_file():
    listed = {(t, k) for t, k, _ in cases()}
    assert listed == {(t, k) for t, keys in BASE.items() for k in keys} | set(OPTIONAL)


def test_the_base_file_plans(tmp_path, capsys):
    path = tmp_path / "ok.toml"
    path.write_text(toml(BASE))
    assert main(["plan", str(path)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("table, key, kind", list(cases()))
def test_a_bad_value_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, table, key, kind):
    data = {t: dict(keys) for t, keys in BASE.items()}
    if kind == "unknown sibling":
        data[table][key + "_typo"] = 1
    else:
        data[table][key] = WRONG[kind]
    path = tmp_path / "bad.toml"
    path.write_text(toml(data))
    monkeypatch.chdir(tmp_path)
    # the folders are read by `sweep`, which checks them before any training; `plan` checks the executor too
    command = ["sweep", str(path), "--skip-parity"] if key in ("out", "checkpoint_dir") else ["plan", str(path)]
    code = main(command)
    err = capsys.readouterr().err
    assert code == 2, f"{table}.{key} = {kind}: exit {code}, stderr {err!r}"
    assert err.startswith("flops-fit: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    name = key + "_typo" if kind == "unknown sibling" else key
    assert name in err or name.rstrip("s") in err or (table, key) == ("executor", "name"), err  # names the key


@pytest.mark.parametrize("table, key, value, message", [
    ("model", "n_kv_head", 3, r"n_kv_head=3 does not divide n_head=8: .* choose n_kv_head among \[1, 2, 4, 8\]"),
    # a head count no width can fix read "width=... is not a valid size ... none within a factor of 2"
    ("model", "n_head", 0, r"n_head must be a positive integer, got 0"),
    ("model", "n_kv_head", -2, r"n_kv_head must be a positive integer, got -2"),
    ("model", "n_head", "8", r"n_head must be a positive integer, got '8'"),
    ("model", "bogus", 1, r"unknown configuration keyword\(s\) \['bogus'\]"),
    ("sweep", "tokens_per_param", -5, "tokens_per_param must be a finite positive number, got -5"),
    ("sweep", "tokens_per_param", float("inf"), "tokens_per_param must be a finite positive number, got inf"),
    ("sweep", "loss", "nope", "no loss called 'nope'.* Known losses: "),
])
def test_the_reported_cases_name_the_value(tmp_path, capsys, table, key, value, message):
    import re

    data = {t: dict(keys) for t, keys in BASE.items()}
    data["model"]["n_head"] = 8
    data[table][key] = value
    path = tmp_path / "bad.toml"
    path.write_text(toml(data))
    assert main(["plan", str(path)]) == 2
    assert re.search(message, capsys.readouterr().err)


def test_plan_checks_a_cluster_executor_by_its_name_alone(tmp_path, capsys):
    """`plan` passed any [executor] table that `sweep` then refused; it now refuses what sweep does for the
    local executor, but of ray or slurm only an unknown name: their checks need the cluster (sbatch on
    PATH, an address that answers), and a cluster's sweep is planned on a laptop too."""
    data = {t: dict(keys) for t, keys in BASE.items()}
    path = tmp_path / "cluster.toml"
    data["executor"] = {"name": "slurm", "partition": "gpu"}
    path.write_text(toml(data))
    assert main(["plan", str(path)]) == 0, capsys.readouterr().err
    data["executor"] = {"name": "dask"}
    path.write_text(toml(data))
    assert main(["plan", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"flops-fit: error: {path} [executor] (or its command-line options): "
                                              "no executor called 'dask'")


def test_a_bad_executor_option_names_the_file_and_its_table(tmp_path, capsys, monkeypatch):
    """It said only "workers must be a positive integer, got 'two'": which of the options, of what?"""
    data = {t: dict(keys) for t, keys in BASE.items()}
    data["executor"]["workers"] = "two"
    path = tmp_path / "bad.toml"
    path.write_text(toml(data))
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", str(path), "--skip-parity"]) == 2
    assert capsys.readouterr().err == (f"flops-fit: error: {path} [executor] (or its command-line options): workers "
                                       "must be a positive integer, got 'two'\n")


def test_out_naming_an_existing_file_is_one_line(tmp_path, capsys):
    path = tmp_path / "ok.toml"
    path.write_text(toml(BASE))
    (tmp_path / "a-file").write_text("")
    assert main(["sweep", str(path), "--out", str(tmp_path / "a-file"), "--skip-parity"]) == 2
    assert capsys.readouterr().err == f"flops-fit: error: {tmp_path / 'a-file'} is an existing file, not a folder: " \
                                      "choose a folder for the sweep's store\n"


def test_a_second_driver_on_the_folder_is_refused_with_one_line(tmp_path, capsys):
    import os

    from flops_fit.store.lease import Lease
    from flops_fit.store.run_store import RunStore

    path = tmp_path / "ok.toml"
    path.write_text(toml(BASE))
    out = tmp_path / "out"
    with RunStore(out, create=True) as store, Lease(store.path):  # the live first driver
        code = main(["sweep", str(path), "--out", str(out), "--resume", "--skip-parity"])
    assert code == 2
    last = capsys.readouterr().err.splitlines()[-1]  # after the plan's table
    assert last.startswith(f"flops-fit: error: {out} is being swept by another driver (pid {os.getpid()} on ")
    with RunStore(out) as store:
        assert store.counts() == {}  # it wrote nothing
