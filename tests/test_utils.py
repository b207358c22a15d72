"""0.17's utils: lookups unpacked to padded tensors, results logged, tensor checks, GPU growth."""

from __future__ import annotations

import math
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity import utils
from tensorflow_similarity.types import Lookup


def _lookups():
    return [
        [Lookup(1, 0.123456, label=3), Lookup(2, 0.5, label=4)],
        [Lookup(1, 0.25, label=7)],
        [Lookup(1, 1.00005, label=1), Lookup(2, 2.5, label=2)],
    ]


def padded_reference(lookups, field, fill):
    width = max(len(row) for row in lookups)
    table = []
    for row in lookups:
        values = [getattr(n, field) for n in row]
        table.append(values + [fill] * (width - len(values)))
    return table


# 0.17.1's results for _lookups(), computed in its virtualenv:
#   source /tmp/tfsim017/bin/activate && TF_USE_LEGACY_KERAS=1 python -c "
#   from tensorflow_similarity.utils import unpack_lookup_labels as L, unpack_lookup_distances as D
#   print(L(lookups, 'int32').numpy().tolist(), D(lookups, 'float32', 3).numpy().tolist(), ...)"
LABELS_017 = [[3, 4], [7, 2147483647], [1, 2]]
LABELS_017_FLOAT32 = [[3.0, 4.0], [7.0, 2147483648.0], [1.0, 2.0]]
DISTANCES_017 = [[0.12345600128173828, 0.5], [0.25, math.inf], [1.0000499486923218, 2.5]]
DISTANCES_017_ROUNDED_3 = [[0.12300000339746475, 0.5], [0.25, math.inf], [1.0, 2.5]]
# Ties and float32 representation: 0.0015 and 0.0025 both round to 0.002 in 0.17.
TIES = [0.0004999, 0.0015, 0.0025, 2.675]
TIES_017_ROUNDED_3 = [0.0, 0.0020000000949949026, 0.0020000000949949026, 2.674999952316284]


@pytest.mark.parametrize("dtype", ["int32", "int64", tf.int32])
def test_labels_are_017s_padded_with_0x7fffffff(dtype):
    with pytest.warns(UserWarning, match="1 of 3 lookup sets are shorter"):
        labels = utils.unpack_lookup_labels(_lookups(), dtype)

    assert isinstance(labels, tf.Tensor) and labels.dtype == tf.as_dtype(dtype)
    assert labels.numpy().tolist() == LABELS_017
    assert labels.numpy().tolist() == padded_reference(_lookups(), "label", 0x7FFFFFFF)


def test_labels_in_a_float_dtype_are_017s():
    with pytest.warns(UserWarning):
        labels = utils.unpack_lookup_labels(_lookups(), "float32")
    assert labels.dtype == tf.float32
    assert labels.numpy().tolist() == LABELS_017_FLOAT32


def test_labels_that_do_not_fit_the_dtype_are_refused():
    with pytest.raises(ValueError, match="int16 cannot hold"):
        utils.unpack_lookup_labels(_lookups(), "int16")
    with pytest.raises(ValueError, match="no label"):
        utils.unpack_lookup_labels([[Lookup(1, 0.1)]], "int32")


def test_distances_are_017s_padded_with_inf():
    with pytest.warns(UserWarning, match="missing distances are filled with inf"):
        distances = utils.unpack_lookup_distances(_lookups(), "float32")

    assert distances.dtype == tf.float32
    assert distances.numpy().tolist() == DISTANCES_017
    reference = np.array(padded_reference(_lookups(), "distance", math.inf), np.float32)
    np.testing.assert_array_equal(distances.numpy(), reference)


def test_rounded_distances_are_017s_to_the_bit():
    with pytest.warns(UserWarning):
        rounded = utils.unpack_lookup_distances(_lookups(), "float32", 3)
    ties = utils.unpack_lookup_distances([[Lookup(1, d, label=0)] for d in TIES], "float32", 3)

    assert rounded.numpy().tolist() == DISTANCES_017_ROUNDED_3
    assert ties.numpy()[:, 0].tolist() == TIES_017_ROUNDED_3


def test_float64_distances_round_in_float64():
    """0.17 failed here (a float32 multiplier against float64 distances); this rounds."""
    distances = utils.unpack_lookup_distances([[Lookup(1, d, label=0)] for d in TIES], "float64", 3)

    assert distances.dtype == tf.float64
    assert distances.numpy()[:, 0].tolist() == [round(d * 1000) / 1000 for d in TIES]


def test_equal_lengths_do_not_warn_and_empty_lookups_give_an_empty_table():
    rows = [row for row in _lookups() if len(row) == 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        labels = utils.unpack_lookup_labels(rows, "int32")
        distances = utils.unpack_lookup_distances(rows, "float32")
        empty = utils.unpack_lookup_distances([], "float32")
    assert labels.shape == distances.shape == (2, 2)
    assert empty.shape == (0, 0)


@pytest.mark.parametrize(
    "kwargs, match",
    [({"dtype": "int32"}, "floating-point"), ({"distance_rounding": -1}, "distance_rounding")],
)
def test_bad_distance_arguments_are_refused(kwargs, match):
    arguments = {"lookups": _lookups(), "dtype": "float32", **kwargs}
    with pytest.raises(ValueError, match=match):
        utils.unpack_lookup_distances(**arguments)


def test_unpack_results_fills_logs_and_writes_tensorboard_scalars(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path))
    logs = {"loss": 1.5}
    results = {"f1": np.array([0.91236, 0.2]), "recall@1": 0.5}

    lines = utils.unpack_results(results, 3, logs, writer, name_suffix="_val")
    writer.flush()

    assert lines == ["f1_val: 0.9124", "recall@1_val: 0.5000"]
    assert logs == {"loss": 1.5, "f1_val": 0.91236, "recall@1_val": 0.5}
    events = list(tmp_path.glob("events.out.tfevents.*"))
    written = {
        (value.tag, event.step): float(tf.make_ndarray(value.tensor))
        for event in tf.compat.v1.train.summary_iterator(str(events[0]))
        for value in event.summary.value
    }
    assert written == {
        ("f1_val", 3): pytest.approx(0.91236),
        ("recall@1_val", 3): pytest.approx(0.5),
    }
    assert utils.unpack_results({"a": 1.0}, 0, {}, None, None) == ["a: 1.0000"]


def test_is_tensor_or_variable():
    assert utils.is_tensor_or_variable(tf.constant([1.0]))
    assert utils.is_tensor_or_variable(tf.Variable(1.0))
    assert utils.is_tensor_or_variable(keras.Variable(1.0))
    assert not utils.is_tensor_or_variable(np.ones(2))
    assert not utils.is_tensor_or_variable(1.0)


class _FakeGPU:
    def __init__(self, name):
        self.name = name


def test_tf_cap_memory_turns_on_growth_on_each_gpu_and_warns_on_refusal(monkeypatch):
    gpus = [_FakeGPU("/physical_device:GPU:0"), _FakeGPU("/physical_device:GPU:1")]
    calls = []

    def set_memory_growth(device, enable):
        calls.append((device.name, enable))
        if device is gpus[1]:
            raise RuntimeError("Physical devices cannot be modified after being initialized")

    monkeypatch.setattr(
        tf.config.experimental, "list_physical_devices", lambda kind: gpus if kind == "GPU" else []
    )
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth", set_memory_growth)

    with pytest.warns(UserWarning, match="GPU:1.*before any TensorFlow operation"):
        assert utils.tf_cap_memory() is None

    assert calls == [(gpus[0].name, True), (gpus[1].name, True)]


def test_tf_cap_memory_without_gpus_does_nothing(monkeypatch):
    monkeypatch.setattr(tf.config.experimental, "list_physical_devices", lambda kind: [])
    monkeypatch.setattr(
        tf.config.experimental, "set_memory_growth", lambda *a: pytest.fail("called")
    )
    utils.tf_cap_memory()
