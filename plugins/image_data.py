"""Image-classification datasets held in memory as tensors, batched by one index gather.

``digits`` is scikit-learn's copy of the UCI handwritten digits (1797 8x8 grey images,
shipped inside the scikit-learn wheel: no download). ``cifar10`` reads the official
CIFAR-10 folder. That format is Python pickle; it is read by an unpickler that builds only
numpy arrays, lists, dicts and strings and refuses any other object by name, so a tampered
file cannot run code (torchvision's own reader would unpickle anything).
"""

from __future__ import annotations

import os

import numpy as np
import torch

from flops_fit.errors import DataError

SPLITS = ("train", "validation")


class ImageTensors:
    """Images (uint8 or float, [N, C, H, W]) and int64 labels; normalised per channel on the fly."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, mean: list[float], std: list[float]) -> None:
        if len(images) != len(labels) or len(images) == 0:
            raise DataError(f"need as many labels as images (>0), got {len(images)} and {len(labels)}")
        self.images, self.labels = images, labels.long()
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.get_batch(np.array([index])).items()}

    def get_batch(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        idx = torch.from_numpy(np.asarray(indices, dtype=np.int64))
        images = (self.images[idx].float() - self.mean) / self.std
        return {"images": images, "labels": self.labels[idx]}


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; image datasets have {SPLITS}")


def build_digits(split: str, validation_fraction: float = 0.2, **model_keys) -> ImageTensors:
    """scikit-learn's 8x8 digits; a fixed seeded permutation holds out ``validation_fraction``."""
    _check_split(split)
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
    split: str, root: str | None = None, download: bool = False, verify: bool = True, **model_keys
) -> ImageTensors:
    """CIFAR-10 from ``root`` (the folder holding ``cifar-10-batches-py``); ``validation`` is
    the official test batch, disjoint from the five training batches. ``verify=False`` skips
    the MD5 check of the official files (for a sample in the official format)."""
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
    return ImageTensors(torch.from_numpy(data), torch.from_numpy(labels), CIFAR_MEAN, CIFAR_STD)


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
