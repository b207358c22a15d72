"""MultiShotFileSampler and load_image: images read from files, 0.17's pixels, balanced batches."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.samplers import (
    MultiShotFileSampler,
    MultiShotMemorySampler,
    load_image,
)
from tests.samplers.balance import assert_balanced

COUNTS = {0: 4, 1: 3, 2: 5, 3: 3}


def _image_files(folder, counts, size=(5, 4)):
    """One PNG per example; pixel (r, c) of example i is (i, class, r * 10 + c)."""
    paths, labels = [], []
    i = 0
    for class_id, count in counts.items():
        for _ in range(count):
            image = np.zeros(size + (3,), np.uint8)
            for r in range(size[0]):
                for c in range(size[1]):
                    image[r, c] = (i, class_id, r * 10 + c)
            path = folder / f"img_{i:03d}.png"
            tf.io.write_file(str(path), tf.io.encode_png(image))
            paths.append(str(path))
            labels.append(class_id)
            i += 1
    return paths, np.array(labels, np.int32)


def test_load_image_reads_the_pixels_scaled_to_unit_range(tmp_path):
    paths, _ = _image_files(tmp_path, {7: 1})

    image = load_image(paths[0])

    assert image.dtype == tf.float32 and image.shape == (5, 4, 3)
    for r in range(5):
        for c in range(4):
            np.testing.assert_allclose(image[r, c].numpy(), [0.0, 7 / 255, (r * 10 + c) / 255])


# 0.17.1's load_image(path, (3, 3)) of the 6x6 PNG below, computed in its virtualenv:
#   source /tmp/tfsim017/bin/activate && TF_USE_LEGACY_KERAS=1 python -c "
#   from tensorflow_similarity.samplers.file_samplers import load_image
#   print(load_image('/tmp/ref017_img.png', (3, 3)).numpy().tolist())"
# with the image ((arange(6 * 6 * 3).reshape(6, 6, 3) * 7) % 256).astype('uint8').
RESIZED_017 = [
    [[0.24736020, 0.34232709, 0.36977810], [0.48715141, 0.51760399, 0.54505497],
     [0.66542977, 0.69288081, 0.72033179]],
    [[0.52461100, 0.21439110, 0.31688011], [0.44893071, 0.46136999, 0.49215689],
     [0.61253178, 0.63998282, 0.66743380]],
    [[0.52505428, 0.54035240, 0.26398200], [0.39840400, 0.42531469, 0.43925890],
     [0.55963379, 0.58708477, 0.61453581]],
]  # fmt: skip


def test_load_image_resizes_as_017_did(tmp_path):
    image = ((np.arange(6 * 6 * 3).reshape(6, 6, 3) * 7) % 256).astype("uint8")
    path = str(tmp_path / "image.png")
    tf.io.write_file(path, tf.io.encode_png(image))

    resized = load_image(path, (3, 3)).numpy()

    np.testing.assert_allclose(resized, RESIZED_017, atol=1e-6)
    assert resized.min() >= 0.0 and resized.max() <= 1.0


def test_batches_are_balanced_images_of_their_labels(tmp_path):
    paths, labels = _image_files(tmp_path, COUNTS)
    sampler = MultiShotFileSampler(
        paths, labels, classes_per_batch=3, examples_per_class_per_batch=2, steps_per_epoch=4,
        seed=0,
    )  # fmt: skip

    for step in range(4):
        x, y = sampler[step]
        assert x.shape == (6, 5, 4, 3) and x.dtype == tf.float32
        # Rows (example id, class) as read back from the pixels.
        ids = np.rint(x.numpy()[:, 0, 0, :2] * 255).astype(int)
        assert_balanced(ids, y, 3, 2)
        for example_id, image in zip(ids[:, 0], x.numpy(), strict=True):
            expected = load_image(paths[example_id]).numpy()
            np.testing.assert_array_equal(image, expected)


def test_same_batches_as_a_memory_sampler_over_the_loaded_images(tmp_path):
    paths, labels = _image_files(tmp_path, COUNTS)
    loaded = np.stack([load_image(path).numpy() for path in paths])
    options = {"classes_per_batch": 2, "examples_per_class_per_batch": 3, "steps_per_epoch": 3}

    from_files = MultiShotFileSampler(paths, labels, seed=5, **options)
    in_memory = MultiShotMemorySampler(loaded, labels, seed=5, **options)

    for step in range(3):
        for a, b in zip(from_files[step], in_memory[step], strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    x, y = from_files.get_slice(1, 4)
    np.testing.assert_array_equal(x.numpy(), in_memory.get_slice(1, 4)[0].numpy())
    assert from_files.example_shape == (5, 4, 3)


def test_017_positional_call_with_a_resizing_loader(tmp_path):
    paths, labels = _image_files(tmp_path / "a", {0: 2, 1: 2}, size=(6, 6))
    more, more_labels = _image_files(tmp_path / "b", {2: 2}, size=(3, 5))
    loader = functools.partial(load_image, target_size=(4, 4))

    sampler = MultiShotFileSampler(
        paths + more, np.concatenate([labels, more_labels]), loader, 3, 2, 2, seed=1
    )

    x, y = sampler[0]
    assert x.shape == (6, 4, 4, 3)
    assert sorted(y.numpy().tolist()) == [0, 0, 1, 1, 2, 2]


def test_images_of_different_sizes_without_resizing_are_refused(tmp_path):
    paths, labels = _image_files(tmp_path / "a", {0: 2}, size=(6, 6))
    more, more_labels = _image_files(tmp_path / "b", {1: 2}, size=(3, 5))
    sampler = MultiShotFileSampler(
        paths + more, np.concatenate([labels, more_labels]), seed=0, steps_per_epoch=1
    )
    with pytest.raises(ValueError, match="differ in shape.*target_size"):
        sampler[0]
    with pytest.raises(TypeError, match="load_example_fn must be a callable"):
        MultiShotFileSampler(paths, labels, None)
