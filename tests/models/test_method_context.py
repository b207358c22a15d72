"""The seam between `ContrastiveModel` and its method: `MethodContext`, state, statistics.

A method's variables are its state, created through the context and saved by
the model at the paths saves have always had; `Forward.statistics` are
combined over accumulated micro-batches by each key's rule, `"concat"` in the
order of the step's global batch (checked in float64 against NumPy on one
device, and on two replicas with two accumulated batches).
"""

from __future__ import annotations

import io
import zipfile

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity import losses
from tensorflow_similarity.collectives import gather_global_batch, global_sum
from tensorflow_similarity.models import ContrastiveModel
from tensorflow_similarity.models.algorithms import (
    ContrastiveAlgorithm,
    Forward,
    MethodContext,
    register_algorithm,
    unregister_algorithm,
)
from tensorflow_similarity.models.contrastive_step import combine_statistics
from tensorflow_similarity.models.mlp_heads import ProjectorSpec
from tensorflow_similarity.models.momentum import assign_on_every_replica
from tensorflow_similarity.testing import mirrored_strategy
from tests.models.contrastive_fixtures import IMAGE_SHAPE, tiny_model, views

BATCH, DIM = 4, 3


class KeyQueue(ContrastiveAlgorithm):
    """Keeps the step's keys (first views' projections, global-batch order) and their count."""

    name = "key_queue_test"
    projector = ProjectorSpec(hidden_layers=0, hidden_dim=DIM, output_dim=DIM, output_bn=None)
    statistic_rules = {"keys": "concat", "count": "sum"}

    def default_loss(self) -> keras.losses.Loss:
        return losses.SimCLRLoss()

    def create_state(self, context: MethodContext) -> None:
        context.add_state("keys", (2 * BATCH, DIM))
        context.add_state("count", ())

    def forward(self, context, view1, view2, loss, training) -> Forward:
        z1, z2 = self.project(context, view1, view2, training)
        (keys,) = gather_global_batch(tf.stop_gradient(z1))
        count = global_sum(tf.cast(tf.shape(z1)[:1], z1.dtype))[0]
        return Forward(loss(z1, z2), z1, statistics={"keys": keys, "count": count})

    def after_update(self, context: MethodContext, statistics) -> None:
        state = context.state
        assign_on_every_replica(
            [state["keys"], state["count"]], [statistics["keys"], statistics["count"]]
        )


@pytest.fixture
def key_queue():
    register_algorithm(KeyQueue)
    yield KeyQueue.name
    unregister_algorithm(KeyQueue.name)


def linear_model(algorithm, accumulation_steps):
    """Linear networks without batch norm: a row's projection depends on that row alone."""
    keras.utils.set_random_seed(3)
    inputs = keras.Input(IMAGE_SHAPE)
    backbone = keras.Model(inputs, keras.layers.Dense(5)(keras.layers.Flatten()(inputs)))
    projector = keras.Sequential([keras.Input((5,)), keras.layers.Dense(DIM)])
    return ContrastiveModel(
        backbone, projector, algorithm=algorithm, accumulation_steps=accumulation_steps
    )


def step_keys(algorithm, num_replicas, accumulation_steps, view1, view2):
    """One optimizer step over `view1`'s rows; returns the model's initial weights and state."""
    with mirrored_strategy(num_replicas).scope():
        model = linear_model(algorithm, accumulation_steps)
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1))
    weights = [w.numpy() for w in model.backbone.weights + model.projector.weights]
    batch = len(view1) // accumulation_steps
    data = tf.data.Dataset.from_tensor_slices((view1, view2)).batch(batch, drop_remainder=True)
    model.fit(data, epochs=1, verbose=0)
    return weights, {name: v.numpy() for name, v in model.method_state.items()}


def test_concat_statistics_keep_the_global_batch_order_across_replicas_and_micro_batches(
    float64, key_queue
):
    view1, view2 = (v.astype("float64") for v in views(5, 2 * BATCH))
    weights, state = step_keys(key_queue, 2, 2, view1, view2)
    kernel, bias, projection, projection_bias = weights
    expected = np.zeros((2 * BATCH, DIM))
    for row in range(2 * BATCH):  # One device holding the global batch, row by row.
        hidden = view1[row].reshape(-1) @ kernel + bias
        expected[row] = hidden @ projection + projection_bias
    np.testing.assert_allclose(state["keys"], expected, rtol=1e-12, atol=1e-12)
    assert state["count"] == 2 * BATCH


def test_a_statistic_needs_a_known_rule():
    with pytest.raises(ValueError, match=r"'keys' have no rule.*statistic_rules"):
        combine_statistics([{"keys": tf.zeros([2])}], {})
    with pytest.raises(ValueError, match=r"statistic_rules\['keys'\] is 'mean'; use one of"):
        combine_statistics([{"keys": tf.zeros([2])}], {"keys": "mean"})
    parts = [{"s": tf.constant([1.0]), "k": tf.constant([[1.0]])}, None]
    parts.append({"s": tf.constant([2.0]), "k": tf.constant([[2.0]])})
    combined = combine_statistics(parts, {"s": "sum", "k": "concat"})
    np.testing.assert_array_equal(combined["s"], [3.0])
    np.testing.assert_array_equal(combined["k"], [[1.0], [2.0]])


def test_state_is_added_only_while_the_model_is_made():
    context = MethodContext(backbone=None, projector=None)
    with pytest.raises(RuntimeError, match="creates its state in create_state"):
        context.add_state("queue", (4, 2))


def test_dinos_centre_is_method_state_saved_at_its_old_path_and_restored_exactly(tmp_path):
    model = tiny_model("dino", sync_bn=False, algorithm_options={"freeze_last_layer_epochs": 0})
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1))
    view1, view2 = views(0, 8)
    model.fit(tf.data.Dataset.from_tensor_slices((view1, view2)).batch(8), verbose=0)
    center = model.method_state["dino_center"]
    assert center is model.dino_center and center.path == "contrastive_model/dino_center"
    assert "dino_center" not in vars(model)  # The method's state, not an attribute it set.
    path = tmp_path / "dino.keras"
    model.save(path)
    # The model's own variables, in the order saves made before the centre was method
    # state: the teacher's schedule (vars/0), then the centre (vars/1).
    with zipfile.ZipFile(path) as archive:
        with h5py.File(io.BytesIO(archive.read("model.weights.h5"))) as weights:
            assert sorted(weights["vars"]) == ["0", "1"]
            np.testing.assert_array_equal(weights["vars/0"][()], model.schedule_steps.numpy())
            saved = weights["vars/1"][()]
    np.testing.assert_array_equal(saved, center.numpy())
    assert np.any(saved != 0)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(loaded.method_state["dino_center"].numpy(), saved)
