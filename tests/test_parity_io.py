"""Reading reference weights: safetensors files, HF folders, shards; clear errors otherwise."""

from __future__ import annotations

import json
import re

import pytest
import torch
from flops_fit.parity.safetensors_io import load_weights, read_safetensors
from safetensors.torch import save_file

from flops_fit.errors import WeightFileError


@pytest.fixture
def weights_file(tmp_path):
    path = tmp_path / "model.safetensors"
    save_file({"a": torch.arange(12.0).view(3, 4), "b": torch.ones(5)}, str(path))
    return path


def test_reads_a_file_and_a_folder_with_config(weights_file, tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 4}))
    assert torch.equal(read_safetensors(weights_file)["a"], torch.arange(12.0).view(3, 4))
    weights = load_weights(tmp_path)
    assert set(weights.tensors) == {"a", "b"} and weights.config == {"hidden_size": 4}


def test_reads_sharded_folders(tmp_path) -> None:
    save_file({"a": torch.zeros(2)}, str(tmp_path / "model-00001-of-00002.safetensors"))
    save_file({"b": torch.ones(3)}, str(tmp_path / "model-00002-of-00002.safetensors"))
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert sorted(load_weights(tmp_path).tensors) == ["a", "b"]


@pytest.mark.parametrize("shard", ["../outside.safetensors", "ABSOLUTE", "sub/../../outside.safetensors", 5, ""])
def test_a_shard_index_naming_a_file_outside_its_folder_is_refused(tmp_path, shard) -> None:
    """An index whose weight_map named '../x.safetensors' or an absolute path read that file as the
    model's weights (a number or '' raised TypeError / IsADirectoryError); each is refused by entry."""
    save_file({"a": torch.zeros(2)}, str(tmp_path / "outside.safetensors"))
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    save_file({"b": torch.ones(3)}, str(folder / "model-00001-of-00001.safetensors"))
    shard = str(tmp_path / "outside.safetensors") if shard == "ABSOLUTE" else shard
    index = {"weight_map": {"b": "model-00001-of-00001.safetensors", "a": shard}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(WeightFileError, match=rf"model\.safetensors\.index\.json: weight_map entry 'a' names shard "
                                              rf"{re.escape(repr(shard))}, which is not a file name in the model's folder"):
        load_weights(folder)


def test_truncated_file_is_named_as_truncated(weights_file) -> None:
    data = weights_file.read_bytes()
    weights_file.write_bytes(data[:-7])
    with pytest.raises(WeightFileError, match=r"truncated: its tensors need \d+ bytes of data but the file holds"):
        read_safetensors(weights_file)


def test_file_cut_inside_its_header_is_truncated_or_corrupt(weights_file) -> None:
    weights_file.write_bytes(weights_file.read_bytes()[:30])
    with pytest.raises(WeightFileError, match="truncated or corrupt: its header claims"):
        read_safetensors(weights_file)


def test_corrupt_header_and_tiny_file(weights_file) -> None:
    data = bytearray(weights_file.read_bytes())
    data[8:12] = b"\xff\xfe{{"
    weights_file.write_bytes(bytes(data))
    with pytest.raises(WeightFileError, match="corrupt: its header is not valid safetensors JSON"):
        read_safetensors(weights_file)
    weights_file.write_bytes(b"abc")
    with pytest.raises(WeightFileError, match="not a safetensors file: it has 3 bytes"):
        read_safetensors(weights_file)


def test_pickle_checkpoints_are_refused_without_loading(tmp_path) -> None:
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(b"not even opened")
    with pytest.raises(WeightFileError, match="pickle checkpoint; flops-fit never unpickles"):
        read_safetensors(path)
    with pytest.raises(WeightFileError, match=r"holds pickle checkpoints \(pytorch_model.bin\)"):
        load_weights(tmp_path)


def test_missing_path_and_missing_index_map(tmp_path) -> None:
    with pytest.raises(WeightFileError, match="no such weight file or folder"):
        load_weights(tmp_path / "nope.safetensors")
    (tmp_path / "model.safetensors.index.json").write_text("{}")
    with pytest.raises(WeightFileError, match="has no 'weight_map' object"):
        load_weights(tmp_path)


@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy-pickle"])
def test_a_pickle_checkpoint_renamed_safetensors_is_named_as_pickle(tmp_path, zipped) -> None:
    """torch.save output under a .safetensors name read as 'truncated or corrupt ... re-download';
    it is a pickle checkpoint, never unpickled, and the fix is converting it."""
    path = tmp_path / "model.safetensors"
    torch.save({"w": torch.ones(3)}, path, _use_new_zipfile_serialization=zipped)
    with pytest.raises(WeightFileError, match=r"model.safetensors is a pickle checkpoint \(torch.save's format\) "
                                              r"under a safetensors name; flops-fit never unpickles"):
        load_weights(tmp_path)


@pytest.mark.parametrize("entry", [{"dtype": "F32", "shape": [1]}, {"dtype": "F32", "shape": [1], "data_offsets": "x"},
                                   [1, 2]], ids=["no-offsets", "offsets-not-a-pair", "not-an-object"])
def test_a_header_entry_without_its_offsets_is_named_as_corrupt(tmp_path, entry) -> None:
    """A header whose tensor entry lacks valid data_offsets raised KeyError / IndexError / TypeError."""
    import struct

    header = json.dumps({"w": entry}).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(4))
    with pytest.raises(WeightFileError, match=r"model.safetensors is corrupt: its header's entry for tensor 'w' has "
                                              r"no \[start, end\] data_offsets"):
        read_safetensors(path)


def _two_shards(folder, second: dict) -> None:
    save_file({"a": torch.zeros(2)}, str(folder / "model-00001-of-00002.safetensors"))
    save_file(second, str(folder / "model-00002-of-00002.safetensors"))
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("second, named", [
    ({"b": torch.ones(3), "a": torch.full((2,), 7.0)}, "a in model-00002-of-00002.safetensors (index: "
                                                         "model-00001-of-00002.safetensors)"),
    ({"b": torch.ones(3), "c": torch.ones(1)}, "c in model-00002-of-00002.safetensors (index: not listed)"),
])
def test_shards_holding_tensors_the_index_puts_elsewhere_are_refused(tmp_path, second, named) -> None:
    """A tensor in two shards was read from both and the later shard's copy kept (here 7s where the
    index names the zeros): a silently different model. Each tensor stray from its index entry is named."""
    _two_shards(tmp_path, second)
    with pytest.raises(WeightFileError, match=r"the shards hold tensors where the index does not put them.*"
                                              + re.escape(named)):
        load_weights(tmp_path)


def test_a_shard_the_index_names_but_the_folder_lacks_is_named(tmp_path) -> None:
    _two_shards(tmp_path, {"b": torch.ones(3)})
    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(WeightFileError, match=r"model\.safetensors\.index\.json names shard "
                                              r"'model-00002-of-00002\.safetensors', which is not in "):
        load_weights(tmp_path)
