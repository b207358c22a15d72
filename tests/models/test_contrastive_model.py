"""ContrastiveModel: global-batch semantics under MirroredStrategy, saving, errors."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.augmenters import ViewAugmenter, simclr_augmenter
from tensorflow_similarity.distribute import GroupSyncBatchNorm
from tensorflow_similarity.layer_walk import all_layers
from tensorflow_similarity.layers import SyncBatchNormalization
from tensorflow_similarity.losses import SimCLRLoss
from tensorflow_similarity.models import ContrastiveModel, create_contrastive_model
from tensorflow_similarity.testing import mirrored_strategy
from tests.models.contrastive_fixtures import (
    ALGORITHMS,
    IMAGE_SHAPE,
    tiny_backbone,
    tiny_model,
    views,
)


def one_step(model, view1, view2):
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.5))
    data = tf.data.Dataset.from_tensors((view1, view2))
    history = model.fit(data, epochs=1, verbose=0)
    return history.history["loss"][0], [w.numpy() for w in model.weights]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("num_replicas", [2, 4])
def test_one_step_matches_single_device_global_batch(algorithm, num_replicas):
    """Same loss and same updated weights as one device holding the global batch."""
    view1, view2 = views()
    reference = tiny_model(algorithm)
    initial = reference.get_weights()
    ref_loss, ref_weights = one_step(reference, view1, view2)

    with mirrored_strategy(num_replicas).scope():
        model = tiny_model(algorithm)
        model.set_weights(initial)
        loss, weights = one_step(model, view1, view2)

    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-5)
    assert_same_update(weights, ref_weights, initial)


@pytest.mark.parametrize("num_replicas", [2, 4])
def test_the_collapse_monitors_are_those_of_the_global_batch(num_replicas):
    view1, view2 = views()
    reference = tiny_model("simsiam")
    initial = reference.get_weights()
    reference.compile(optimizer=keras.optimizers.SGD(learning_rate=0.0))
    data = tf.data.Dataset.from_tensors((view1, view2))
    expected = reference.fit(data, epochs=1, verbose=0).history
    with mirrored_strategy(num_replicas).scope():
        model = tiny_model("simsiam")
        model.set_weights(initial)
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.0))
    history = model.fit(data, epochs=1, verbose=0).history
    for name in ("proj_std", "pred_std"):
        np.testing.assert_allclose(history[name], expected[name], rtol=1e-5)
    # The monitor itself, in float64, against the rows' NumPy standard deviation.
    z = reference.projector(reference.backbone(view1, training=True), training=True).numpy()
    u = z / np.linalg.norm(z.astype("float64"), axis=1, keepdims=True)
    np.testing.assert_allclose(expected["proj_std"][0], u.std(axis=0).mean(), rtol=1e-5)


def assert_same_update(weights, ref_weights, initial):
    """The weight updates agree to float32 precision, and the step moved most weights."""
    # Updates that are 0 in exact arithmetic (a bias before batch norm) are float noise,
    # so the absolute tolerance is relative to the largest update of the step.
    scale = max(
        float(np.abs(w_ref - w0).max()) for w_ref, w0 in zip(ref_weights, initial, strict=True)
    )
    changed = 0
    for w, w_ref, w0 in zip(weights, ref_weights, initial, strict=True):
        np.testing.assert_allclose(w - w0, w_ref - w0, rtol=1e-3, atol=1e-4 * scale)
        changed += float(np.abs(w_ref - w0).max()) > 1e-5
    assert changed > len(initial) // 2


def test_regularisation_losses_are_scaled_under_distribution():
    view1, view2 = views(1)
    reg = keras.regularizers.L2(0.5)
    reference = tiny_model("barlow", regularizer=reg)
    initial = reference.get_weights()
    _, ref_weights = one_step(reference, view1, view2)
    with mirrored_strategy(4).scope():
        model = tiny_model("barlow", regularizer=reg)
        model.set_weights(initial)
        _, weights = one_step(model, view1, view2)
    assert_same_update(weights, ref_weights, initial)


def test_sync_bn_converts_backbone_and_heads():
    model = tiny_model("simsiam", sync_bn=True)
    for sub_model in (model.backbone, model.projector, model.predictor):
        bns = [
            layer
            for layer in sub_model.layers
            if isinstance(layer, keras.layers.BatchNormalization)
        ]
        assert bns and all(isinstance(layer, SyncBatchNormalization) for layer in bns)
    plain = tiny_model("simsiam", sync_bn=False)
    assert not any(
        isinstance(layer, SyncBatchNormalization)
        for sub_model in (plain.backbone, plain.projector, plain.predictor)
        for layer in sub_model.layers
    )


@pytest.mark.slow  # Four replicas, traced: tens of seconds.
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_fit_reduces_loss_under_four_replicas(algorithm):
    view1, view2 = views(2, n=32)
    with mirrored_strategy(4).scope():
        model = tiny_model(algorithm)
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9))
    data = tf.data.Dataset.from_tensor_slices((view1, view2)).batch(16)
    history = model.fit(data, epochs=6, verbose=0).history
    losses = history["loss"]
    assert np.all(np.isfinite(losses))
    assert losses[-1] < losses[0]
    assert "proj_std" in history and np.all(np.isfinite(history["proj_std"]))


def compiled_step(model, view1, view2, loss):
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.5), loss=loss)
    history = model.fit(tf.data.Dataset.from_tensors((view1, view2)), epochs=1, verbose=0)
    return history.history["loss"][0], [w.numpy() for w in model.weights]


@pytest.mark.parametrize("num_replicas", [1, 2])
def test_compiled_loss_trains_under_a_strategy(num_replicas):
    """compile(loss=...) then fit under strategy.scope(), as 0.17 documents it."""
    view1, view2 = views(3)
    reference = tiny_model("simclr")
    initial = reference.get_weights()
    ref_loss, ref_weights = compiled_step(reference, view1, view2, SimCLRLoss(temperature=0.5))
    default = tiny_model("simclr")
    default_loss, _ = compiled_step(default, view1, view2, None)
    # The compiled loss is the one used: SimCLR at 0.5 is far from the default 0.1's value.
    assert abs(ref_loss - default_loss) > 0.1, (ref_loss, default_loss)

    with mirrored_strategy(num_replicas).scope():
        model = tiny_model("simclr")
        model.set_weights(initial)
        loss, weights = compiled_step(model, view1, view2, SimCLRLoss(temperature=0.5))
    assert isinstance(model.loss, SimCLRLoss) and model.loss.temperature == 0.5
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-5)
    assert_same_update(weights, ref_weights, initial)


def test_compiled_loss_survives_save_and_load_and_keeps_training(tmp_path):
    view1, view2 = views(3)
    with mirrored_strategy(2).scope():
        model = tiny_model("simclr")
        compiled_step(model, view1, view2, SimCLRLoss(temperature=0.5))
        model.save(tmp_path / "model.keras")
        loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert isinstance(loaded.loss, SimCLRLoss) and loaded.loss.temperature == 0.5
    data = tf.data.Dataset.from_tensors((view1, view2))
    expected = model.fit(data, epochs=1, verbose=0).history["loss"][0]
    got = loaded.fit(data, epochs=1, verbose=0).history["loss"][0]
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_augmenter_makes_views_from_images():
    images = views(4)[0]

    def augmenter(batch):
        return batch + 0.1, batch - 0.1

    model = tiny_model("simclr", augmenter=augmenter)
    model.compile(optimizer="sgd")
    history = model.fit(tf.data.Dataset.from_tensors(images), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    without = tiny_model("simclr")
    without.compile(optimizer="sgd")
    with pytest.raises(ValueError, match="no augmenter"):
        without.fit(tf.data.Dataset.from_tensors(images), epochs=1, verbose=0)


@pytest.mark.parametrize("in_scope", [False, True])
def test_keras_file_round_trip(tmp_path, in_scope):
    view1, _ = views(5)
    path = tmp_path / "model.keras"

    def save_and_load():
        model = tiny_model("simsiam")
        model.compile(optimizer="sgd")
        model.fit(tf.data.Dataset.from_tensors(views(5)), epochs=1, verbose=0)
        model.save(path)
        return model, keras.saving.load_model(path)

    if in_scope:
        with mirrored_strategy(2).scope():
            model, loaded = save_and_load()
    else:
        model, loaded = save_and_load()
    assert isinstance(loaded, ContrastiveModel) and loaded.algorithm == "simsiam"
    assert isinstance(loaded.sync_bn, type(model.sync_bn))
    np.testing.assert_allclose(loaded.embed(view1), model.embed(view1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        loaded.embed(view1, output="projector"), model.embed(view1, output="projector"), atol=1e-5
    )
    config = loaded.get_config()
    assert isinstance(config["backbone"], dict)  # configs, never live models


def test_plugin_and_augmenter_survive_save_and_load(tmp_path):
    augmenter = simclr_augmenter(IMAGE_SHAPE[0], blur_prob=0.0, seed=3)
    with mirrored_strategy(2).scope():
        model = tiny_model("simclr", sync_bn=GroupSyncBatchNorm(2), augmenter=augmenter)
        model.compile(optimizer="sgd")
        model(np.zeros((1, *IMAGE_SHAPE), "float32"))
        model.save(tmp_path / "model.keras")
        loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert type(loaded.sync_bn) is GroupSyncBatchNorm and loaded.sync_bn.group_size == 2
    assert type(loaded.augmenter) is ViewAugmenter
    assert loaded.augmenter.get_config() == augmenter.get_config()
    groups = {
        layer.group_size
        for layer in all_layers(loaded)
        if isinstance(layer, keras.layers.BatchNormalization)
    }
    assert groups == {2}


def test_an_augmenter_that_cannot_be_saved_is_reported(tmp_path):
    model = tiny_model("simclr", augmenter=lambda images: (images, images))
    model.compile(optimizer="sgd")
    model(np.zeros((1, *IMAGE_SHAPE), "float32"))
    with pytest.warns(UserWarning, match="augmenter .* has no get_config"):
        model.save(tmp_path / "model.keras")
    assert keras.saving.load_model(tmp_path / "model.keras").augmenter is None


def test_invalid_arguments():
    backbone = tiny_backbone()
    projector = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
    with pytest.raises(ValueError, match="Unknown algorithm"):
        ContrastiveModel(backbone, projector, algorithm="nnclr")
    with pytest.raises(ValueError, match="SimSiam needs a predictor"):
        ContrastiveModel(backbone, projector, algorithm="simsiam")
    with pytest.raises(TypeError, match="sync_bn must be"):
        ContrastiveModel(backbone, projector, algorithm="simclr", sync_bn="yes")
    with pytest.raises(TypeError, match="backbone must be a keras.Model"):
        ContrastiveModel("resnet", projector, algorithm="simclr")
    flat = keras.Sequential([keras.Input(IMAGE_SHAPE), keras.layers.Conv2D(2, 3)])
    with pytest.raises(ValueError, match="must output \\[batch, features\\]"):
        create_contrastive_model(flat, "simclr")


@pytest.mark.slow
def test_multi_worker_step_matches_single_device(tmp_path):
    """One step per algorithm under a 2-process MultiWorkerMirroredStrategy."""
    from pathlib import Path

    from tensorflow_similarity.testing import run_local_workers as run_workers

    view1, view2 = views(6)
    np.savez(tmp_path / "views.npz", view1=view1, view2=view2)
    expected = {}
    for algorithm in ALGORITHMS:
        reference = tiny_model(algorithm)
        initial = reference.get_weights()
        np.savez(
            tmp_path / f"initial_{algorithm}.npz", **{f"w{i}": w for i, w in enumerate(initial)}
        )
        expected[algorithm] = (initial, *one_step(reference, view1, view2))

    script = Path(__file__).with_name("mwms_contrastive_worker.py")
    run_workers(script, 2, [str(tmp_path)], timeout=420)
    for algorithm, (initial, ref_loss, ref_weights) in expected.items():
        for task in range(2):
            got = np.load(tmp_path / f"{algorithm}_worker{task}.npz")
            np.testing.assert_allclose(float(got["loss"]), ref_loss, rtol=1e-5, atol=1e-5)
            weights = [got[f"w{i}"] for i in range(len(initial))]
            assert_same_update(weights, ref_weights, initial)
            more = got["more_losses"]
            assert np.all(np.isfinite(more)) and more[-1] < more[0], (algorithm, more)


def test_model_checkpoint_saves_it_at_epoch_end_and_training_resumes(tmp_path):
    model = tiny_model("simclr", sync_bn=False)
    assert model.built  # Functional sub-models: built when made
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01))
    data = tf.data.Dataset.from_tensors(views(6))
    checkpoint = keras.callbacks.ModelCheckpoint(str(tmp_path / "epoch_{epoch}.keras"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", message=".*shuffle=True.*")
        model.fit(data, epochs=1, verbose=0, callbacks=[checkpoint])
        loaded = keras.saving.load_model(tmp_path / "epoch_1.keras")
    assert loaded.built and int(loaded.optimizer.iterations.numpy()) == 1
    for saved, original in zip(loaded.optimizer.variables, model.optimizer.variables, strict=True):
        np.testing.assert_array_equal(saved.numpy(), original.numpy())
    model.fit(data, epochs=2, verbose=0)
    loaded.fit(data, epochs=2, verbose=0)
    for resumed, original in zip(loaded.weights, model.weights, strict=True):
        np.testing.assert_allclose(resumed.numpy(), original.numpy(), rtol=1e-5, atol=1e-6)


def test_save_writes_the_index_beside_the_model_and_load_index_reads_it(tmp_path):
    model = tiny_model("simclr", sync_bn=False)
    model.compile("sgd", distance="l2")
    images = views(7, n=12)[0]
    model.index(images, np.arange(12) % 3, verbose=0)
    before = model.lookup(images[:3], k=2, verbose=0)
    model.save(tmp_path / "model.keras")
    assert (tmp_path / "model.index" / "index_metadata.json").is_file()
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert loaded._index.distance.name == "euclidean" and loaded.index_size() == 0
    loaded.load_index(tmp_path / "model.keras")
    assert loaded.lookup(images[:3], k=2, verbose=0) == before
    model.save(tmp_path / "bare.keras", False)  # 0.17: save(filepath, save_index, ...)
    assert not (tmp_path / "bare.index").exists()


def test_compile_create_index_and_predict_take_017s_arguments(capsys):
    model = tiny_model("simclr", sync_bn=False)
    # 0.17: compile(optimizer, loss, metrics, loss_weights, weighted_metrics, run_eagerly,
    # steps_per_execution, distance, kv_store, search, evaluator, stat_buffer_size).
    model.compile("sgd", None, None, None, None, False, 1, "l2", "memory", "linear", "memory", 50)
    assert model._index.distance.name == "euclidean" and model._index.stat_buffer_size == 50
    # 0.17: create_index(distance, search, kv_store, evaluator, stat_buffer_size).
    model.create_index("l1", "linear", "memory", "memory", 20)
    assert model._index.distance.name == "manhattan" and model._index.stat_buffer_size == 20
    images = views(8)[0]
    capsys.readouterr()
    # 0.17: predict(x, batch_size, verbose=0, steps, callbacks, max_queue_size, workers,
    # use_multiprocessing), silent by default.
    representations = model.predict(images, 4, 0, None, None, 10, 1, False)
    np.testing.assert_allclose(representations, model.embed(images), atol=1e-6)
    model.predict(images)
    assert capsys.readouterr().out == ""


def test_a_feature_map_backbone_compiles_without_an_index():
    inputs = keras.Input(IMAGE_SHAPE)
    backbone = keras.Model(inputs, keras.layers.Conv2D(4, 3, padding="same")(inputs))
    projector = keras.Sequential([keras.Input((6, 6, 4)), keras.layers.Flatten()])
    model = ContrastiveModel(backbone, projector, algorithm="simclr")
    model.compile("sgd", distance="l2")
    with pytest.raises(ValueError, match=r"an index needs \[batch, dim\]"):
        model.index(views(9)[0], np.zeros(8))
