"""docs/guide/own-runs.md's Python examples run as written."""

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "own-runs.md"


def test_the_guides_examples_run_as_written(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch.utils.tensorboard")
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert len(blocks) == 3
    for block in blocks:
        exec(compile(block, str(GUIDE), "exec"), {})
    out = capsys.readouterr().out
    assert "6 runs kept, 30 left out" in out and "chosen:" in out
    assert (tmp_path / "law" / "hparams.json").is_file() and (tmp_path / "sweep-out" / "runs.sqlite").is_file()
