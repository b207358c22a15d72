"""ConvNeXtSim: LayerNorm, so sync_bn warns instead of pretending."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tensorflow_similarity.architectures import ConvNeXtSim
from tests.architectures.step_parity import assert_step_matches_single_device, batch_norm_layers


def test_sync_bn_warns_and_model_round_trips(tmp_path):
    plain = ConvNeXtSim((32, 32, 3), variant="Tiny", embedding_size=16)
    assert batch_norm_layers(plain) == []
    with pytest.warns(UserWarning, match="LayerNormalization"):
        model = ConvNeXtSim((32, 32, 3), variant="tiny", embedding_size=16, sync_bn=True)
    assert batch_norm_layers(model) == []
    assert model.output_shape == (None, 16)
    assert [w.shape for w in model.weights] == [w.shape for w in plain.weights]

    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    path = tmp_path / "convnextsim.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(loaded(x), model(x))


@pytest.mark.slow  # A step traced at 4 replicas: tens of seconds.
def test_training_step_matches_single_device_with_sync_bn():
    # No batch norm, so nothing couples samples: with sync_bn=True the 4-replica forward
    # pass in training mode must equal one device with the whole batch (eager, see
    # step_parity). Gradients are left out: with per-sample outputs equal, their sum over
    # replicas is the whole batch's by linearity, and the float64 backward pass of
    # ConvNeXt's 7x7 depthwise convolutions costs ~40 s on 2 cores.
    with pytest.warns(UserWarning, match="LayerNormalization"):
        assert_step_matches_single_device(
            lambda s: ConvNeXtSim((32, 32, 3), embedding_size=8, sync_bn=s),
            True,
            group_size=4,
            per_replica=1,
            gradients=False,
            compiled=False,
        )


def test_partial_trains_the_last_stage_only():
    model = ConvNeXtSim((32, 32, 3), trainable="partial")
    backbone = model.get_layer("convnext_tiny")
    names = [layer.name for layer in backbone.layers if layer.trainable]
    assert names[0] == "convnext_tiny_downsampling_block_2"
    assert all("stage_3" in name for name in names[1:-1])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"variant": "huge"}, "tiny, small, base, large, xlarge"),
        ({"input_shape": (32, 32, 4)}, "exactly 3 input channel"),
        ({"include_top": True, "pooling": None}, "include_top=True puts the embedding"),
    ],
)
def test_bad_arguments_fail_before_building(monkeypatch, kwargs, match):
    def no_building(*args, **kwargs):
        raise AssertionError("a layer was built before the arguments were checked")

    monkeypatch.setattr(keras.layers.Conv2D, "__init__", no_building)
    with pytest.raises(ValueError, match=match):
        ConvNeXtSim(**{"input_shape": (32, 32, 3), **kwargs})
