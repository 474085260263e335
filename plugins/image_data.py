"""Image-classification datasets held in memory as tensors, batched by one index gather.

``digits`` is scikit-learn's copy of the UCI handwritten digits (1797 8x8 grey images,
shipped inside the scikit-learn wheel: no download). ``cifar10`` reads the official
CIFAR-10 folder through torchvision. The official CIFAR-10 format is Python pickle, which
torchvision unpickles: that is acceptable only because it is this dataset's own format,
read from a folder the user points at (or downloads from the official site on request).
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
    torchvision's MD5 check of the official files (for a sample in the official format)."""
    _check_split(split)
    if not root:
        raise DataError("cifar10 needs root=...: the folder that holds (or will hold) cifar-10-batches-py")
    from torchvision.datasets import CIFAR10

    class Unverified(CIFAR10):
        def _check_integrity(self) -> bool:
            folder = os.path.join(self.root, self.base_folder)
            return all(os.path.isfile(os.path.join(folder, name)) for name, _ in self.train_list + self.test_list)

        def _load_meta(self) -> None:
            self.classes = CIFAR_CLASSES

    try:
        data = (CIFAR10 if verify else Unverified)(root, train=split == "train", download=download)
    except RuntimeError as exc:
        raise DataError(
            f"cifar10: no valid CIFAR-10 under {root!r} ({exc}); pass download=True to fetch it "
            "(about 170 MB from the official site) or point root at the folder holding cifar-10-batches-py"
        ) from None
    images = torch.from_numpy(np.ascontiguousarray(data.data)).permute(0, 3, 1, 2).contiguous()  # uint8
    return ImageTensors(images, torch.tensor(data.targets), CIFAR_MEAN, CIFAR_STD)
