"""convert_sync_batchnorm / revert_sync_batchnorm against the original model."""

from __future__ import annotations

import contextlib
import warnings

import keras
import keras_cv
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.distribute import (
    GroupSyncBatchNorm,
    SyncBatchNormPlugin,
    convert_sync_batchnorm,
    revert_sync_batchnorm,
)
from tensorflow_similarity.layer_walk import walk_layers
from tensorflow_similarity.layers import SyncBatchNormalization
from tensorflow_similarity.testing import mirrored_strategy

# Keys that differ between the two classes' configs by design.
BN_ONLY_KEYS = ("synchronized", "renorm", "renorm_clipping", "renorm_momentum")


def randomize(model: keras.Model, seed: int = 0) -> None:
    """Gives every weight a distinct random value, so copying the wrong one shows."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        if "variance" in variable.path:
            value = rng.uniform(0.5, 1.5, variable.shape)
        else:
            value = 0.2 * rng.standard_normal(variable.shape, dtype="float32")
        variable.assign(value.astype(variable.dtype))
    # As after loading weights: layers holding state derived from their
    # variables (keras.layers.Normalization) refresh it.
    for layer in all_layers(model):
        if hasattr(layer, "finalize_state"):
            layer.finalize_state()


def numpy_outputs(model: keras.Model, inputs) -> list[np.ndarray]:
    outputs = model(inputs, training=False)
    return [keras.ops.convert_to_numpy(o) for o in tf.nest.flatten(outputs)]


def assert_same_outputs(expected: keras.Model, actual: keras.Model, inputs) -> None:
    for want, got in zip(
        numpy_outputs(expected, inputs), numpy_outputs(actual, inputs), strict=True
    ):
        np.testing.assert_array_equal(got, want)


def layer_pairs(original: keras.Model, copy: keras.Model):
    """Yields matching (original, copy) layers of two models, nested models included."""
    assert [x.name for x in original.layers] == [x.name for x in copy.layers]
    for old, new in zip(original.layers, copy.layers, strict=True):
        yield old, new
        if isinstance(old, keras.Model):
            yield from layer_pairs(old, new)


def all_layers(model: keras.Model) -> list[keras.layers.Layer]:
    """The model itself and every layer in it, as the package's walker finds them."""
    return [found.layer for found in walk_layers(model)]


def bn_config(layer: keras.layers.Layer) -> dict:
    config = layer.get_config()
    for key in (*BN_ONLY_KEYS, "group_size", "exchange"):
        config.pop(key, None)
    return config


def assert_converted_copy(original, copy, source_class, target_class, group_size=None):
    """`copy` is `original` with `source_class` layers turned into `target_class`.

    Checks names, classes, configs, trainable flags, dtype policies and weights
    layer by layer, and that the two models share no layer and no variable.
    """
    assert copy is not original
    assert copy.name == original.name
    assert copy.trainable == original.trainable
    assert copy.dtype_policy.name == original.dtype_policy.name
    converted = 0
    for old, new in layer_pairs(original, copy):
        assert new.trainable == old.trainable, old.name
        assert new.dtype_policy.name == old.dtype_policy.name, old.name
        if isinstance(old, source_class) and not isinstance(old, keras.Model):
            assert type(new) is target_class, old.name
            assert bn_config(new) == bn_config(old), old.name
            if target_class is SyncBatchNormalization:
                assert new.group_size == group_size
            converted += 1
        elif not isinstance(old, keras.Model):
            assert type(new) is type(old), old.name
        for want, got in zip(old.get_weights(), new.get_weights(), strict=True):
            np.testing.assert_array_equal(got, want, err_msg=old.name)
    assert converted > 0
    assert not {id(x) for x in all_layers(original)} & {id(x) for x in all_layers(copy)}
    assert not {id(v) for v in original.weights} & {id(v) for v in copy.weights}
    assert len(copy.weights) == len(original.weights)


def snapshot(model: keras.Model):
    return [(type(x), x.name, x.trainable) for x in all_layers(model)], model.get_weights()


def assert_untouched(model: keras.Model, before) -> None:
    layers, weights = snapshot(model)
    assert layers == before[0]
    for want, got in zip(before[1], weights, strict=True):
        np.testing.assert_array_equal(got, want)


def assert_round_trip(model: keras.Model, inputs, plugin=None, revert=True) -> keras.Model:
    """Converts (and reverts) `model`, checking the copies against it; returns the converted."""
    before = snapshot(model)
    synced = convert_sync_batchnorm(model, plugin)
    assert_untouched(model, before)
    group_size = None if plugin is None else plugin.group_size
    assert_converted_copy(
        model, synced, keras.layers.BatchNormalization, SyncBatchNormalization, group_size
    )
    assert_same_outputs(model, synced, inputs)
    if not revert:
        return synced

    plain = revert_sync_batchnorm(synced)
    assert_converted_copy(synced, plain, SyncBatchNormalization, keras.layers.BatchNormalization)
    for old, new in layer_pairs(model, plain):
        if isinstance(old, keras.Model):
            # A Functional subclass (keras-cv backbone) comes back as a plain Functional.
            assert isinstance(new, keras.Sequential) == isinstance(old, keras.Sequential)
        else:
            assert type(new) is type(old)
            assert new.get_config() == old.get_config(), old.name
    assert_same_outputs(model, plain, inputs)
    return synced


IMAGE = np.random.default_rng(1).uniform(0, 1, (2, 32, 32, 3)).astype("float32")

BACKBONES = {
    "MobileNetV2": lambda: keras.applications.MobileNetV2(
        weights=None, input_shape=(32, 32, 3), alpha=0.35
    ),
    "ResNet50": lambda: keras.applications.ResNet50(
        weights=None, include_top=False, input_shape=(32, 32, 3)
    ),
    "EfficientNetB0": lambda: keras.applications.EfficientNetB0(
        weights=None, include_top=False, input_shape=(32, 32, 3)
    ),
    "DenseNet121": lambda: keras.applications.DenseNet121(
        weights=None, include_top=False, input_shape=(32, 32, 3)
    ),
    "keras_cv.ResNetV2Backbone": lambda: keras_cv.models.ResNetV2Backbone(
        stackwise_filters=[8, 16],
        stackwise_blocks=[2, 2],
        stackwise_strides=[1, 2],
        include_rescaling=False,
        input_shape=(32, 32, 3),
    ),
}


# Reverting is the same rebuild in the other direction: one backbone is enough to
# check it, and the bigger ones would make the test slow.
@pytest.mark.parametrize("name", list(BACKBONES))
def test_backbone_conversion_is_exact(name):
    model = BACKBONES[name]()
    randomize(model)
    synced = assert_round_trip(model, IMAGE, revert=name == "MobileNetV2")
    num_bn = sum(isinstance(x, keras.layers.BatchNormalization) for x in model.layers)
    assert sum(isinstance(x, SyncBatchNormalization) for x in synced.layers) == num_bn


def test_keras_cv_backbone_nested_in_a_model():
    backbone = BACKBONES["keras_cv.ResNetV2Backbone"]()
    inputs = keras.Input((32, 32, 3), name="image")
    features = keras.layers.GlobalAveragePooling2D(name="pool")(backbone(inputs))
    model = keras.Model(inputs, keras.layers.Dense(4, name="head")(features), name="classifier")
    randomize(model)
    synced = assert_round_trip(model, IMAGE)
    assert isinstance(synced.get_layer(backbone.name), keras.Model)


def small_block(name: str, trainable: bool = True) -> keras.Model:
    """A Functional block with a nested Sequential that is itself frozen."""
    inputs = keras.Input((6,), name=f"{name}_in")
    frozen = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(6, name=f"{name}_frozen_dense"),
            keras.layers.BatchNormalization(name=f"{name}_frozen_bn"),
        ],
        name=f"{name}_frozen",
    )
    frozen.trainable = False
    # A layer re-enabled inside a frozen model must stay re-enabled.
    frozen.get_layer(f"{name}_frozen_dense").trainable = True
    x = frozen(inputs)
    x = keras.layers.BatchNormalization(momentum=0.5, epsilon=1e-5, name=f"{name}_bn")(x)
    model = keras.Model(inputs, keras.layers.Add(name=f"{name}_skip")([inputs, x]), name=name)
    model.trainable = trainable
    return model


def multi_model() -> tuple[keras.Model, dict[str, np.ndarray]]:
    """Two inputs and outputs, shared layers and sub-models, frozen parts, mixed precision."""
    image = keras.Input((4, 6), name="image")
    extra = keras.Input((6,), name="extra")

    shared_bn = keras.layers.BatchNormalization(name="shared_bn", center=False)
    shared_block = small_block("shared_block")
    outer_block = small_block("outer_block", trainable=False)

    x = keras.layers.BatchNormalization(
        axis=1,
        momentum=0.9,
        epsilon=1e-4,
        scale=False,
        beta_initializer="ones",
        gamma_regularizer=keras.regularizers.L2(1e-3),
        name="channels_first_bn",
    )(image)
    x = keras.layers.Flatten(name="flatten")(x)
    x = keras.layers.Dense(6, name="project")(x)
    y = shared_bn(extra)
    x = shared_bn(x)
    x = shared_block(x)
    y = shared_block(y)
    y = outer_block(y)
    half = keras.layers.Dense(6, dtype="mixed_float16", name="half_dense")(x)
    half = keras.layers.BatchNormalization(dtype="mixed_float16", name="half_bn")(half)
    bf16 = keras.layers.BatchNormalization(dtype="mixed_bfloat16", name="bf16_bn")(y)
    frozen_bn = keras.layers.BatchNormalization(name="frozen_bn", trainable=False)(
        keras.layers.Concatenate(name="join")([x, y])
    )
    model = keras.Model(
        {"image": image, "extra": extra},
        {"half": half, "bf16": bf16, "joint": frozen_bn},
        name="multi",
    )
    randomize(model)
    rng = np.random.default_rng(2)
    inputs = {
        "image": rng.normal(size=(3, 4, 6)).astype("float32"),
        "extra": rng.normal(size=(3, 6)).astype("float32"),
    }
    return model, inputs


def test_nested_shared_multi_input_output_mixed_precision():
    model, inputs = multi_model()
    synced = assert_round_trip(model, inputs)

    # Shared layers and shared sub-models stay shared, not duplicated.
    assert len(synced.layers) == len(model.layers)
    assert synced.get_layer("shared_block").get_layer("shared_block_bn").group_size is None
    assert synced.get_layer("half_bn").dtype_policy.name == "mixed_float16"
    assert synced.get_layer("bf16_bn").compute_dtype == "bfloat16"
    assert not synced.get_layer("outer_block").trainable
    frozen = synced.get_layer("outer_block").get_layer("outer_block_frozen")
    assert frozen.get_layer("outer_block_frozen_dense").trainable
    assert set(synced.output) == {"half", "bf16", "joint"}
    assert [t.name for t in tf.nest.flatten(synced.input)] == ["extra", "image"]


def test_sequential_model_with_group_plugin():
    # The inner model's own policy must survive a rebuild under another global policy.
    keras.config.set_dtype_policy("mixed_bfloat16")
    inner = keras.Sequential(
        [keras.layers.Dense(4), keras.layers.BatchNormalization(name="inner_bn")], name="inner"
    )
    keras.config.set_dtype_policy("float32")
    model = keras.Sequential(
        [
            keras.Input((5, 5, 2)),
            keras.layers.Conv2D(3, 3, name="conv"),
            keras.layers.BatchNormalization(name="bn"),
            keras.layers.Flatten(),
            inner,
        ],
        name="seq",
    )
    model.trainable = False
    randomize(model)
    x = np.random.default_rng(3).normal(size=(2, 5, 5, 2)).astype("float32")
    synced = assert_round_trip(model, x, GroupSyncBatchNorm(2))
    assert isinstance(synced, keras.Sequential)
    assert synced.get_layer("inner").get_layer("inner_bn").group_size == 2
    assert synced.get_layer("inner").dtype_policy.name == "mixed_bfloat16"


def test_share_layers_reuses_every_layer_it_does_not_convert():
    model, inputs = multi_model()
    before = snapshot(model)
    synced = convert_sync_batchnorm(model, GroupSyncBatchNorm(2), share_layers=True)

    # The original keeps its plain batch norm, its flags and its outputs.
    assert_untouched(model, before)
    assert_same_outputs(model, synced, inputs)
    assert synced.name == model.name
    converted = 0
    for old, new in layer_pairs(model, synced):
        assert new.trainable == old.trainable, old.name
        assert new.dtype_policy.name == old.dtype_policy.name, old.name
        if isinstance(old, keras.layers.BatchNormalization):
            assert type(new) is SyncBatchNormalization and new.group_size == 2, old.name
            assert bn_config(new) == bn_config(old), old.name
            assert not {id(v) for v in old.weights} & {id(v) for v in new.weights}
            for want, got in zip(old.get_weights(), new.get_weights(), strict=True):
                np.testing.assert_array_equal(got, want, err_msg=old.name)
            converted += 1
        elif isinstance(old, (keras.Model, keras.layers.InputLayer)):
            # Every sub-model here holds batch norm, so each is rebuilt around it.
            assert new is not old, old.name
        else:
            assert new is old, old.name
    assert converted == 9
    assert len(synced.weights) == len(model.weights)
    frozen = synced.get_layer("outer_block").get_layer("outer_block_frozen")
    assert not frozen.trainable
    assert frozen.get_layer("outer_block_frozen_dense").trainable

    # Shared means shared: the two models train the same projection.
    kernel = synced.get_layer("project").kernel
    kernel.assign(kernel + 1.0)
    np.testing.assert_array_equal(model.get_layer("project").kernel, kernel)


def test_share_layers_keeps_a_sub_model_without_batch_norm_whole():
    inputs = keras.Input((5,))
    plain = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)], name="plain_block")
    plain.trainable = False
    x = keras.layers.BatchNormalization(name="bn")(plain(inputs))
    model = keras.Model(inputs, x, name="outer")
    randomize(model)
    synced = convert_sync_batchnorm(model, share_layers=True)
    assert synced.get_layer("plain_block") is plain
    assert not plain.trainable
    assert isinstance(synced.get_layer("bn"), SyncBatchNormalization)
    assert_same_outputs(model, synced, np.ones((2, 5), "float32"))


@pytest.mark.parametrize("build_in_scope", [False, True], ids=["built_outside", "built_inside"])
def test_share_layers_refuses_variables_of_another_strategy(build_in_scope):
    strategy = mirrored_strategy(2)
    if build_in_scope:
        with strategy.scope():
            model = conv_model()
        # Converted outside the scope, where its mirrored variables cannot go.
        with pytest.raises(ValueError, match="another distribution strategy.*share_layers=False"):
            convert_sync_batchnorm(model, share_layers=True)
    else:
        model = conv_model()
        with strategy.scope():
            with pytest.raises(ValueError, match="'conv_model'.*MirroredStrategy"):
                convert_sync_batchnorm(model, share_layers=True)
    # Copying has no such limit.
    assert isinstance(convert_sync_batchnorm(model).get_layer("bn"), SyncBatchNormalization)


def normalization_model() -> keras.Model:
    inputs = keras.Input((3,))
    x = keras.layers.Normalization(name="norm")(inputs)
    x = keras.layers.Dense(4, name="dense")(x)
    return keras.Model(inputs, keras.layers.BatchNormalization(name="bn")(x), name="normed")


@pytest.mark.parametrize("share_layers", [False, True], ids=["copy", "share"])
@pytest.mark.parametrize("copy", ["build", "set_weights"])
def test_state_derived_from_weights_follows_them(monkeypatch, share_layers, copy):
    """Normalization's mean and variance tensors, set by adapt or by loading, are kept.

    The copy is created either from the original's values ("build") or from
    initializers and then assigned ("set_weights", the fallback); both must
    refresh the tensors Normalization derives from its variables.
    """
    from tensorflow_similarity.distribute import rebuild

    model = normalization_model()
    data = np.random.default_rng(5).normal(10.0, 4.0, (16, 3)).astype("float32")
    model.get_layer("norm").adapt(data)
    reference = numpy_outputs(model, data)

    built_as_copy = []

    def spy(old, new):
        result = real_build_as_copy(old, new) if copy == "build" else False
        built_as_copy.append((old.name, result))
        return result

    real_build_as_copy = rebuild._build_as_copy
    monkeypatch.setattr(rebuild, "_build_as_copy", spy)
    synced = convert_sync_batchnorm(model, share_layers=share_layers)
    for want, got in zip(reference, numpy_outputs(synced, data), strict=True):
        np.testing.assert_array_equal(got, want)
    # The fast path is taken for every layer with weights that the copy creates.
    expected = {"bn"} if share_layers else {"norm", "dense", "bn"}
    assert {name for name, done in built_as_copy if done} == (
        expected if copy == "build" else set()
    )


def test_converted_model_saves_and_loads(tmp_path):
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3), keras.layers.BatchNormalization()]
    )
    randomize(model)
    synced = convert_sync_batchnorm(model, GroupSyncBatchNorm(2))
    path = str(tmp_path / "synced.keras")
    synced.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.layers[-1], SyncBatchNormalization)
    assert loaded.layers[-1].group_size == 2
    assert_same_outputs(model, loaded, np.ones((2, 4), "float32"))


def conv_model() -> keras.Model:
    inputs = keras.Input((4, 4, 2))
    x = keras.layers.Conv2D(3, 3, padding="same", name="conv")(inputs)
    x = keras.layers.BatchNormalization(momentum=0.5, name="bn")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(2, name="head")(x), name="conv_model")


@pytest.mark.parametrize("share_layers", [False, True], ids=["copy", "share"])
def test_conversion_in_strategy_scope_trains_as_the_global_batch(share_layers):
    """2 replicas after conversion == the original model on the whole batch, one device."""
    strategy = mirrored_strategy(2)
    with strategy.scope() if share_layers else contextlib.nullcontext():
        model = conv_model()
        randomize(model)
    reference = keras.models.clone_model(model)
    reference.set_weights(model.get_weights())
    reference_optimizer = keras.optimizers.SGD(0.1)
    with strategy.scope():
        synced = convert_sync_batchnorm(model, share_layers=share_layers)
        optimizer = keras.optimizers.SGD(0.1)

    bn = synced.get_layer("bn")
    for variable in bn.weights + synced.get_layer("conv").weights:
        assert isinstance(variable.value, tf.distribute.DistributedValues), variable.path
    assert (
        isinstance(model.get_layer("bn").gamma.value, tf.distribute.DistributedValues)
        == share_layers
    )

    rng = np.random.default_rng(4)
    x = rng.normal(2.0, 3.0, (8, 4, 4, 2)).astype("float32")
    y = rng.normal(size=(8, 2)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    batch = next(iter(strategy.experimental_distribute_dataset(dataset)))

    @tf.function
    def distributed_step(batch):
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = keras.ops.mean((synced(x, training=True) - y) ** 2)
                scaled = loss / strategy.num_replicas_in_sync
            grads = tape.gradient(scaled, synced.trainable_variables)
            optimizer.apply_gradients(zip(grads, synced.trainable_variables, strict=True))

        strategy.run(step, args=batch)

    @tf.function
    def reference_step(x, y):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean((reference(x, training=True) - y) ** 2)
        grads = tape.gradient(loss, reference.trainable_variables)
        reference_optimizer.apply_gradients(zip(grads, reference.trainable_variables, strict=True))

    distributed_step(batch)
    reference_step(x, y)

    ref_bn = reference.get_layer("bn")
    for name in ("moving_mean", "moving_variance", "gamma", "beta"):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(getattr(bn, name)),
            keras.ops.convert_to_numpy(getattr(ref_bn, name)),
            rtol=1e-5,
            atol=1e-5,
            err_msg=name,
        )
    for want, got in zip(reference.get_weights(), synced.get_weights(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # The step did train the copy, not the original, unless the two share the layer.
    trained = np.allclose(model.get_layer("conv").get_weights()[0], synced.get_weights()[0])
    assert trained == share_layers


class CustomBlock(keras.layers.Layer):
    """A subclassed layer whose batch norm the rebuild cannot reach."""

    def __init__(self, synced: bool = False, container: str = "attr", **kwargs):
        super().__init__(**kwargs)
        self.synced = synced
        self.container = container
        self.dense = keras.layers.Dense(4)
        norm_class = SyncBatchNormalization if synced else keras.layers.BatchNormalization
        norm = norm_class(name="bn")
        if container == "attr":
            self.norm = norm
        elif container == "list":
            self.norms = [keras.layers.ReLU(), norm]
        else:
            self.norms = {"first": norm}

    def get_config(self):
        return {**super().get_config(), "synced": self.synced, "container": self.container}

    def build(self, input_shape):
        self.dense.build(input_shape)

    def call(self, x):
        return self.dense(x)


class CustomModel(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = keras.layers.Dense(4, name="inner_dense")
        self.bn = keras.layers.BatchNormalization(name="bn")

    def call(self, x):
        return self.bn(self.inner(x))


@pytest.mark.parametrize("container", ["attr", "list", "dict"])
def test_batch_norm_inside_subclassed_layer_is_reported(container):
    inputs = keras.Input((4,))
    hidden = CustomBlock(container=container, name="custom_block")(inputs)
    outer = keras.Model(inputs, hidden, name="block_model")
    model = keras.Sequential(
        [keras.Input((4,)), outer, keras.layers.BatchNormalization(name="ok_bn")],
        name="model_name",
    )
    with pytest.raises(ValueError, match="'model_name/block_model/custom_block/bn'") as info:
        convert_sync_batchnorm(model)
    assert "SyncBatchNormalization" in str(info.value)
    assert "plugin.create_layer" in str(info.value)


def test_unselected_batch_norm_inside_subclassed_layer_is_fine():
    class OnlyOuter(SyncBatchNormPlugin):
        def should_convert(self, layer):
            return super().should_convert(layer) and layer.name == "outer_bn"

    inputs = keras.Input((4,))
    x = CustomBlock(name="custom_block")(inputs)
    model = keras.Model(inputs, keras.layers.BatchNormalization(name="outer_bn")(x))
    randomize(model)
    synced = assert_round_trip(model, np.ones((2, 4), "float32"), OnlyOuter())
    assert type(synced.get_layer("custom_block").norm) is keras.layers.BatchNormalization


def test_batch_norm_inside_subclassed_model_is_reported():
    model = CustomModel(name="subclassed")
    model(np.ones((2, 4), "float32"))
    with pytest.raises(ValueError, match="'subclassed/bn'"):
        convert_sync_batchnorm(model)
    inputs = keras.Input((4,))
    wrapper = keras.Model(inputs, CustomModel(name="sub")(inputs), name="wrapper")
    with pytest.raises(ValueError, match="'wrapper/sub/bn'"):
        convert_sync_batchnorm(wrapper)


def test_sync_batch_norm_inside_subclassed_layer_is_reported_by_revert():
    inputs = keras.Input((4,))
    block = CustomBlock(synced=True, name="custom_block")
    model = keras.Model(inputs, block(inputs), name="synced")
    with pytest.raises(ValueError, match="'synced/custom_block/bn'.*BatchNormalization"):
        revert_sync_batchnorm(model)


def test_unconvertible_batch_norm_is_named():
    inputs = keras.Input((4,))
    x = keras.layers.BatchNormalization(name="fine_bn")(inputs)
    x = keras.layers.BatchNormalization(renorm=True, name="renorm_bn")(x)
    model = keras.Model(inputs, x, name="renorm_model")
    with pytest.raises(ValueError, match="'renorm_model/renorm_bn'.*renorm"):
        convert_sync_batchnorm(model)


@pytest.mark.parametrize(
    ("setting", "match"),
    [
        (
            {"momentum": 2.0},
            r"momentum must be a finite number in \[0, 1\]\. Received: momentum=2\.0",
        ),
        (
            {"momentum": -0.5},
            r"momentum must be a finite number in \[0, 1\]\. Received: momentum=-0\.5",
        ),
        ({"epsilon": -1.0}, r"epsilon must be a finite number > 0\. Received: epsilon=-1\.0"),
        ({"epsilon": 0.0}, r"epsilon must be a finite number > 0\. Received: epsilon=0\.0"),
    ],
)
@pytest.mark.parametrize("plugin", [None, GroupSyncBatchNorm(2)])
def test_batch_norm_with_invalid_settings_is_named(setting, match, plugin):
    # keras.layers.BatchNormalization takes these; its synchronised copy must not.
    inputs = keras.Input((4,))
    x = keras.layers.BatchNormalization(name="fine_bn")(inputs)
    x = keras.layers.BatchNormalization(name="bad_bn", **setting)(x)
    model = keras.Model(inputs, x, name="bad_model")
    with pytest.raises(ValueError, match=r"cannot replace layer 'bad_model/bad_bn'.*" + match):
        convert_sync_batchnorm(model, plugin)


def test_model_without_batch_norm_is_returned_with_a_warning():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)], name="plain")
    with pytest.warns(UserWarning, match="'plain' has no batch-norm layer"):
        assert convert_sync_batchnorm(model) is model
    with pytest.warns(UserWarning, match="'plain' has no SyncBatchNormalization"):
        assert revert_sync_batchnorm(model) is model


def test_convnext_has_no_batch_norm_and_is_returned_with_a_warning():
    model = keras.applications.ConvNeXtTiny(weights=None, input_shape=(32, 32, 3))
    with pytest.warns(UserWarning, match="no batch-norm layer"):
        assert convert_sync_batchnorm(model) is model


@pytest.mark.parametrize("share_layers", [False, True])
def test_bare_operation_in_the_graph_is_kept_with_its_call_arguments(share_layers):
    # keras-hub's pre-activation ResNet pads with keras.ops.pad: an Operation, not a Layer.
    inputs = keras.Input((6, 6, 2))
    x = keras.layers.BatchNormalization(name="bn")(keras.layers.Conv2D(3, 1, name="conv")(inputs))
    # All-negative features: zero padding instead of -inf would change the border maxima.
    x = keras.layers.Rescaling(1.0, offset=-10.0)(x)
    x = keras.ops.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]], constant_values=float("-inf"))
    model = keras.Model(inputs, keras.layers.MaxPooling2D(3, strides=2)(x))
    randomize(model)
    converted = convert_sync_batchnorm(model, share_layers=share_layers)
    assert isinstance(converted.get_layer("bn"), SyncBatchNormalization)
    reverted = revert_sync_batchnorm(converted)
    images = np.random.default_rng(0).uniform(-1.0, 1.0, (2, 6, 6, 2)).astype("float32")
    want = keras.ops.convert_to_numpy(model(images))
    assert (want < -5.0).all()
    for copy in (converted, reverted):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(copy(images)), want)


def test_already_synchronised_model_is_returned_with_a_warning():
    model = convert_sync_batchnorm(conv_model())
    with pytest.warns(UserWarning, match="no batch-norm layer selected"):
        assert convert_sync_batchnorm(model) is model


@pytest.mark.parametrize(
    "function, args, match",
    [
        (convert_sync_batchnorm, (keras.layers.Dense(2),), "expects a keras.Model"),
        (convert_sync_batchnorm, ("model",), "expects a keras.Model"),
        (revert_sync_batchnorm, (None,), "expects a keras.Model"),
        (convert_sync_batchnorm, ("MODEL", True), "SyncBatchNormPlugin instance"),
        (convert_sync_batchnorm, ("MODEL", "group"), "SyncBatchNormPlugin instance"),
        (convert_sync_batchnorm, ("MODEL", SyncBatchNormPlugin), "SyncBatchNormPlugin instance"),
    ],
)
def test_bad_input_raises_type_error(function, args, match):
    args = tuple(conv_model() if a == "MODEL" else a for a in args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match=match):
            function(*args)


@pytest.mark.parametrize("share_layers", ["yes", 1, None])
def test_share_layers_must_be_a_bool(share_layers):
    with pytest.raises(TypeError, match="share_layers=True or False"):
        convert_sync_batchnorm(conv_model(), share_layers=share_layers)
