"""``glyphs``: an offline image-classification corpus that does not run out.

Characters (digits, Latin, Greek and Cyrillic letters) rendered from the TrueType fonts that
matplotlib ships (DejaVu Sans, Serif and Mono in their weights and slants: no download), each
sample composed from its index alone: a class and a font, an affine transform (rotation,
scale, shear, translation), a stroke made thinner or bolder, foreground and background
colours, a textured background, clutter (strokes and a faint fragment of another glyph) and
pixel noise. The same index always gives the same image; the held-out split draws from
another seed space, so it shares no sample with training. 4M training samples per epoch,
so a demo's stream never repeats; small 8x8 sets such as ``digits`` are memorised by
models a few times larger, this corpus is not.

Glyph masks are rendered once per (font, character) with Pillow (a matplotlib dependency)
and cached in memory; a sample costs a few array operations and one affine resampling.
Greek and Cyrillic letters drawn exactly like an earlier class (Latin A, Greek Alpha,
Cyrillic A...) are left out, so no two classes are the same picture.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch

from flops_fit.errors import DataError

SPLITS = ("train", "validation")
TRAIN_SAMPLES = 1 << 22
VALIDATION_SAMPLES = 8192
SIZE = 32  # output images are SIZE x SIZE, RGB
GLYPH = 28  # glyph masks are rendered into GLYPH x GLYPH before the transform
FONTS = ("DejaVuSans", "DejaVuSans-Bold", "DejaVuSans-Oblique", "DejaVuSans-BoldOblique", "DejaVuSerif",
         "DejaVuSerif-Bold", "DejaVuSerif-Italic", "DejaVuSerif-BoldItalic", "DejaVuSansMono",
         "DejaVuSansMono-Bold")
_LATIN = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_GREEK = "ΓΔΘΛΞΠΣΦΨΩαβγδεζηθικλμνξπρστυφχψω"
_CYRILLIC = "БГДЖЗИЙЛФЦЧШЩЪЫЬЭЮЯбвгджзийклмнптфцчшщъыьэюя"
CHARACTERS = _LATIN + _GREEK + _CYRILLIC  # Greek and Cyrillic lookalikes of Latin letters left out
MEAN, STD = 0.5, 0.25  # the images' values are in [0, 1]; normalised to about zero mean, unit spread


def font_paths() -> list[Path]:
    import matplotlib

    folder = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    paths = [folder / f"{name}.ttf" for name in FONTS]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise DataError(f"glyphs: matplotlib's fonts {missing} are missing from {folder}; reinstall matplotlib")
    return paths


@functools.cache
def glyph_masks() -> np.ndarray:
    """(fonts, classes, GLYPH, GLYPH) float32 coverage in [0, 1], each glyph centred."""
    from PIL import Image, ImageDraw, ImageFont

    masks = np.zeros((len(FONTS), len(CHARACTERS), GLYPH, GLYPH), np.float32)
    for f, path in enumerate(font_paths()):
        font = ImageFont.truetype(str(path), size=GLYPH - 6)
        for c, char in enumerate(CHARACTERS):
            canvas = Image.new("L", (GLYPH, GLYPH), 0)
            left, top, right, bottom = font.getbbox(char)
            x = (GLYPH - (right - left)) / 2 - left
            y = (GLYPH - (bottom - top)) / 2 - top
            ImageDraw.Draw(canvas).text((x, y), char, fill=255, font=font)
            masks[f, c] = np.asarray(canvas, np.float32) / 255.0
    return masks


class Glyphs:
    """One split of the corpus: ``len`` virtual samples, each rendered from its index."""

    def __init__(self, split: str, seed: int = 0, clutter: float = 0.5, noise: float = 0.03) -> None:
        if split not in SPLITS:
            raise DataError(f"unknown split {split!r}; glyphs has {SPLITS}")
        self.split, self.seed, self.clutter, self.noise = split, seed, clutter, noise
        self.size = TRAIN_SAMPLES if split == "train" else VALIDATION_SAMPLES
        self.masks = glyph_masks()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.get_batch(np.array([index])).items()}

    def get_batch(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        images, labels = self.render(np.asarray(indices, dtype=np.int64))
        return {"images": (images - MEAN) / STD, "labels": labels}

    def render(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(B x 3 x SIZE x SIZE float32 images in [0, 1], classes) of the samples ``indices``: each
        sample's parameters from its own seeded generator, the drawing batched in torch."""
        import torch.nn.functional as F

        if indices.size and not (0 <= indices.min() and indices.max() < self.size):
            raise IndexError(f"glyphs {self.split}: indices outside [0, {self.size})")
        p = _parameters(indices, self.seed, SPLITS.index(self.split), self.clutter, self.noise)
        masks = torch.from_numpy(self.masks)
        pad = (SIZE - GLYPH) // 2
        glyph = F.pad(masks[p["font"], p["label"]][:, None], (pad,) * 4)  # B x 1 x SIZE x SIZE
        bolder = F.max_pool2d(glyph, 3, 1, 1)
        thinner = -F.max_pool2d(-glyph, 3, 1, 1) * 0.5 + glyph * 0.5
        stroke = torch.from_numpy(p["stroke"])[:, None, None, None]
        glyph = torch.where(stroke > 0, bolder, torch.where(stroke < 0, thinner, glyph))
        grid = F.affine_grid(torch.from_numpy(p["theta"]), list(glyph.shape), align_corners=False)
        alpha = F.grid_sample(glyph, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        fragment = F.pad(masks[p["other_font"], p["other_label"]][:, None], (pad,) * 4)
        fragment = F.grid_sample(fragment, F.affine_grid(torch.from_numpy(p["shift"]), list(fragment.shape),
                                                         align_corners=False), align_corners=False)
        rough = torch.from_numpy(p["rough"])[:, None, None, None]
        image = (torch.from_numpy(p["bg"])[:, :, None, None] + _TEXTURES[p["texture"]] * rough
                 + torch.from_numpy(p["gradient"]))
        lines = torch.from_numpy(p["lines"])  # B x 2 x SIZE x SIZE coverage, 0 without clutter
        for k in range(lines.shape[1]):
            cover = lines[:, k:k + 1]
            image = image * (1 - cover) + torch.from_numpy(p["line_colour"][:, k])[:, :, None, None] * cover
        fragment = fragment * torch.from_numpy(p["fragment_opacity"])[:, None, None, None]
        image = image * (1 - fragment) + torch.from_numpy(p["fragment_colour"])[:, :, None, None] * fragment
        image = image * (1 - alpha) + torch.from_numpy(p["fg"])[:, :, None, None] * alpha
        image = image + torch.from_numpy(p["pixel_noise"])
        return image.clamp(0.0, 1.0).float(), torch.from_numpy(p["label"])


def _parameters(indices: np.ndarray, seed: int, split: int, clutter: float, noise: float) -> dict[str, np.ndarray]:
    """Every random choice of each sample, from a generator seeded by (seed, split, index) alone."""
    rows = [_draw(np.random.default_rng([seed, split, int(i)]), clutter, noise) for i in indices]
    return {k: np.stack([r[k] for r in rows]) for k in rows[0]}


def _draw(rng: np.random.Generator, clutter: float, noise: float) -> dict[str, np.ndarray]:
    label, font = rng.integers(len(CHARACTERS)), rng.integers(len(FONTS))
    angle, scale, shear = np.deg2rad(rng.uniform(-25, 25)), rng.uniform(0.65, 1.05), rng.uniform(-0.3, 0.3)
    rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    forward = rotation @ np.array([[1.0, shear], [0.0, 1.0]]) * scale  # glyph -> image (normalised coordinates)
    inverse = np.linalg.inv(forward)
    move = rng.uniform(-3, 3, 2) * 2 / SIZE
    fg, bg = _colours(rng)
    ramp = np.linspace(-1, 1, SIZE)
    gradient = rng.uniform(-0.1, 0.1, (3, 1, 1)) * (rng.uniform(-1, 1) * ramp[None, :, None]
                                                   + rng.uniform(-1, 1) * ramp[None, None, :])
    cluttered = rng.random() < clutter
    ys, xs = np.mgrid[0:SIZE, 0:SIZE]
    lines = np.zeros((2, SIZE, SIZE))
    for k in range(rng.integers(1, 3) if cluttered else 0):
        (y0, x0), (y1, x1) = rng.uniform(0, SIZE, (2, 2))
        length = max(np.hypot(y1 - y0, x1 - x0), 1e-6)
        distance = np.abs((x1 - x0) * (y0 - ys) - (x0 - xs) * (y1 - y0)) / length
        lines[k] = np.clip(1.0 - distance / rng.uniform(0.5, 1.5), 0, 1) * rng.uniform(0.2, 0.6)
    shift = rng.uniform(-1, 1, 2)
    return {
        "label": np.int64(label), "font": np.int64(font), "stroke": np.int64(rng.integers(-1, 2)),
        "theta": np.concatenate([inverse, (-inverse @ move)[:, None]], 1).astype(np.float32),
        "fg": fg.astype(np.float32), "bg": bg.astype(np.float32), "gradient": gradient.astype(np.float32),
        "texture": np.int64(rng.integers(len(_TEXTURES))), "rough": np.float32(rng.uniform(0, 0.3)),
        "lines": lines.astype(np.float32), "line_colour": rng.random((2, 3)).astype(np.float32),
        "other_font": np.int64(rng.integers(len(FONTS))), "other_label": np.int64(rng.integers(len(CHARACTERS))),
        "shift": np.array([[1, 0, shift[0]], [0, 1, shift[1]]], np.float32),
        "fragment_opacity": np.float32(rng.uniform(0.1, 0.35) if cluttered else 0.0),
        "fragment_colour": rng.random(3).astype(np.float32),
        "pixel_noise": rng.normal(0.0, noise, (3, SIZE, SIZE)).astype(np.float32),
    }


def _colours(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Foreground and background RGB whose brightness differs by at least 0.3."""
    weights = np.array([0.299, 0.587, 0.114])
    while True:
        fg, bg = rng.random(3), rng.random(3)
        if abs(weights @ fg - weights @ bg) >= 0.3:
            return fg, bg


def _smooth_noise(count: int) -> torch.Tensor:
    """``count`` fixed fields of smoothed noise (3 x SIZE x SIZE, unit spread): the backgrounds' texture."""
    from scipy import ndimage

    fields = ndimage.gaussian_filter(np.random.default_rng(0).normal(0, 1, (count, 3, SIZE, SIZE)),
                                     sigma=(0, 0, 3, 3))
    return torch.from_numpy((fields / fields.std()).astype(np.float32))


_TEXTURES = _smooth_noise(256)


def build_glyphs(split: str, seed: int = 0, clutter: float = 0.5, noise: float = 0.03, **model_keys) -> Glyphs:
    """The corpus's ``split``: ``seed`` picks another (equally disjoint) corpus, ``clutter`` the
    share of samples with clutter, ``noise`` the pixel noise's standard deviation."""
    if not 0 <= clutter <= 1:
        raise DataError(f"glyphs: clutter is a probability in [0, 1], got {clutter!r}")
    if not noise >= 0:
        raise DataError(f"glyphs: noise is a standard deviation >= 0, got {noise!r}")
    return Glyphs(split, seed, clutter, noise)


__all__ = ["CHARACTERS", "Glyphs", "build_glyphs", "glyph_masks"]
