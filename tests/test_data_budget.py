"""A sweep's data budget: datasets report their unique tokens, runs record their epochs, plan warns."""

import math
import re

import pytest
from test_bpb import small_plan, write_corpus

import flops_fit
from flops_fit.cli.main import main
from flops_fit.store.run_store import RunStore
from flops_fit.sweeps.data_budget import repeat_warning, repeats, unique_tokens
from flops_fit.sweeps.demo import demo_plan
from flops_fit.training.loop import train


def test_a_text_dataset_reports_its_unique_tokens(tmp_path):
    corpus = write_corpus(tmp_path / "corpus")
    data = flops_fit.create_dataset("text-files", "train", paths=[str(corpus)], seq_len=16)
    assert data.unique_tokens == len(data) * 16 > 0
    assert data.unique_tokens <= sum(f.stat().st_size for f in corpus.iterdir())  # bytes: one token each


def test_runs_record_their_epochs_and_the_store_the_budget(tmp_path):
    plan = small_plan(write_corpus(tmp_path / "corpus"), "bytes")
    unique = unique_tokens(plan.options)
    spec = plan.runs[0]
    result = train(spec)
    assert result.unique_tokens == unique
    assert result.epochs == pytest.approx(result.tokens / unique)
    with RunStore(tmp_path / "sweep", create=True) as store:
        store.add_plan(plan, spec=plan.settings)
        store.record(result)
        assert store.get_meta("unique_tokens") == unique
        assert store.runs_frame().set_index("run_id").loc[spec.run_id, "epochs"] == pytest.approx(result.epochs)
    assert flops_fit.load_runs(tmp_path / "sweep").metadata["unique_tokens"] == unique


def test_a_stated_budget_wins_and_plan_warns_of_repeats(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus")
    plan = flops_fit.plan(small_plan(corpus, "bytes").options.replace(unique_tokens=1000))
    assert unique_tokens(plan.options) == 1000 and all(r.unique_tokens == 1000 for r in plan.runs)
    repeated = repeats(plan.runs, 1000)
    assert repeated and all(epochs == pytest.approx(r.tokens / 1000) for r, epochs in repeated)
    assert "repeat their data, up to" in repeat_warning(plan.runs, 1000)
    assert repeat_warning(plan.runs, 10**12) is None and repeat_warning(plan.runs, None) is None
    config = tmp_path / "sweep.toml"
    config.write_text(f'[sweep]\nmodel = "gpt"\ndataset = "text-files"\nbudgets = [3e7]\nsizes = [4, 8, 12]\n'
                      f'seq_len = 16\nbatch_size = 4\nmin_steps = 2\nunique_tokens = 1000\n'
                      f'[model]\nn_layer = 1\nhead_dim = 4\n[dataset]\npaths = ["{corpus}"]\n')
    assert main(["plan", str(config)]) == 0
    out = capsys.readouterr().out
    assert "runs repeat their data, up to" in out and "does not open here" not in out
    # the dry run says what the sweep would refuse: a dataset that does not open (it printed the plan alone)
    config.write_text(config.read_text().replace(f'paths = ["{corpus}"]', ""))
    assert main(["plan", str(config)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "warning: dataset 'text-files' does not open here: text-files needs paths=[...]: files, folders or glob "
        "patterns of text; `flops-fit sweep` refuses until it opens")
    # the sweep refuses, leaving the store it opened: status says no plan, not "0 runs: "
    assert main(["sweep", str(config), "--out", str(tmp_path / "out")]) == 2
    capsys.readouterr()
    assert main(["status", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out == (f"{tmp_path / 'out'}: no plan recorded (a sweep into it stopped before its "
                                       f"first run); `flops-fit sweep CONFIG --out {tmp_path / 'out'}` starts one\n")
    assert math.isnan(flops_fit.RunResult("x", "done").epochs)


def _missing_file(split, **config):
    return open("no-such-folder/data.txt").read()


class _DatasetOfMissingFiles:
    @flops_fit.hookimpl
    def register_datasets(self, register):
        register(flops_fit.DatasetEntry("my-files", builder=_missing_file, modality="text",
                                        batch_format={"tokens": "int64[B, T]"}, tasks=("causal-lm",)))


def test_a_plugin_dataset_that_raises_its_own_error_is_a_warning_then_a_refusal(tmp_path, capsys):
    """A plugin's builder raising FileNotFoundError ended `flops-fit plan` and `sweep` in its traceback."""
    from flops_fit.plugin.host import Host, reset_host

    config = tmp_path / "sweep.toml"
    config.write_text('[sweep]\nmodel = "gpt"\ndataset = "my-files"\nbudgets = [3e7]\nsizes = [4, 8, 12]\n'
                      'seq_len = 16\nbatch_size = 4\nmin_steps = 2\n[model]\nn_layer = 1\nhead_dim = 4\n')
    reset_host(Host(entry_points=False, plugins=[("mine", _DatasetOfMissingFiles())], env={}))
    try:
        assert main(["plan", str(config)]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == (
            "warning: dataset 'my-files' does not open here: FileNotFoundError: [Errno 2] No such file or directory: "
            "'no-such-folder/data.txt'; `flops-fit sweep` refuses until it opens")
        assert main(["sweep", str(config), "--out", str(tmp_path / "out"), "--skip-parity"]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.splitlines()[-1].startswith(
            "flops-fit: error: dataset 'my-files' (split 'train', configuration {'seq_len': 16}) does not open: "
            "FileNotFoundError")
    finally:
        reset_host(None)


def _image_folder(root, per_class=4):
    """Three class folders of ``per_class`` random 8x8 PNGs each."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for name in ("a", "b", "c"):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(root / name / f"{i}.png")
    return root


def test_a_sweep_that_cycles_a_few_images_is_warned_and_a_glyphs_stream_is_not(tmp_path, capsys):
    """An image-folder of 9 training images planned for millions of samples (over 100,000 epochs) printed no
    repeat warning: image datasets reported no count. They report ``unique_samples`` now, read by the plan
    alone: runs do not record it (no ``unique_tokens``), so what an image sweep's fit reads is unchanged."""
    root = _image_folder(tmp_path / "images")
    data = flops_fit.create_dataset("image-folder", "train", root=str(root), image_size=8, validation_fraction=0.25)
    assert data.unique_samples == len(data) == 9 and not hasattr(data, "unique_tokens")
    config = tmp_path / "sweep.toml"
    config.write_text(f'[sweep]\nmodel = "vit"\ndataset = "image-folder"\nbudgets = [1e13]\nsizes = [32, 64, 96]\n'
                      f'batch_size = 16\n[dataset]\nroot = "{root}"\nimage_size = 8\nvalidation_fraction = 0.25\n'
                      f'[model]\ndepth = 2\npatch_size = 4\n')
    assert main(["plan", str(config)]) == 0
    warning = capsys.readouterr().out.splitlines()[-1]
    assert re.fullmatch(r"warning: 3 of 3 runs repeat their data, up to [\d.]+ epochs of 9 unique samples \(run \w+, "
                        r"size 32\); 3 beyond 4 epochs, where repeats are worth much less than new data\. Fit with "
                        r"unique_tokens=9 \(--unique-tokens 9, in samples\) for the data-constrained law, or use a "
                        r"larger dataset", warning), warning
    glyphs = flops_fit.plan(model="vit", dataset="glyphs", budgets=[1e13], sizes=[32, 64, 96], batch_size=16,
                            model_config={"depth": 2, "patch_size": 4}, dataset_config={"image_size": 8})
    # 4M images, each drawn from its index: the smallest model here trains on 12.4M samples, 3 epochs of them
    assert unique_tokens(glyphs.options) == 1 << 22
    assert "1 of 3 runs repeat their data, up to 3.0 epochs of 4,194,304 unique samples" in \
        repeat_warning(glyphs.runs, 1 << 22, "sample")



def test_the_vit_demo_draws_fewer_glyphs_than_the_corpus_holds():
    """glyphs now reports its 4,194,304 images, so a sweep past them is warned (above); the ViT demo's runs,
    "a stream that never repeats", stay below them and plan without a warning."""
    demo, _ = demo_plan("vit")
    assert unique_tokens(demo.options) == 1 << 22
    assert max(r.tokens for r in demo.runs) < 1 << 22 and repeat_warning(demo.runs, 1 << 22, "sample") is None
