"""Augmentation: the spec as users write it, refused where it cannot apply, and in the
pipeline the training images vary while validation and test images never do."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from mgpu_gui.core.augment import Augmentation, AugmentSpecError, parse_augment
from mgpu_gui.core.config import RunConfig


def test_a_spec_reads_bare_names_at_their_usual_strength_and_says_what_it_does():
    augmentation = parse_augment(" flip, rotate , zoom=0.3,brightness=0.1 ")
    assert augmentation == Augmentation(flip=1.0, rotate=0.1, zoom=0.3, brightness=0.1)
    assert augmentation.spec() == "flip,rotate=0.1,zoom=0.3,brightness=0.1"
    assert parse_augment(augmentation.spec()) == augmentation
    assert augmentation.describe() == ("training images mirrored left-right at random, rotated "
                                       "up to 36°, zoomed up to ±30%, brightness up to ±10%")
    assert parse_augment("") == Augmentation() and not Augmentation().active
    # The word a sweep's values use (and the README's sweep example): issue 29, item 14.
    assert parse_augment("off") == parse_augment(" None ") == Augmentation()
    assert RunConfig(augment="off").problems() == [] and not RunConfig(augment="off").augmenting


@pytest.mark.parametrize(("spec", "says"), [
    ("flop", "unknown augmentation 'flop'; use any of flip, rotate"),
    ("zoom,zoom=0.1", "'zoom' is given twice"),
    ("flip=0.5", "flip takes no strength"),
    ("rotate=a lot", "the strength must be a number, e.g. rotate=0.1"),
    ("zoom=0", "must be above 0 and at most 0.9"),
    ("contrast=1.5", "must be above 0 and at most 1"),
])
def test_a_bad_spec_says_what_to_write(spec, says):
    with pytest.raises(AugmentSpecError, match=says):
        parse_augment(spec)
    assert [name for name, _ in RunConfig(augment=spec).problems()] == ["augment"]


def test_arrays_are_refused_and_an_image_folder_is_not(tmp_path):
    (tmp_path / "a").mkdir()
    assert RunConfig(augment="flip").problems() == [(
        "augment", "augmentation transforms images: it needs an image folder as the data "
                   "(one subfolder per class); turn it off for arrays")]
    assert RunConfig(data=str(tmp_path), augment="flip").problems() == []


@pytest.mark.slow
def test_training_images_vary_and_validation_and_test_images_never_do(tmp_path):
    import tensorflow as tf

    from mgpu_gui.engine import pipeline, training

    rng = np.random.default_rng(0)
    for i in range(24):
        folder = tmp_path / "imgs" / "ab"[i % 2]
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{i}.png")
    plain = RunConfig(data=str(tmp_path / "imgs"), image_size=(16, 16), validation_split=0.25,
                      batch_per_replica=6, seed=1)
    augmented = plain.replace(augment="flip,rotate,zoom,translate,contrast,brightness")
    strategy = tf.distribute.get_strategy()
    setups = [training.prepare(config, strategy, lambda *a, **k: None)
              for config in (plain, augmented)]
    assert augmented.problems() == []

    def first(ds) -> np.ndarray:
        return next(iter(ds))[0].numpy()

    train = [first(s.train) for s in setups]  # the same shuffle (seed): the same images
    assert train[0].shape == train[1].shape and not np.allclose(train[0], train[1])
    assert train[1].min() >= 0.0 and train[1].max() <= 1.0  # still in the model's range
    val = [np.concatenate([x.numpy() for x, _ in s.val]) for s in setups]
    assert np.array_equal(val[0], val[1])
    prepared = pipeline.load_data(augmented)
    assert np.array_equal(val[1], np.concatenate(
        [x.numpy() for x, _ in prepared.finished(prepared.val).batch(6)]))
