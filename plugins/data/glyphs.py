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

Every random choice is a counter-based hash of (seed, split, index, draw), so a whole batch's
choices are a few vectorised integer operations (no generator per sample), and the drawing is
batched in torch: a batch costs about as much as a few elementwise passes over its pixels.
Glyph masks are rendered once per process with Pillow (a matplotlib dependency). The
difficulty knobs are the class count (``num_classes``: the first k characters), the image
size, the rotation range, the share of cluttered samples and the pixel noise.
Greek and Cyrillic letters drawn exactly like an earlier class (Latin A, Greek Alpha,
Cyrillic A...) are left out, so no two classes are the same picture.
"""

from __future__ import annotations

import functools
import numbers
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from flops_fit.errors import DataError

SPLITS = ("train", "validation")
TRAIN_SAMPLES = 1 << 22
VALIDATION_SAMPLES = 8192
GLYPH = 28  # glyph masks are rendered into GLYPH x GLYPH, centred on a CANVAS x CANVAS square
CANVAS = 32
FONTS = ("DejaVuSans", "DejaVuSans-Bold", "DejaVuSans-Oblique", "DejaVuSans-BoldOblique", "DejaVuSerif",
         "DejaVuSerif-Bold", "DejaVuSerif-Italic", "DejaVuSerif-BoldItalic", "DejaVuSansMono",
         "DejaVuSansMono-Bold")
_LATIN = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_GREEK = "ΓΔΘΛΞΠΣΦΨΩαβγδεζηθικλμνξπρστυφχψω"
_CYRILLIC = "БГДЖЗИЙЛФЦЧШЩЪЫЬЭЮЯбвгджзийклмнптфцчшщъыьэюя"
CHARACTERS = _LATIN + _GREEK + _CYRILLIC  # Greek and Cyrillic lookalikes of Latin letters left out
MEAN, STD = 0.5, 0.25  # the images' values are in [0, 1]; normalised to about zero mean, unit spread
_BANK = 512  # fixed noise and texture fields per image size, picked and signed per sample


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


@functools.cache
def stroke_masks(size: int = CANVAS) -> torch.Tensor:
    """(3, fonts, classes, size, size): each glyph thinner, as drawn, and bolder, on a CANVAS
    square resampled to ``size`` (area-averaged when smaller: the transform then reads it
    without aliasing)."""
    pad = (CANVAS - GLYPH) // 2
    masks = F.pad(torch.from_numpy(glyph_masks()), (pad,) * 4)
    flat = masks.flatten(0, 1)[:, None]
    thinner = -F.max_pool2d(-flat, 3, 1, 1) * 0.5 + flat * 0.5
    bolder = F.max_pool2d(flat, 3, 1, 1)
    mode = {"mode": "area"} if size <= CANVAS else {"mode": "bilinear", "align_corners": False}
    strokes = [F.interpolate(m, size=(size, size), **mode).view(*masks.shape[:2], size, size)
               for m in (thinner, flat, bolder)]
    return torch.stack(strokes).contiguous()


@functools.cache
def _fields(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed fields at this image size: white noise (pixel noise) and smoothed noise (the
    backgrounds' texture), each _BANK x 3 x size x size with unit spread."""
    from scipy import ndimage

    rng = np.random.default_rng(0)
    white = rng.normal(0, 1, (_BANK, 3, size, size)).astype(np.float32)
    smooth = ndimage.gaussian_filter(rng.normal(0, 1, (_BANK, 3, size, size)), sigma=(0, 0, size / 10, size / 10))
    return torch.from_numpy(white), torch.from_numpy((smooth / smooth.std()).astype(np.float32))


_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection of uint64 that scatters every input bit."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def uniforms(seed: int, split: int, indices: np.ndarray, draws: int) -> np.ndarray:
    """(len(indices), draws) float64 uniforms in [0, 1): draw j of sample i is a hash of
    (seed, split, index, j) alone, so a sample never depends on the batch around it."""
    key = _mix(_mix(np.uint64(seed & 0xFFFFFFFF)) ^ np.uint64(split + 1))
    base = _mix(key ^ np.asarray(indices, np.uint64))
    with np.errstate(over="ignore"):
        words = _mix(base[:, None] + np.arange(draws, dtype=np.uint64)[None, :] * np.uint64(0xD1B54A32D192ED03))
    return (words >> np.uint64(11)).astype(np.float64) * 2.0**-53


class Glyphs:
    """One split of the corpus: ``len`` virtual samples, each rendered from its index."""

    def __init__(self, split: str, seed: int = 0, num_classes: int = len(CHARACTERS), image_size: int = 32,
                 in_chans: int = 3, rotation: float = 25.0, clutter: float = 0.5, noise: float = 0.03,
                 texture: float = 0.15, inverted: float = 0.5) -> None:
        if split not in SPLITS:
            raise DataError(f"unknown split {split!r}; glyphs has {SPLITS}")
        self.split, self.seed, self.num_classes, self.size = split, seed, num_classes, image_size
        self.in_chans, self.rotation, self.clutter, self.noise = in_chans, rotation, clutter, noise
        self.texture_strength, self.inverted = texture, inverted
        self.samples = TRAIN_SAMPLES if split == "train" else VALIDATION_SAMPLES
        self.masks = stroke_masks(image_size).flatten(0, 2)  # (stroke, font, class) -> one row
        self.white, self.texture = _fields(image_size)

    def __len__(self) -> int:
        return self.samples

    @property
    def unique_samples(self) -> int:
        """The distinct images of the split (index i always draws the same one): a sweep past 4M training
        samples cycles them, and the plan says so (``sweeps.data_budget``); the demos stay far below."""
        return self.samples

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {k: v[0] for k, v in self.get_batch(np.array([index])).items()}

    def get_batch(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        images, labels = self.render(np.asarray(indices, dtype=np.int64))
        return {"images": (images - MEAN) / STD, "labels": labels}

    def render(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(B x C x S x S float32 images in [0, 1], classes) of the samples ``indices``."""
        if indices.size and not (0 <= indices.min() and indices.max() < self.samples):
            raise IndexError(f"glyphs {self.split}: indices outside [0, {self.samples})")
        n, s = len(indices), self.size
        u = torch.from_numpy(uniforms(self.seed, SPLITS.index(self.split), indices, 43).T.copy()).float().T

        def pick(column: int, count: int) -> torch.Tensor:
            return (u[:, column] * count).long().clamp_max(count - 1)

        def between(column: int, lo: float, hi: float) -> torch.Tensor:
            return lo + (hi - lo) * u[:, column]

        label, font, stroke = pick(0, self.num_classes), pick(1, len(FONTS)), pick(2, 3)
        other_label, other_font = pick(3, self.num_classes), pick(4, len(FONTS))
        # The glyph's affine transform (image -> glyph coordinates), and the fragment's shift.
        angle = torch.deg2rad(between(5, -self.rotation, self.rotation))
        scale, shear = between(6, 0.65, 1.05), between(7, -0.3, 0.3)
        cos, sin = torch.cos(angle), torch.sin(angle)
        forward = torch.stack([torch.stack([cos, cos * shear - sin], 1), torch.stack([sin, sin * shear + cos], 1)], 1)
        forward = forward * scale[:, None, None]
        inverse = torch.linalg.inv(forward)
        move = torch.stack([between(8, -3, 3), between(9, -3, 3)], 1) * 2 / CANVAS
        theta = torch.cat([inverse, -(inverse @ move[:, :, None])], 2)
        shift = torch.zeros(n, 2, 3)
        shift[:, 0, 0] = shift[:, 1, 1] = 1.0
        shift[:, :, 2] = torch.stack([between(10, -1, 1), between(11, -1, 1)], 1)
        # Both glyphs in one resampling (the other glyph only where some sample has clutter).
        cluttered = u[:, 28] < self.clutter
        glyphs = 2 if bool(cluttered.any()) else 1
        row = (torch.cat([stroke, torch.ones_like(stroke)][:glyphs]) * len(FONTS)
               + torch.cat([font, other_font][:glyphs])) * len(CHARACTERS) + torch.cat([label, other_label][:glyphs])
        sources = self.masks.index_select(0, row)[:, None]
        grid = F.affine_grid(torch.cat([theta, shift][:glyphs]), [glyphs * n, 1, s, s], align_corners=False)
        drawn = F.grid_sample(sources, grid, mode="bilinear", align_corners=False)
        alpha, fragment = drawn[:n], drawn[n:]
        # Colours: a dark and a light level at least 0.3 apart, each tinted, either way round.
        dark = between(12, 0.0, 0.5)
        light = dark + 0.3 + (0.7 - dark) * u[:, 13]
        flip = u[:, 14] >= self.inverted  # dark ink on a light ground, but for an ``inverted`` share
        fg_level, bg_level = torch.where(flip, dark, light), torch.where(flip, light, dark)
        fg = (fg_level[:, None] + (u[:, 15:18] - 0.5) * 0.3).clamp(0, 1)
        bg = (bg_level[:, None] + (u[:, 18:21] - 0.5) * 0.3).clamp(0, 1)
        # Background: colour, texture, a gentle gradient.
        ramp = torch.linspace(-1, 1, s)
        gradient = (u[:, 21:24, None, None] - 0.5) * 0.2 * (
            (u[:, 24, None, None, None] - 0.5) * 2 * ramp[None, None, :, None]
            + (u[:, 25, None, None, None] - 0.5) * 2 * ramp[None, None, None, :])
        texture = self.texture.index_select(0, pick(26, _BANK)) * (u[:, 27] * self.texture_strength)[:, None, None, None]
        image = bg[:, :, None, None] + texture + gradient
        # Clutter in a ``clutter`` share of samples: up to two strokes and a faint fragment of another glyph.
        ys = torch.arange(s, dtype=torch.float32)[None, :, None]
        xs = torch.arange(s, dtype=torch.float32)[None, None, :]
        strokes = torch.where(cluttered, 1 + (u[:, 29] < 0.5).long(), torch.zeros_like(label))
        for k in range(2 if bool(cluttered.any()) else 0):
            y0, x0, y1, x1 = (u[:, 30 + 4 * k + j, None, None] * s for j in range(4))
            length = torch.hypot(y1 - y0, x1 - x0).clamp_min(1e-6)
            distance = ((x1 - x0) * (y0 - ys) - (x0 - xs) * (y1 - y0)).abs() / length
            width = 0.5 + u[:, 38 + k, None, None] * s / 32
            cover = (1 - distance / width).clamp(0, 1) * 0.4 * (strokes > k)[:, None, None]
            colour = torch.roll(bg, 1 + k, 1)  # another tint of the scene, fixed by the sample
            image = image * (1 - cover[:, None]) + colour[:, :, None, None] * cover[:, None]
        if glyphs == 2:
            fragment = fragment * (0.1 + 0.25 * u[:, 40])[:, None, None, None] * cluttered[:, None, None, None]
            image = image * (1 - fragment) + (1 - fg[:, :, None, None]) * fragment
        image = image * (1 - alpha) + fg[:, :, None, None] * alpha
        sign = torch.where(u[:, 41] < 0.5, -1.0, 1.0)
        image = image + self.white.index_select(0, pick(42, _BANK)) * (self.noise * sign)[:, None, None, None]
        image = image.clamp(0.0, 1.0)
        if self.in_chans == 1:
            image = (image * torch.tensor([0.299, 0.587, 0.114])[None, :, None, None]).sum(1, keepdim=True)
        return image.contiguous(), label


def build_glyphs(split: str, seed: int = 0, num_classes: int = len(CHARACTERS), image_size: int = 32, in_chans: int = 3,
                 rotation: float = 25.0, clutter: float = 0.5, noise: float = 0.03, texture: float = 0.15,
                 inverted: float = 0.5, **model_keys) -> Glyphs:
    """The corpus's ``split``: ``seed`` picks another (equally disjoint) corpus, ``num_classes``
    the first that many characters (10: digits; 36: digits and capitals; 62: Latin; 139: all),
    ``image_size`` the side in pixels, ``in_chans`` colour (3) or grey (1), ``rotation`` the
    largest rotation in degrees, ``clutter`` the share of samples with clutter, ``noise`` the
    pixel noise's standard deviation, ``texture`` the background texture's largest strength,
    ``inverted`` the share of light glyphs on a dark ground (the rest are dark on light)."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):  # a string failed in the hash as "unsupported operand"
        raise DataError(f"glyphs: seed is an integer that picks the corpus, got {seed!r}")
    for name, value in {"rotation": rotation, "clutter": clutter, "noise": noise, "texture": texture,
                        "inverted": inverted}.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real):  # else: "'<=' not supported ..."
            raise DataError(f"glyphs: {name} is a number, got {value!r}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or not 2 <= num_classes <= len(CHARACTERS):
        raise DataError(f"glyphs: num_classes is the number of characters, 2 to {len(CHARACTERS)}, got {num_classes!r}")
    if isinstance(image_size, bool) or not isinstance(image_size, int) or not 8 <= image_size <= 128:
        raise DataError(f"glyphs: image_size is a side in pixels, 8 to 128, got {image_size!r}")
    if in_chans not in (1, 3):
        raise DataError(f"glyphs: in_chans is 3 (colour) or 1 (grey), got {in_chans!r}")
    if not 0 <= rotation <= 180:
        raise DataError(f"glyphs: rotation is the largest angle in degrees, 0 to 180, got {rotation!r}")
    if not 0 <= clutter <= 1:
        raise DataError(f"glyphs: clutter is a probability in [0, 1], got {clutter!r}")
    if not noise >= 0:
        raise DataError(f"glyphs: noise is a standard deviation >= 0, got {noise!r}")
    if not texture >= 0:
        raise DataError(f"glyphs: texture is a strength >= 0, got {texture!r}")
    if not 0 <= inverted <= 1:
        raise DataError(f"glyphs: inverted is a probability in [0, 1], got {inverted!r}")
    return Glyphs(split, seed, num_classes, image_size, in_chans, rotation, clutter, noise, texture, inverted)


__all__ = ["CHARACTERS", "Glyphs", "build_glyphs", "glyph_masks", "uniforms"]
