"""Built-in datasets on samples the tests write: batches in the shared format, held-out
splits that never overlap training data, and loader errors that name the fix."""

import json
import pickle
import shutil

import numpy as np
import pytest
import torch
from flops_fit.plugins.data import text_data
from flops_fit.plugins.data.image_data import ImageTensors

import flops_fit
from flops_fit.errors import FlopsFitError


def test_python_stdlib_is_split_by_file_and_byte_level():
    base, files = text_data.stdlib_files()
    train = set(text_data.split_files(files, base, "train", 0.05))
    held_out = set(text_data.split_files(files, base, "validation", 0.05))
    assert train and held_out and not train & held_out
    assert train | held_out == set(files)
    assert 0.01 < len(held_out) / len(files) < 0.15
    assert not any("site-packages" in str(f) for f in files)
    data = flops_fit.create_dataset("python-stdlib", "validation", seq_len=32)
    batch = data.get_batch(np.array([0, 1, len(data) - 1]))
    assert batch["tokens"].dtype == torch.int64 and batch["tokens"].shape == (3, 32)
    assert int(batch["tokens"].max()) < 256
    whole = b"".join(f.read_bytes() for f in sorted(held_out, key=files.index))
    assert bytes(batch["tokens"][0].tolist()) == whole[:32]



def test_python_stdlib_walks_its_files_once_per_process_and_gives_the_same_bytes(tmp_path, monkeypatch):
    """Every create_dataset call (a run's training split, then its held-out one, in every run a worker
    trains) walked, split and stat'ed the standard library's files again. Now once per folder and fraction
    in a process, the bytes those of the files themselves."""
    root = tmp_path / "lib"
    for i in range(60):
        (root / f"pkg{i % 3}").mkdir(parents=True, exist_ok=True)
        (root / f"pkg{i % 3}" / f"mod{i}.py").write_text(f"def f{i}(x):\n    return x * {i}\n" * 3)
    walks = []
    walk = text_data._walk
    monkeypatch.setattr(text_data, "_walk", lambda folder: walks.append(str(folder)) or walk(folder))
    made = [flops_fit.create_dataset("python-stdlib", split, seq_len=8, root=str(root), validation_fraction=0.2)
            for split in ("train", "validation", "train", "validation")]  # two runs' splits
    assert walks == [str(root)]
    base, files = root, walk(root)[0]
    for data, split in zip(made, ("train", "validation") * 2, strict=True):
        chosen = text_data.split_files(files, base, split, 0.2)
        assert bytes(data.tokens) == b"".join(f.read_bytes() for f in chosen)
    flops_fit.create_dataset("python-stdlib", "train", seq_len=8, root=str(root), validation_fraction=0.1)
    assert walks == [str(root), str(root)]  # another split of the files: its own


def test_python_stdlib_sees_a_file_added_under_its_root_after_the_first_call(tmp_path):
    """The walk was kept per folder for the whole process: a file added (or removed) under root= after the
    process's first call was never seen by it. A folder whose listing changed is walked again."""
    root = tmp_path / "lib"
    (root / "pkg").mkdir(parents=True)
    for i in range(20):
        (root / "pkg" / f"mod{i}.py").write_text(f"x{i} = {i}\n" * 5)

    def whole():
        splits = [flops_fit.create_dataset("python-stdlib", s, seq_len=4, root=str(root), validation_fraction=0.2)
                  for s in ("train", "validation")]
        return sum(len(d.tokens) for d in splits)

    before = whole()
    assert before == sum(f.stat().st_size for f in (root / "pkg").iterdir())
    (root / "pkg" / "added.py").write_text("added = True\n" * 7)
    (root / "new").mkdir()  # a new folder, with a file of its own
    (root / "new" / "more.py").write_text("more = 1\n" * 3)
    assert whole() == before + len("added = True\n") * 7 + len("more = 1\n") * 3
    (root / "pkg" / "mod0.py").unlink()
    assert whole() == before + len("added = True\n") * 7 + len("more = 1\n") * 3 - len("x0 = 0\n") * 5


def test_text_files_split_by_file_or_by_position(tmp_path):
    for i in range(40):
        (tmp_path / f"doc{i}.txt").write_text(f"document number {i} " * 20)
    train = flops_fit.create_dataset("text-files", "train", paths=[str(tmp_path)], seq_len=8, validation_fraction=0.2)
    held = flops_fit.create_dataset("text-files", "validation", paths=[str(tmp_path)], seq_len=8, validation_fraction=0.2)
    assert len(train.tokens) + len(held.tokens) == sum(f.stat().st_size for f in tmp_path.iterdir())
    train_docs = set(bytes(train.tokens).decode().split())
    held_docs = set(bytes(held.tokens).decode().split())
    numbers = lambda words: {w for w in words if w.isdigit()}  # noqa: E731
    assert numbers(train_docs) and numbers(held_docs) and not numbers(train_docs) & numbers(held_docs)

    one = tmp_path / "one" / "book.txt"
    one.parent.mkdir()
    one.write_bytes(bytes(range(256)) * 10)
    a = flops_fit.create_dataset("text-files", "train", paths=[str(one)], seq_len=16, validation_fraction=0.1)
    b = flops_fit.create_dataset("text-files", "validation", paths=[str(one)], seq_len=16, validation_fraction=0.1)
    assert bytes(a.tokens) + bytes(b.tokens) == one.read_bytes()


def test_token_file_is_memory_mapped_and_checked(tmp_path):
    ids = (np.arange(10_000) * 7919 % 50_000).astype(np.uint16)
    path = tmp_path / "tokens.bin"
    ids.tofile(path)
    train = flops_fit.create_dataset("token-file", "train", path=str(path), seq_len=100, vocab_size=50_000)
    held = flops_fit.create_dataset("token-file", "validation", path=str(path), seq_len=100, vocab_size=50_000)
    assert isinstance(train.tokens, np.memmap)
    assert len(train.tokens) == 9500 and len(held.tokens) == 500
    assert train.get_batch(np.array([2]))["tokens"][0].tolist() == ids[200:300].astype(np.int64).tolist()
    assert held.get_batch(np.array([0]))["tokens"][0].tolist() == ids[9500:9600].astype(np.int64).tolist()
    with pytest.raises(FlopsFitError, match=r"holds token id \d+ >= vocab_size 1000"):
        flops_fit.create_dataset("token-file", "train", path=str(path), seq_len=100, vocab_size=1000)
    with pytest.raises(FlopsFitError, match="dtype must be one of"):
        flops_fit.create_dataset("token-file", "train", path=str(path), dtype="int8")
    with pytest.raises(FlopsFitError, match="does not exist"):
        flops_fit.create_dataset("token-file", "train", path=str(tmp_path / "nope.bin"))
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"abc")
    with pytest.raises(FlopsFitError, match="not a multiple of uint16"):
        flops_fit.create_dataset("token-file", "train", path=str(odd))
    empty = tmp_path / "empty.bin"  # numpy's "cannot mmap an empty file" ended `flops-fit plan` in a traceback
    empty.write_bytes(b"")
    with pytest.raises(FlopsFitError, match="'.*empty.bin' is empty: it holds no token ids"):
        flops_fit.create_dataset("token-file", "train", path=str(empty))
    with pytest.raises(FlopsFitError, match="'.*empty.bin' is empty: it holds no token ids"):
        flops_fit.create_dataset("token-file", "validation", path=str(path), validation_path=str(empty))


def test_a_token_file_of_the_other_width_is_refused_naming_its_dtype(tmp_path):
    """uint32 ids read as uint16 trained on ids interleaved with 0s, or were refused with "set vocab_size = 950";
    uint16 ids read as uint32 asked for a vocabulary of billions."""
    ids = np.arange(1, 1001)
    ids.astype(np.uint32).tofile(tmp_path / "wide.bin")
    ids.astype(np.uint16).tofile(tmp_path / "narrow.bin")
    for name, given, actual in [("wide.bin", "uint16", "uint32"), ("narrow.bin", "uint32", "uint16")]:
        path = str(tmp_path / name)
        with pytest.raises(FlopsFitError, match=rf"^token-file: '.*{name}' looks like {actual} ids, not {given}: .*; "
                                                rf"set dtype = '{actual}'$"):
            flops_fit.create_dataset("token-file", "train", path=path, dtype=given, seq_len=10)
        right = flops_fit.create_dataset("token-file", "train", path=path, dtype=actual, seq_len=10)
        assert right.get_batch(np.array([0]))["tokens"][0].tolist() == list(range(1, 11))


def test_tinystories_through_the_datasets_library(tmp_path):
    pytest.importorskip("datasets", reason="the `datasets` library is not installed (pip install 'flops-fit[data]')")
    stories = {"train": ["Once upon a time there was a cat.", "The dog ran home."],
               "validation": ["A bird sang in the tree."]}
    files = {}
    for split, texts in stories.items():
        files[split] = str(tmp_path / f"{split}.jsonl")
        with open(files[split], "w") as f:
            for text in texts:
                f.write(json.dumps({"text": text}) + "\n")
    for split, texts in stories.items():
        data = flops_fit.create_dataset("tinystories", split, data_files=files, seq_len=4)
        assert bytes(data.tokens) == "\n\n".join(texts).encode()


def _write_cifar_sample(root, per_batch=6):
    """A tiny CIFAR-10 in the official layout (python pickle batches, as the dataset ships)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for k, name in enumerate(names):
        data = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        labels = [(k + j) % 10 for j in range(per_batch)]
        with open(folder / name, "wb") as f:
            pickle.dump({"data": data, "labels": labels}, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": ["x"] * 10}, f)
    return names


def test_cifar10_from_a_local_folder_in_the_official_format(tmp_path):
    pytest.importorskip("torchvision", reason="cifar10 needs torchvision (pip install 'flops-fit[data]')")
    _write_cifar_sample(tmp_path)
    train = flops_fit.create_dataset("cifar10", "train", root=str(tmp_path), verify=False)
    held = flops_fit.create_dataset("cifar10", "validation", root=str(tmp_path), verify=False)
    assert len(train) == 30 and len(held) == 6
    batch = train.get_batch(np.arange(4))
    assert batch["images"].shape == (4, 3, 32, 32) and batch["images"].dtype == torch.float32
    assert batch["labels"].tolist() == [0, 1, 2, 3]
    with pytest.raises(FlopsFitError, match="pass download=True"):
        flops_fit.create_dataset("cifar10", "train", root=str(tmp_path))  # the official checksums fail
    with pytest.raises(FlopsFitError, match="needs root="):
        flops_fit.create_dataset("cifar10", "train")


class _Payload:
    """Pickles to a call of os.system: what a tampered dataset file could hold."""

    def __reduce__(self):
        import os

        return os.system, ("touch PWNED",)


def test_cifar10_files_are_read_without_running_pickled_code(tmp_path, monkeypatch):
    pytest.importorskip("torchvision", reason="cifar10 needs torchvision (pip install 'flops-fit[data]')")
    names = _write_cifar_sample(tmp_path)
    with open(tmp_path / "cifar-10-batches-py" / names[0], "wb") as f:
        pickle.dump({"data": _Payload(), "labels": [0]}, f)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FlopsFitError, match="asks for posix.system.*refusing to run pickled code"):
        flops_fit.create_dataset("cifar10", "train", root=str(tmp_path), verify=False)
    assert not (tmp_path / "PWNED").exists()


def test_digits_ship_with_scikit_learn_and_split_without_overlap():
    pytest.importorskip("sklearn")
    from sklearn.datasets import load_digits

    train = flops_fit.create_dataset("digits", "train")
    held = flops_fit.create_dataset("digits", "validation")
    assert len(train) + len(held) == 1797 and len(held) == 359
    batch = held.get_batch(np.arange(5))
    assert batch["images"].shape == (5, 1, 8, 8) and batch["labels"].dtype == torch.int64
    # every held-out image is a distinct sample of the collection, never one of the training ones
    raw = torch.from_numpy(load_digits().images.astype(np.float32)).reshape(1797, -1)
    pick = lambda d: {int(i) for i in torch.cdist((d.images.reshape(len(d), -1)), raw).argmin(1)}  # noqa: E731
    assert len(pick(train) | pick(held)) >= 1797 - 30  # a few images are exact duplicates
    assert set(train.labels.tolist()) == set(range(10))


@pytest.mark.parametrize("name, config, message", [
    ("python-stdlib", {"vocab_size": 512}, "tokenizer 'bytes' has a vocabulary of 256 tokens, but vocab_size=512"),
    ("text-files", {}, "needs paths="),
    ("text-files", {"paths": ["/nonexistent/*.txt"]}, "matches no file"),
    ("token-file", {}, "needs path="),
    ("python-stdlib", {"seq_len": 1}, "seq_len must be at least 2"),
])
def test_loader_errors_name_the_fix(name, config, message):
    with pytest.raises(FlopsFitError, match=message):
        flops_fit.create_dataset(name, "train", **config)


def test_an_empty_folder_of_text_files_is_named(tmp_path):
    """`paths = ["corpus/"]` on an empty folder said "ValueError: commonpath() arg is an empty sequence";
    a glob that matches only folders, the same."""
    (tmp_path / "corpus").mkdir()
    with pytest.raises(FlopsFitError, match=f"text-files: the folder '{tmp_path / 'corpus'}' holds no file; put the"):
        flops_fit.create_dataset("text-files", "train", paths=[str(tmp_path / "corpus")])
    with pytest.raises(FlopsFitError, match=r"matches no file \(only folders\)"):
        flops_fit.create_dataset("text-files", "train", paths=[str(tmp_path / "corp*")])


def test_a_corpus_shorter_than_one_window_is_refused_with_the_fix(tmp_path):
    """An empty file, or one shorter than seq_len, said "0 tokens cannot fill one window of seq_len=32" and no more."""
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "short.txt").write_text("a short line\n")
    for name, count in [("empty.txt", 0), ("short.txt", 12)]:
        with pytest.raises(FlopsFitError, match=rf"^text-files: {count} tokens cannot fill one window of seq_len=32; "
                                                r"give it more text \(the held-out split: a larger validation_fraction\) "
                                                r"or a shorter seq_len$"):
            flops_fit.create_dataset("text-files", "train", paths=[str(tmp_path / name)], seq_len=32)
    assert len(flops_fit.create_dataset("text-files", "train", paths=[str(tmp_path / "short.txt")], seq_len=4)) == 3  # 12 of 13 bytes


@pytest.mark.parametrize("fraction", [0, 1.5, -1, "0.1"])
def test_a_held_out_share_outside_0_to_1_is_refused_by_every_text_dataset(tmp_path, fraction):
    """validation_fraction=1.5 gave text-files two halves of the text, 2 left hf-text's training split empty, 0 its
    held-out one, "0.1" raised a TypeError."""
    (tmp_path / "notes.txt").write_text("a line of text\n" * 200)
    (tmp_path / "notes.jsonl").write_text("".join(json.dumps({"text": f"record {i}"}) + "\n" for i in range(50)))
    np.arange(1, 1001, dtype=np.uint16).tofile(tmp_path / "tokens.bin")
    for name, config in [("text-files", {"paths": [str(tmp_path / "notes.txt")]}),
                         ("python-stdlib", {}),
                         ("token-file", {"path": str(tmp_path / "tokens.bin")}),
                         ("hf-text", {"data_files": str(tmp_path / "notes.jsonl"), "cache_dir": str(tmp_path / "c")})]:
        if name == "hf-text":
            pytest.importorskip("datasets")
        with pytest.raises(FlopsFitError, match=rf"^{name}: validation_fraction is the share of the text held out, "
                                                rf"between 0 and 1 \(e.g. 0.05\), got {fraction!r}$"):
            flops_fit.create_dataset(name, "train", validation_fraction=fraction, seq_len=8, **config)


@pytest.mark.parametrize("fraction", [0, 1.5, "0.1", True])
def test_a_held_out_share_outside_0_to_1_is_refused_by_every_image_dataset(tmp_path, fraction):
    """The image datasets had a check of their own beside the text one: image-folder's raised a TypeError on "0.1"
    and did not name the dataset; digits took 1.5 and failed on an empty training split ("need as many labels as
    images"). They share the text datasets' check now, worded for images."""
    pytest.importorskip("sklearn")
    _write_image_folder(tmp_path / "pics")
    for name, config in [("digits", {}), ("image-folder", {"root": str(tmp_path / "pics"), "image_size": 8})]:
        with pytest.raises(FlopsFitError, match=rf"^{name}: validation_fraction is the share of the images held out, "
                                                rf"between 0 and 1 \(e.g. 0.[12]\), got {fraction!r}$"):
            flops_fit.create_dataset(name, "train", validation_fraction=fraction, **config)


def test_unknown_split_is_refused():
    with pytest.raises(FlopsFitError, match="has no split 'test'"):
        flops_fit.create_dataset("python-stdlib", "test")


def test_an_option_the_dataset_does_not_take_is_named_with_the_ones_it_does(tmp_path):
    """``path = ...`` in a text-files [dataset] table (its option is ``paths``) surfaced as the builder's
    raw "TypeError: build_text_files() got an unexpected keyword argument 'path'"."""
    (tmp_path / "a.txt").write_text("hello world " * 50)
    with pytest.raises(FlopsFitError, match=r"^dataset 'text-files' has no option\(s\) \['path'\]; "
                                            r"its options are \['paths', 'seq_len', "):
        flops_fit.create_dataset("text-files", "train", path=str(tmp_path / "a.txt"))
    assert len(flops_fit.create_dataset("text-files", "train", paths=str(tmp_path / "a.txt"), seq_len=8)) > 0



def _write_image_folder(root, classes=("cat", "dog", "emu"), per_class=5, size=12):
    from PIL import Image

    rng = np.random.default_rng(0)
    for k, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
            pixels[..., k] = 255  # each class has its own saturated channel
            Image.fromarray(pixels).save(root / name / f"{i}.png")


def test_an_image_folder_tree_is_read_split_and_sizes_the_model(tmp_path):
    _write_image_folder(tmp_path / "pets")
    config = {"root": str(tmp_path / "pets"), "image_size": 8}
    train = flops_fit.create_dataset("image-folder", "train", **config)
    held = flops_fit.create_dataset("image-folder", "validation", **config)
    assert len(train) + len(held) == 15 and len(held) == 3  # 10% of 5 per class, at least one each
    batch = held.get_batch(np.arange(3))
    assert batch["images"].shape == (3, 3, 8, 8) and sorted(batch["labels"].tolist()) == [0, 1, 2]
    for label in range(3):  # the class's saturated channel survives resizing and normalisation
        image = batch["images"][batch["labels"].tolist().index(label)]
        assert image[label].mean() == image.mean(dim=(1, 2)).max()
    plan = flops_fit.plan(model="vit", dataset="image-folder", budgets=[1e12], sizes=[32, 64, 96],
                          dataset_config=config, min_steps=1, batch_size=4)
    assert plan.runs[0].model_config["num_classes"] == 3 and plan.runs[0].model_config["image_size"] == 8
    with pytest.raises(FlopsFitError, match="image-folder needs root="):
        flops_fit.create_dataset("image-folder", "train", root=str(tmp_path / "nothing"))


def test_a_class_folder_without_images_is_refused_naming_it(tmp_path):
    """An empty class folder (or one of notes only) was counted by num_classes, so the model's head had classes
    the data never gives (5 outputs for 3 classes here), and the sweep trained without a word."""
    _write_image_folder(tmp_path / "pets")
    (tmp_path / "pets" / "ant").mkdir()
    (tmp_path / "pets" / "notes").mkdir()
    (tmp_path / "pets" / "notes" / "readme.txt").write_text("labels from the shelter")
    with pytest.raises(FlopsFitError, match=r"^image-folder: class folder\(s\) \['ant', 'notes'\] under '.*pets' hold no "
                                            r"training images \(\.png, .*\); put images in them, or remove them$"):
        flops_fit.create_dataset("image-folder", "train", root=str(tmp_path / "pets"), image_size=8)
    for name in ("ant", "notes"):
        shutil.rmtree(tmp_path / "pets" / name)
    assert len(flops_fit.create_dataset("image-folder", "train", root=str(tmp_path / "pets"), image_size=8)) == 12


def test_an_image_folder_of_one_class_is_refused(tmp_path):
    """One class folder made a 1-way classifier: every run scored loss 0 and top-1 error 0, the sweep trained
    to the end without a word, and only the fit refused its zeros."""
    _write_image_folder(tmp_path / "cats", classes=("cat",))
    with pytest.raises(FlopsFitError, match=r"^image-folder: one class folder \('cat'\) under '.*cats'; a classifier "
                                            r"needs two or more .*add a folder of images for each other class$"):
        flops_fit.create_dataset("image-folder", "train", root=str(tmp_path / "cats"), image_size=8)
    _write_image_folder(tmp_path / "split" / "train", classes=("cat",))
    _write_image_folder(tmp_path / "split" / "val", classes=("cat",))
    with pytest.raises(FlopsFitError, match=r"one class folder \('cat'\) under '.*train'"):
        flops_fit.create_dataset("image-folder", "validation", root=str(tmp_path / "split"), image_size=8)


def test_a_train_tree_beside_a_test_tree_names_the_held_out_folder(tmp_path):
    """root/train/<class> beside root/test/<class> was read as two classes "train" and "test" without images:
    "no images in class folders under root", though every image was there."""
    _write_image_folder(tmp_path / "pets" / "train")
    _write_image_folder(tmp_path / "pets" / "test", per_class=2)
    with pytest.raises(FlopsFitError, match=r"^image-folder: '.*pets' has a train/ tree of class folders but no "
                                            r"validation/ or val/ beside it \(folders there: \['test'\]\); name the "
                                            r"held-out tree validation/ \(or val/\)"):
        flops_fit.create_dataset("image-folder", "train", root=str(tmp_path / "pets"), image_size=8)
    (tmp_path / "pets" / "test").rename(tmp_path / "pets" / "validation")
    assert len(flops_fit.create_dataset("image-folder", "validation", root=str(tmp_path / "pets"), image_size=8)) == 6


def test_an_image_folder_with_files_that_are_not_images_names_them(tmp_path):
    """A damaged file among the images was a PIL traceback out of `flops-fit plan`; now one line naming it."""
    _write_image_folder(tmp_path / "pets")
    (tmp_path / "pets" / "dog" / "broken.png").write_bytes(b"not a png")
    (tmp_path / "pets" / "emu" / "cut.jpg").write_bytes(b"\xff\xd8\xff")  # a JPEG cut after its first bytes
    with pytest.raises(FlopsFitError, match=r"image-folder: 2 image\(s\) PIL cannot read: "
                                            r".*broken\.png \(UnidentifiedImageError\), .*cut\.jpg .*remove or replace"):
        flops_fit.create_dataset("image-folder", "train", root=str(tmp_path / "pets"), image_size=8)


def test_augmentation_is_a_crop_and_flip_fixed_by_the_batch():
    images = torch.arange(2 * 1 * 4 * 4, dtype=torch.float32).reshape(2, 1, 4, 4)
    plain = ImageTensors(images, torch.tensor([0, 1]), mean=[0.0], std=[1.0])
    augmented = ImageTensors(images, torch.tensor([0, 1]), mean=[0.0], std=[1.0], crop_padding=1, flip=True)
    a, b = augmented.get_batch(np.array([0, 1])), augmented.get_batch(np.array([0, 1]))
    assert torch.equal(a["images"], b["images"])  # the same batch, the same augmentation (a resume agrees)
    x, y = plain.get_batch(np.array([0, 1]))["images"], a["images"]
    for i in range(2):  # each image is a shifted (by at most a pixel) and possibly mirrored window of the original
        padded = torch.nn.functional.pad(x[i], (1, 1, 1, 1))
        windows = [padded[:, dy:dy + 4, dx:dx + 4] for dy in range(3) for dx in range(3)]
        assert any(torch.equal(y[i], w) or torch.equal(y[i], w.flip(-1)) for w in windows)
    many = ImageTensors(images.repeat(16, 1, 1, 1), torch.zeros(32, dtype=torch.long), [0.0], [1.0], flip=True)
    flipped = (many.get_batch(np.arange(32))["images"] != images.repeat(16, 1, 1, 1)).flatten(1).any(1)
    assert 4 < int(flipped.sum()) < 28  # about half mirrored


def test_hf_images_with_class_names_for_labels_is_refused_with_the_fix(tmp_path):
    """Labels that are names ("cat", "dog") failed in torch as "ValueError: too many dimensions 'str'"."""
    datasets = pytest.importorskip("datasets", reason="hf-images needs `datasets` (pip install 'flops-fit[data]')")
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 256, (20, 10, 10, 3), dtype=np.uint8)
    table = datasets.Dataset.from_dict({"image": [Image.fromarray(p) for p in pixels],
                                        "label": ["cat", "dog"] * 10}).cast_column("image", datasets.Image())
    table.to_parquet(str(tmp_path / "named.parquet"))
    with pytest.raises(FlopsFitError, match=r"^hf-images: the column 'label' holds str labels \(the first: '(cat|dog)'\), "
                                            r"not class indices; map them to 0 to num_classes - 1 \(datasets: "
                                            r"class_encode_column\('label'\)\), or name the column of indices"):
        flops_fit.create_dataset("hf-images", "train", data_files=str(tmp_path / "named.parquet"), image_size=8,
                                 num_classes=2)
    table.class_encode_column("label").to_parquet(str(tmp_path / "indexed.parquet"))
    train = flops_fit.create_dataset("hf-images", "train", data_files=str(tmp_path / "indexed.parquet"), image_size=8,
                                     num_classes=2)
    assert len(train) == 18 and set(train.labels.tolist()) == {0, 1}


def test_hf_images_from_an_empty_file_or_a_missing_folder_is_one_line(tmp_path):
    """An empty jsonl raised a bare StopIteration out of datasets; a missing save_to_disk folder its FileNotFoundError."""
    pytest.importorskip("datasets", reason="hf-images needs `datasets` (pip install 'flops-fit[data]')")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(FlopsFitError, match=r"^hf-images: '.*empty\.jsonl' holds no records; name files that hold "
                                            r"the images$"):
        flops_fit.create_dataset("hf-images", "train", data_files=str(tmp_path / "empty.jsonl"), num_classes=2)
    with pytest.raises(FlopsFitError, match=r"^hf-images: cannot load '.*saved': FileNotFoundError: "):
        flops_fit.create_dataset("hf-images", "train", path=str(tmp_path / "saved"), num_classes=2)


def test_parquet_and_save_to_disk_images_through_datasets(tmp_path):
    datasets = pytest.importorskip("datasets", reason="hf-images needs `datasets` (pip install 'flops-fit[data]')")
    from PIL import Image

    rng = np.random.default_rng(0)
    images, labels = [], []
    for i in range(20):
        pixels = rng.integers(0, 256, (10, 10, 3), dtype=np.uint8)
        pixels[..., i % 2] = 255
        images.append(Image.fromarray(pixels))
        labels.append(i % 2)
    table = datasets.Dataset.from_dict({"img": images, "y": labels}).cast_column("img", datasets.Image())
    table.to_parquet(str(tmp_path / "pics.parquet"))
    table.save_to_disk(str(tmp_path / "saved"))
    config = {"image_field": "img", "label_field": "y", "image_size": 8, "num_classes": 2}
    for source in ({"data_files": str(tmp_path / "pics.parquet")}, {"path": str(tmp_path / "saved")}):
        train = flops_fit.create_dataset("hf-images", "train", **config, **source)
        held = flops_fit.create_dataset("hf-images", "validation", **config, **source)
        assert len(train) == 18 and len(held) == 2
        batch = train.get_batch(np.arange(18))
        assert batch["images"].shape == (18, 3, 8, 8)
        for image, label in zip(batch["images"], batch["labels"].tolist(), strict=True):
            assert image[label].mean() > image[1 - label].mean()  # the saturated channel is the label's
    with pytest.raises(FlopsFitError, match="no column 'image'"):
        flops_fit.create_dataset("hf-images", "train", data_files=str(tmp_path / "pics.parquet"))
    shifted = datasets.Dataset.from_dict({"img": images, "y": [v + 9 for v in labels]}).cast_column("img",
                                                                                                   datasets.Image())
    shifted.to_parquet(str(tmp_path / "shifted.parquet"))
    with pytest.raises(FlopsFitError, match=r"hf-images: labels run from 9 to 10, but num_classes is 10: set "
                                            r"num_classes = 11 \(labels must be 0 to num_classes - 1\)"):
        flops_fit.create_dataset("hf-images", "validation", image_field="img", label_field="y",
                                 data_files=str(tmp_path / "shifted.parquet"))
    damaged = datasets.Dataset.from_dict({"img": [{"bytes": b"not an image", "path": None}] * 3 + images[3:],
                                          "y": labels}).cast_column("img", datasets.Image(decode=False))
    damaged = damaged.cast_column("img", datasets.Image())  # as a parquet of images is read: datasets decodes
    damaged.to_parquet(str(tmp_path / "damaged.parquet"))
    with pytest.raises(FlopsFitError, match=r"hf-images: 3 image\(s\) PIL cannot read: training record \d+ "
                                            r"\(UnidentifiedImageError\), .*; remove or replace them"):
        flops_fit.create_dataset("hf-images", "train", **config, data_files=str(tmp_path / "damaged.parquet"))
