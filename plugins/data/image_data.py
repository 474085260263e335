"""Image-classification datasets held in memory as tensors, batched by one index gather.

``digits`` is scikit-learn's copy of the UCI handwritten digits (1797 8x8 grey images,
shipped inside the scikit-learn wheel: no download). ``cifar10`` reads the official
CIFAR-10 folder. That format is Python pickle; it is read by an unpickler that builds only
numpy arrays, lists, dicts and strings and refuses any other object by name, so a tampered
file cannot run code (torchvision's own reader would unpickle anything).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from flops_fit.checks import held_out_share
from flops_fit.errors import DataError

SPLITS = ("train", "validation")


class ImageTensors:
    """Images (uint8 or float, [N, C, H, W]) and int64 labels; normalised per channel on the fly.

    ``crop_padding`` > 0 takes a random crop of the image padded by that many pixels, ``flip``
    mirrors half the images: the usual CIFAR augmentation, for training splits. Its randomness
    comes from the batch's own indices (and ``seed``), so the same batch is augmented the same
    way in a resumed run, and a batch of the next epoch (other indices together) differently.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, mean: list[float], std: list[float], *,
                 crop_padding: int = 0, flip: bool = False, seed: int = 0) -> None:
        if len(images) != len(labels) or len(images) == 0:
            raise DataError(f"need as many labels as images (>0), got {len(images)} and {len(labels)}")
        if isinstance(crop_padding, bool) or not isinstance(crop_padding, int) or crop_padding < 0:
            raise DataError(f"crop_padding must be a number of pixels >= 0 (e.g. 4), got {crop_padding!r}")
        self.images, self.labels = images, labels.long()
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        self.crop_padding, self.flip, self.seed = crop_padding, bool(flip), seed

    def __len__(self) -> int:
        return len(self.images)

    @property
    def unique_samples(self) -> int:
        """The images it holds, each once: a training split's data budget in samples, for the plan's
        warning when a run repeats them (``sweeps.data_budget``)."""
        return len(self.images)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.get_batch(np.array([index])).items()}

    def get_batch(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        indices = np.asarray(indices, dtype=np.int64)
        idx = torch.from_numpy(indices)
        images = (self.images[idx].float() - self.mean) / self.std
        if self.crop_padding or self.flip:
            images = self._augment(images, indices)
        return {"images": images, "labels": self.labels[idx]}

    def _augment(self, images: torch.Tensor, indices: np.ndarray) -> torch.Tensor:
        import hashlib

        key = hashlib.sha256(np.ascontiguousarray(indices).tobytes()).digest()[:8]
        rng = np.random.default_rng([self.seed, int.from_bytes(key, "little")])
        n, _, h, w = images.shape
        if self.crop_padding:
            p = self.crop_padding
            padded = torch.nn.functional.pad(images, (p, p, p, p))  # zeros: the normalised mean
            dy, dx = rng.integers(0, 2 * p + 1, (2, n))
            images = torch.stack([padded[i, :, dy[i]:dy[i] + h, dx[i]:dx[i] + w] for i in range(n)])
        if self.flip:
            mirror = torch.from_numpy(rng.random(n) < 0.5)
            images = torch.where(mirror[:, None, None, None], images.flip(-1), images)
        return images


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; image datasets have {SPLITS}")


def build_digits(split: str, validation_fraction: float = 0.2, **model_keys) -> ImageTensors:
    """scikit-learn's 8x8 digits; a fixed seeded permutation holds out ``validation_fraction``."""
    _check_split(split)
    held_out_share(validation_fraction, "digits", DataError, data="images", example="0.2")
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise DataError("the digits dataset needs scikit-learn: pip install scikit-learn") from None
    data = load_digits()
    images = torch.from_numpy(data.images.astype(np.float32)).unsqueeze(1)  # [N, 1, 8, 8], values 0..16
    labels = torch.from_numpy(data.target.astype(np.int64))
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))
    cut = int(len(images) * validation_fraction)
    chosen = order[:cut] if split == "validation" else order[cut:]
    # Statistics of the whole collection (pixel values 0..16), fixed so both splits share them.
    return ImageTensors(images[chosen], labels[chosen], mean=[4.88], std=[6.02])


CIFAR_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
CIFAR_MEAN = [125.3, 123.0, 113.9]  # per-channel mean and std of the CIFAR-10 training images (0..255)
CIFAR_STD = [63.0, 62.1, 66.7]


def build_cifar10(
    split: str, root: str | None = None, download: bool = False, verify: bool = True, crop_padding: int = 0,
    flip: bool = False, seed: int = 0, **model_keys
) -> ImageTensors:
    """CIFAR-10 from ``root`` (the folder holding ``cifar-10-batches-py``); ``validation`` is
    the official test batch, disjoint from the five training batches. ``verify=False`` skips
    the MD5 check of the official files (for a sample in the official format). ``crop_padding``
    and ``flip`` augment the training split (``ImageTensors``)."""
    _check_split(split)
    if not root:
        raise DataError("cifar10 needs root=...: the folder that holds (or will hold) cifar-10-batches-py")
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import check_integrity, download_and_extract_archive

    folder = os.path.join(root, CIFAR10.base_folder)
    files = CIFAR10.train_list if split == "train" else CIFAR10.test_list
    if download and not all(check_integrity(os.path.join(folder, name), md5) for name, md5 in files):
        download_and_extract_archive(CIFAR10.url, root, filename=CIFAR10.filename, md5=CIFAR10.tgz_md5)
    bad = [name for name, md5 in files if not (check_integrity(os.path.join(folder, name), md5 if verify else None))]
    if bad:
        raise DataError(
            f"cifar10: no valid CIFAR-10 under {root!r} ({', '.join(bad)} missing or failing its checksum); pass "
            "download=True to fetch it (about 170 MB from the official site) or point root at the folder holding "
            "cifar-10-batches-py"
        )
    batches = [read_pickled_arrays(os.path.join(folder, name)) for name, _ in files]
    data = np.concatenate([np.asarray(b["data"], dtype=np.uint8) for b in batches]).reshape(-1, 3, 32, 32)
    labels = np.concatenate([np.asarray(b.get("labels", b.get("fine_labels")), dtype=np.int64) for b in batches])
    augment = {"crop_padding": crop_padding, "flip": flip, "seed": seed} if split == "train" else {}
    return ImageTensors(torch.from_numpy(data), torch.from_numpy(labels), CIFAR_MEAN, CIFAR_STD, **augment)


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".ppm")


def build_image_folder(split: str, root: str | None = None, image_size: int = 32, in_chans: int = 3,
                       validation_fraction: float = 0.1, crop_padding: int = 0, flip: bool = False, seed: int = 0,
                       **model_keys) -> ImageTensors:
    """An ImageFolder tree: ``root/<class>/<image>``, classes in sorted order, or ``root/train`` and
    ``root/validation`` (or ``val``) trees with the same classes. Without split folders, a seeded
    ``validation_fraction`` of each class is held out. Images are resized to ``image_size``
    (RGB, or grey with ``in_chans=1``), decoded once into memory; per-channel mean and std come
    from the training split."""
    from PIL import Image

    _check_split(split)
    if not root or not os.path.isdir(root):
        raise DataError(f"image-folder needs root=...: a folder of class folders (root/<class>/<image>); got {root!r}")
    splits = {"train": os.path.join(root, "train"),
              "validation": next((os.path.join(root, v) for v in ("validation", "val")
                                  if os.path.isdir(os.path.join(root, v))), None)}
    split_folders = os.path.isdir(splits["train"]) and splits["validation"] is not None
    if os.path.isdir(splits["train"]) and not split_folders and _is_tree(splits["train"]):
        # root/train/<class>/... beside test/ (or nothing): read as one class "train" without images
        beside = sorted(c for c in os.listdir(root) if os.path.isdir(os.path.join(root, c)) and c != "train")
        raise DataError(f"image-folder: {root!r} has a train/ tree of class folders but no validation/ or val/ "
                        f"beside it (folders there: {beside}); name the held-out tree validation/ (or val/), or put "
                        "the class folders directly under root (a seeded validation_fraction is then held out)")

    def listing(folder: str) -> list[tuple[str, str]]:
        return [(c, os.path.join(folder, c, f)) for c in sorted(os.listdir(folder)) if os.path.isdir(os.path.join(folder, c))
                for f in sorted(os.listdir(os.path.join(folder, c))) if f.lower().endswith(IMAGE_SUFFIXES)]

    files = {s: listing(splits[s]) for s in SPLITS} if split_folders else _held_out(listing(root), validation_fraction)
    classes = sorted({c for c, _ in files["train"]})
    if not classes:
        raise DataError(f"image-folder: no images ({', '.join(IMAGE_SUFFIXES)}) in class folders under {root!r}")
    train_root = splits["train"] if split_folders else root
    empty = sorted(c for c in os.listdir(train_root) if os.path.isdir(os.path.join(train_root, c)) and c not in classes)
    if empty:  # num_classes counts every class folder (configure_image_folder): the model got a class never seen
        raise DataError(f"image-folder: class folder(s) {empty} under {train_root!r} hold no training images "
                        f"({', '.join(IMAGE_SUFFIXES)}); put images in them, or remove them")
    if len(classes) < 2:  # num_classes 1: every run scores loss 0 and error 0, and the sweep measures nothing
        raise DataError(f"image-folder: one class folder ({classes[0]!r}) under {train_root!r}; a classifier needs "
                        "two or more (root/<class>/<image>): add a folder of images for each other class")
    mode = "L" if in_chans == 1 else "RGB"

    def load(pairs: list[tuple[str, str]]) -> tuple[torch.Tensor, torch.Tensor]:
        unknown = sorted({c for c, _ in pairs} - set(classes))
        if unknown:
            raise DataError(f"image-folder: held-out classes {unknown} have no training images under {root!r}")
        arrays = _pixels(((path, path) for _, path in pairs), Image.open, mode, image_size, "image-folder")
        images = torch.from_numpy(np.stack(arrays)).reshape(len(arrays), image_size, image_size, -1).permute(0, 3, 1, 2)
        return images.contiguous(), torch.tensor([classes.index(c) for c, _ in pairs])

    train_images, _ = load(files["train"])
    mean = train_images.float().mean((0, 2, 3)).tolist()
    std = train_images.float().std((0, 2, 3)).clamp_min(1e-6).tolist()
    images, labels = load(files[split])
    augment = {"crop_padding": crop_padding, "flip": flip, "seed": seed} if split == "train" else {}
    return ImageTensors(images, labels, mean, std, **augment)


def build_hf_images(split: str, data_files: Any = None, path: str | None = None, image_field: str = "image",
                    label_field: str = "label", image_size: int = 32, in_chans: int = 3,
                    validation_fraction: float = 0.1, crop_padding: int = 0, flip: bool = False, seed: int = 0,
                    **model_keys) -> ImageTensors:
    """Images and integer labels from parquet / arrow / json files (``data_files``: a path, glob,
    list, or ``{"train": ..., "validation": ...}``) or a ``save_to_disk`` folder (``path``), read
    through ``datasets``; images are decoded, resized to ``image_size`` and held in memory. With
    one split of files a seeded ``validation_fraction`` is held out."""
    from PIL import Image

    _check_split(split)
    try:
        import datasets
    except ImportError:
        raise DataError("hf-images needs the `datasets` library: pip install 'flops-fit[data]'") from None
    if (data_files is None) == (path is None):
        raise DataError("hf-images needs data_files=... (parquet/arrow/json files) or path=... (a save_to_disk folder)")
    try:
        loaded = _load_images(datasets, data_files, path)
    except DataError:
        raise
    except StopIteration:  # datasets' json reader on an empty file
        raise DataError(f"hf-images: {data_files!r} holds no records; name files that hold the images") from None
    except Exception as exc:  # a missing folder, a damaged file: the library's own exceptions, one line here
        reason = (str(exc).strip().splitlines() or [""])[0][:300]
        raise DataError(f"hf-images: cannot load {path or data_files!r}: {type(exc).__name__}: {reason}") from None
    if isinstance(loaded, datasets.DatasetDict):
        held = next((loaded[k] for k in ("validation", "val", "test") if k in loaded), None)
        table = loaded["train"] if "train" in loaded else next(iter(loaded.values()))
    else:
        table, held = loaded, None
    for field_name in (image_field, label_field):
        if field_name not in table.column_names:
            raise DataError(f"hf-images: no column {field_name!r}; columns: {table.column_names} "
                            "(name them with image_field= / label_field=)")
    if held is None:
        held_out_share(validation_fraction, "hf-images", DataError, data="images", example="0.1")
        parts = table.train_test_split(test_size=validation_fraction, seed=0)
        table, held = parts["train"], parts["test"]
    if isinstance(table.features[image_field], datasets.Image):  # decoded in _pixels, where a damaged image
        table, held = (t.cast_column(image_field, datasets.Image(decode=False)) for t in (table, held))  # is named
    chosen = table if split == "train" else held
    mode = "L" if in_chans == 1 else "RGB"

    def opened(value: Any) -> Image.Image:
        if isinstance(value, Image.Image):
            return value
        return Image.open(io.BytesIO(value["bytes"]) if value.get("bytes") is not None else value["path"])

    def tensors(rows: Any, part: str) -> tuple[torch.Tensor, torch.Tensor]:
        arrays = _pixels(((f"{part} record {i}", v) for i, v in enumerate(rows[image_field])), opened, mode,
                         image_size, "hf-images")
        images = torch.from_numpy(np.stack(arrays)).reshape(len(arrays), image_size, image_size, -1)
        return images.permute(0, 3, 1, 2).contiguous(), torch.tensor(_class_indices(rows[label_field], label_field),
                                                                     dtype=torch.int64)

    train_images, train_labels = tensors(table, "training")
    mean = train_images.float().mean((0, 2, 3)).tolist()
    std = train_images.float().std((0, 2, 3)).clamp_min(1e-6).tolist()
    images, labels = tensors(chosen, "training" if split == "train" else "held-out")
    _check_labels(torch.cat([train_labels, labels]), model_keys.get("num_classes"), "hf-images")
    augment = {"crop_padding": crop_padding, "flip": flip, "seed": seed} if split == "train" else {}
    return ImageTensors(images, labels, mean, std, **augment)


def _is_tree(folder: str) -> bool:
    """Whether ``folder`` holds class folders (a split's tree) rather than images (a class)."""
    entries = os.listdir(folder)
    return (not any(f.lower().endswith(IMAGE_SUFFIXES) for f in entries)
            and any(os.path.isdir(os.path.join(folder, f)) for f in entries))


def _pixels(sources: Iterable[tuple[str, Any]], open_image: Callable[[Any], Any], mode: str, image_size: int,
            name: str) -> list[np.ndarray]:
    """Each ``(label, source)`` opened, converted to ``mode`` and resized; the sources PIL cannot read
    (a damaged or cut file: PIL raises OSError or ValueError) named in one line, not a traceback."""
    arrays, unreadable = [], []
    for label, source in sources:
        try:
            with open_image(source) as image:
                arrays.append(np.asarray(image.convert(mode).resize((image_size, image_size)), np.uint8))
        except (OSError, ValueError) as exc:
            unreadable.append(f"{label} ({type(exc).__name__})")
    if unreadable:
        raise DataError(f"{name}: {len(unreadable)} image(s) PIL cannot read: " + ", ".join(unreadable[:3])
                        + (" ..." if len(unreadable) > 3 else "") + "; remove or replace them")
    return arrays


def _load_images(datasets: Any, data_files: Any, path: str | None) -> Any:
    """The table(s) of a ``save_to_disk`` folder, or of parquet / arrow / json files."""
    if path is not None:
        return datasets.load_from_disk(path)
    files = data_files if isinstance(data_files, dict) else {"train": data_files}
    first = str(next(iter(files.values()))[0] if isinstance(next(iter(files.values())), list)
                else next(iter(files.values())))
    kind = {".parquet": "parquet", ".arrow": "arrow", ".json": "json", ".jsonl": "json"}.get(
        os.path.splitext(first)[1].lower())
    if kind is None:
        raise DataError(f"hf-images: {first!r} is not a parquet, arrow or json file")
    return datasets.load_dataset(kind, data_files=files)


def _class_indices(labels: list[Any], field: str) -> list[Any]:
    """Labels that are class indices; names ("cat") or missing labels failed in torch as "too many dimensions
    'str'"."""
    other = next((v for v in labels if isinstance(v, bool) or not isinstance(v, (int, np.integer))), None)
    if other is not None:
        raise DataError(f"hf-images: the column {field!r} holds {type(other).__name__} labels (the first: "
                        f"{repr(other)[:40]}), not class indices; map them to 0 to num_classes - 1 (datasets: "
                        f"class_encode_column({field!r})), or name the column of indices with label_field=")
    return labels


def _check_labels(labels: torch.Tensor, num_classes: int | None, name: str) -> None:
    """Labels a classifier of ``num_classes`` can predict: 0 to num_classes - 1 (a label past
    the head fails only inside the loss, run by run)."""
    if num_classes is None or not len(labels):
        return
    low, high = int(labels.min()), int(labels.max())
    if low < 0 or high >= num_classes:
        raise DataError(f"{name}: labels run from {low} to {high}, but num_classes is {num_classes}: set "
                        f"num_classes = {high + 1} (labels must be 0 to num_classes - 1)")


def configure_image_folder(config: dict) -> dict:
    """``num_classes`` follows the class folders under ``root`` (the model's head follows it)."""
    root = config.get("root")
    if not root or not os.path.isdir(root):
        return config
    train = os.path.join(root, "train")
    folder = train if os.path.isdir(train) and any(os.path.isdir(os.path.join(root, v)) for v in ("validation", "val")) \
        else root
    classes = [c for c in os.listdir(folder) if os.path.isdir(os.path.join(folder, c))]
    return {**config, "num_classes": len(classes)} if classes else config


def _held_out(pairs: list[tuple[str, str]], fraction: float) -> dict[str, list[tuple[str, str]]]:
    """A seeded ``fraction`` of each class's images held out (at least one when a class has two)."""
    held_out_share(fraction, "image-folder", DataError, data="images", example="0.1")
    rng = np.random.default_rng(0)
    out = {"train": [], "validation": []}
    for c in sorted({c for c, _ in pairs}):
        members = [p for p in pairs if p[0] == c]
        order = rng.permutation(len(members))
        cut = max(1, int(round(fraction * len(members)))) if len(members) > 1 else 0
        out["validation"] += [members[i] for i in sorted(order[:cut])]
        out["train"] += [members[i] for i in sorted(order[cut:])]
    return out


_ARRAY_BUILDERS = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
}


def read_pickled_arrays(path: str) -> dict:
    """A pickle of dicts, lists, strings and numpy arrays (CIFAR's batches), refusing any other
    object: ``find_class`` is where pickle would import and call arbitrary code."""
    import pickle

    class ArraysOnly(pickle.Unpickler):
        def find_class(self, module: str, name: str):
            if (module, name) in _ARRAY_BUILDERS:
                return super().find_class(module, name)
            raise DataError(f"{path}: the pickle asks for {module}.{name}; only numpy arrays, lists, dicts and "
                            "strings are read from a dataset file (refusing to run pickled code)")

    with open(path, "rb") as handle:
        return ArraysOnly(handle, encoding="latin1").load()
