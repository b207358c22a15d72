"""TFDatasetMultiShotMemorySampler over local tf.data datasets and a TFDS stand-in (no download)."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.samplers import MultiShotMemorySampler, TFDatasetMultiShotMemorySampler
from tests.samplers.balance import assert_balanced, labelled_set

COUNTS = {0: 6, 1: 7, 2: 5, 3: 8}


def dict_dataset(x, y):
    return tf.data.Dataset.from_tensor_slices({"image": x, "label": y, "id": np.arange(len(y))})


@pytest.mark.parametrize("form", ["dict", "tuple"])
def test_local_dataset_gives_the_batches_of_the_memory_sampler(form):
    x, y = labelled_set(COUNTS)
    if form == "dict":
        ds = dict_dataset(x, y)
    else:
        ds = tf.data.Dataset.from_tensor_slices((x, y, np.zeros(len(y))))
    sampler = TFDatasetMultiShotMemorySampler(
        ds, 3, examples_per_class_per_batch=2, steps_per_epoch=6, seed=4
    )
    reference = MultiShotMemorySampler(
        x, y, classes_per_batch=3, examples_per_class_per_batch=2, steps_per_epoch=6, seed=4
    )
    for i in range(6):
        xb, yb = sampler[i]
        assert_balanced(xb, yb, 3, 2)
        np.testing.assert_array_equal(xb, reference[i][0])
        np.testing.assert_array_equal(yb, reference[i][1])


def test_class_list_total_and_preprocess_fn():
    x, y = labelled_set(COUNTS)

    def preprocess(image, label):
        return image * tf.constant([1.0, 1.0]), label + 10

    sampler = TFDatasetMultiShotMemorySampler(
        dict_dataset(x, y),
        2,
        class_list=[11, 13],
        total_examples_per_class=4,
        preprocess_fn=preprocess,
        steps_per_epoch=10,
        seed=0,
    )
    assert sampler.num_examples == 8
    for _, yb in sampler:
        assert set(np.asarray(yb).tolist()) == {11, 13}


def test_x_key_missing_or_infinite_or_unstructured_dataset_is_refused():
    x, y = labelled_set(COUNTS)
    with pytest.raises(ValueError, match=r"x_key='pixels'.*\['image', 'label', 'id'\]"):
        TFDatasetMultiShotMemorySampler(dict_dataset(x, y), 2, x_key="pixels")
    with pytest.raises(ValueError, match="infinite"):
        TFDatasetMultiShotMemorySampler(dict_dataset(x, y).repeat(), 2)
    with pytest.raises(ValueError, match="dicts"):
        TFDatasetMultiShotMemorySampler(tf.data.Dataset.from_tensor_slices(x), 2)
    float_labels = tf.data.Dataset.from_tensor_slices((x, y.astype(np.float32)))
    with pytest.raises(TypeError, match="integer class ids"):
        TFDatasetMultiShotMemorySampler(float_labels, 2)
    with pytest.raises(TypeError, match="dataset_name"):
        TFDatasetMultiShotMemorySampler(x, 2)
    with pytest.raises(ValueError, match="classes_per_batch"):
        TFDatasetMultiShotMemorySampler(dict_dataset(x, y), 0)


def test_a_tfds_name_needs_tensorflow_datasets(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # import fails
    with pytest.raises(ImportError, match="pip install tensorflow-datasets"):
        TFDatasetMultiShotMemorySampler("mnist", 2)


def test_a_tfds_name_loads_and_concatenates_the_splits(monkeypatch):
    x, y = labelled_set(COUNTS)
    halves = {"train": slice(0, 13), "test": slice(13, None)}
    loaded = []

    def load(name, split, with_info):
        loaded.append((name, split))
        features = {"image": None, "label": None}
        info = types.SimpleNamespace(features=features)
        return tf.data.Dataset.from_tensor_slices(
            {"image": x[halves[split]], "label": y[halves[split]]}
        ), info

    monkeypatch.setitem(sys.modules, "tensorflow_datasets", types.SimpleNamespace(load=load))
    sampler = TFDatasetMultiShotMemorySampler("stand_in", 2, seed=0)
    assert loaded == [("stand_in", "train"), ("stand_in", "test")]
    assert sampler.num_examples == len(x)
    assert sorted(np.asarray(sampler.get_slice()[0])[:, 0].tolist()) == list(range(len(x)))
    TFDatasetMultiShotMemorySampler("stand_in", 2, splits="test")
    assert loaded[-1] == ("stand_in", "test")
    with pytest.raises(ValueError, match="y_key"):
        TFDatasetMultiShotMemorySampler("stand_in", 2, y_key="class")
