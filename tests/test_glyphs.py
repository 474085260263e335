"""The glyphs corpus: deterministic from the index, a held-out split that shares no sample with
training, every class a different picture, and a plan that needs no extra configuration."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flops_fit.plugins.data import glyphs

import flops_fit
from flops_fit.errors import DataError


def test_a_sample_is_its_index_alone():
    a, b = glyphs.build_glyphs("train"), glyphs.build_glyphs("train")
    first = a.get_batch(np.array([5, 17, 123456]))
    again = b.get_batch(np.array([123456, 5]))  # another instance, another batch, another order
    assert torch.equal(first["images"][2], again["images"][0]) and torch.equal(first["images"][0], again["images"][1])
    assert first["images"].shape == (3, 3, 32, 32) and first["images"].dtype == torch.float32
    assert first["labels"].dtype == torch.int64
    other_seed = glyphs.build_glyphs("train", seed=1).get_batch(np.array([5]))
    assert not torch.equal(other_seed["images"][0], first["images"][0])


def test_the_held_out_split_shares_no_sample_with_training():
    train, held = glyphs.build_glyphs("train"), glyphs.build_glyphs("validation")
    assert len(train) == glyphs.TRAIN_SAMPLES and len(held) == glyphs.VALIDATION_SAMPLES
    a, b = train.get_batch(np.arange(64))["images"], held.get_batch(np.arange(64))["images"]
    distance = torch.cdist(b.flatten(1), a.flatten(1))
    assert distance.min() > 1.0  # no held-out image is (nearly) a training image


def test_labels_cover_every_class_and_no_two_classes_look_alike():
    labels = glyphs.build_glyphs("train").get_batch(np.arange(4000))["labels"].numpy()
    counts = np.bincount(labels, minlength=len(glyphs.CHARACTERS))
    assert counts.size == len(glyphs.CHARACTERS) == flops_fit.dataset_info("glyphs").defaults["num_classes"]
    assert counts.min() > 5  # uniform over 139 classes: about 29 each
    masks = glyphs.glyph_masks()
    assert (masks.sum((2, 3)) > 5).all()  # every character is drawn in every font
    flat = masks.reshape(masks.shape[0], masks.shape[1], -1)
    for j in range(flat.shape[1]):
        for i in range(j):
            same = np.abs(flat[:, i] - flat[:, j]).max(1) < 0.05
            assert not same.all(), (glyphs.CHARACTERS[i], glyphs.CHARACTERS[j])


def test_the_difficulty_knobs_shape_the_samples():
    small = glyphs.build_glyphs("train", num_classes=10, image_size=16, in_chans=1).get_batch(np.arange(500))
    assert small["images"].shape == (500, 1, 16, 16)
    assert set(small["labels"].tolist()) == set(range(10))  # the first ten characters: the digits
    plain = glyphs.build_glyphs("train", clutter=0.0, noise=0.0, texture=0.0, rotation=0.0, inverted=0.0)
    images, labels = plain.render(np.arange(64))
    # dark ink on a plain light ground: the corner pixel is the background, lighter than the glyph's darkest
    corner, darkest = images[:, :, 0, 0].mean(1), images.mean(1).flatten(1).min(1).values
    assert (corner > darkest + 0.1).all()
    inverted, _ = glyphs.build_glyphs("train", clutter=0.0, noise=0.0, texture=0.0, inverted=1.0).render(np.arange(64))
    assert (inverted[:, :, 0, 0].mean(1) < inverted.mean(1).flatten(1).max(1).values - 0.1).all()


def test_a_sample_does_not_depend_on_its_batch():
    u = glyphs.uniforms(0, 0, np.array([7, 3, 7]), 5)
    assert np.array_equal(u[0], u[2]) and not np.array_equal(u[0], u[1]) and ((0 <= u) & (u < 1)).all()
    assert np.array_equal(glyphs.uniforms(0, 0, np.array([3]), 5)[0], u[1])
    assert not np.array_equal(glyphs.uniforms(0, 1, np.array([3]), 5), glyphs.uniforms(0, 0, np.array([3]), 5))


@pytest.mark.parametrize(("options", "message"), [
    ({"clutter": 2}, "clutter is a probability"),
    ({"num_classes": 1}, "num_classes is the number of characters, 2 to 139"),
    ({"image_size": 4}, "image_size is a side in pixels"),
    ({"in_chans": 2}, "in_chans is 3"),
    ({"rotation": -1}, "rotation is the largest angle"),
    ({"inverted": 1.5}, "inverted is a probability"),
    ({"texture": -0.1}, "texture is a strength"),
    ({"seed": "a"}, r"^glyphs: seed is an integer that picks the corpus, got 'a'$"),  # these two were TypeErrors
    ({"clutter": "0.5"}, r"^glyphs: clutter is a number, got '0.5'$"),
])
def test_bad_knobs_are_refused_by_name(options, message):
    with pytest.raises(DataError, match=message):
        glyphs.build_glyphs("train", **options)


def test_bad_splits_and_indices_are_refused():
    with pytest.raises(DataError, match="unknown split 'test'"):
        glyphs.build_glyphs("test")
    with pytest.raises(IndexError, match="outside"):
        glyphs.build_glyphs("validation").get_batch(np.array([glyphs.VALIDATION_SAMPLES]))


def test_a_vit_plan_on_glyphs_needs_no_configuration():
    plan = flops_fit.plan(model="vit", dataset="glyphs", budgets=[3e13], span=8, model_config={"depth": 2})
    config = plan.runs[0].model_config
    assert (config["num_classes"], config["image_size"], config["in_chans"]) == (139, 32, 3)
