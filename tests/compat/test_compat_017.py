"""tensorflow-similarity 0.17's documented calls, run against this package.

Every call here is one a 0.17 user makes (its README, its
`unsupervised_hello_world` notebook, its public signatures); each test
checks that it runs and means what it meant in 0.17, or the documented
difference (the migration guide, docs/migrating.md). The 0.17
formulas are re-implemented in float64 NumPy with loops, from 0.17's source.
"""

from __future__ import annotations

import importlib
import inspect
import math
import typing

import keras
import numpy as np
import pytest
import tensorflow as tf

import tensorflow_similarity as tfsim
from tensorflow_similarity import visualization
from tensorflow_similarity.architectures import efficientnet as efficientnet_module
from tensorflow_similarity.architectures import resnet18, resnet50
from tensorflow_similarity.testing import mirrored_strategy, run_on_replicas

# 0.17's public names that this package keeps, by module.
KEPT_017_NAMES = {
    "tensorflow_similarity": [
        "architectures",
        "augmenters",
        "distances",
        "layers",
        "losses",
        "models",
        "samplers",
        "schedules",
        "types",
        "utils",
    ],
    "tensorflow_similarity.architectures": ["EfficientNetSim", "ResNet18Sim", "ResNet50Sim"],
    "tensorflow_similarity.architectures.resnet18": ["ResNet18Sim", "build_resnet"],
    "tensorflow_similarity.architectures.resnet50": ["ResNet50Sim", "build_resnet"],
    "tensorflow_similarity.architectures.efficientnet": ["EfficientNetSim", "build_effnet"],
    "tensorflow_similarity.augmenters": [
        "Augmenter",
        "BarlowAugmenter",
        "ContrastiveAugmenter",
        "SimCLRAugmenter",
    ],
    "tensorflow_similarity.layers": [
        "ActivationStdLoggingLayer",
        "GeneralizedMeanPooling",
        "GeneralizedMeanPooling1D",
        "GeneralizedMeanPooling2D",
        "MetricEmbedding",
    ],
    "tensorflow_similarity.losses": ["Barlow", "SimCLRLoss", "SimSiamLoss", "VicReg"],
    "tensorflow_similarity.models": ["ContrastiveModel", "create_contrastive_model"],
    "tensorflow_similarity.models.heads": ["get_predictor", "get_projector"],
    "tensorflow_similarity.distances": ["DISTANCES", "distance_canonicalizer"],
    "tensorflow_similarity.samplers": [
        "MultiShotFileSampler",
        "MultiShotMemorySampler",
        "SingleShotMemorySampler",
        "TFDatasetMultiShotMemorySampler",
        "TFRecordDatasetSampler",
        "select_examples",
    ],
    "tensorflow_similarity.schedules": ["WarmupCosineDecay"],
    "tensorflow_similarity.types": [
        "BoolTensor",
        "CalibrationResults",
        "FloatTensor",
        "IntTensor",
        "Lookup",
        "PandasDataFrame",
        "Tensor",
    ],
    "tensorflow_similarity.utils": [
        "is_tensor_or_variable",
        "tf_cap_memory",
        "unpack_lookup_distances",
        "unpack_lookup_labels",
        "unpack_results",
    ],
    "tensorflow_similarity.visualization": ["visualize_views"],
}

# 0.17's positional parameters, in order (from its source).
SIGNATURES_017 = {
    tfsim.architectures.ResNet18Sim: [
        "input_shape",
        "embedding_size",
        "l2_norm",
        "include_top",
        "pooling",
        "gem_p",
    ],
    tfsim.architectures.ResNet50Sim: [
        "input_shape",
        "embedding_size",
        "weights",
        "trainable",
        "l2_norm",
        "include_top",
        "pooling",
        "gem_p",
    ],
    tfsim.architectures.EfficientNetSim: [
        "input_shape",
        "embedding_size",
        "variant",
        "weights",
        "trainable",
        "l2_norm",
        "include_top",
        "pooling",
        "gem_p",
    ],
    resnet18.build_resnet: ["input_shape"],
    resnet50.build_resnet: ["weights", "trainable"],
    efficientnet_module.build_effnet: ["variant", "weights", "trainable"],
    tfsim.losses.SimSiamLoss: ["projection_type", "margin", "reduction", "name"],
    tfsim.losses.Barlow: ["lambda_", "margin", "reduction", "name"],
    tfsim.losses.VicReg: ["std_const", "lambda_", "mu", "nu", "reduction", "name"],
    tfsim.losses.SimCLRLoss: ["temperature"],
    tfsim.models.get_projector: ["input_dim", "dim", "activation", "num_layers"],
    tfsim.models.get_predictor: ["input_dim", "hidden_dim", "activation"],
    tfsim.augmenters.SimCLRAugmenter: [
        "height",
        "width",
        "is_training",
        "color_distort",
        "jitter_stength",
        "crop",
        "eval_crop_proportion",
        "flip",
        "version",
        "num_cpu",
    ],
    tfsim.augmenters.ContrastiveAugmenter: ["process", "num_cpu"],
    tfsim.utils.is_tensor_or_variable: ["x"],
    tfsim.utils.tf_cap_memory: [],
    tfsim.utils.unpack_lookup_labels: ["lookups", "dtype"],
    tfsim.utils.unpack_lookup_distances: ["lookups", "dtype", "distance_rounding"],
    tfsim.utils.unpack_results: ["results", "epoch", "logs", "tb_writer", "name_suffix"],
    tfsim.schedules.WarmupCosineDecay: [
        "max_learning_rate",
        "total_steps",
        "warmup_steps",
        "alpha",
        "name",
    ],
    visualization.visualize_views: [
        "views",
        "labels",
        "predictions",
        "num_imgs",
        "views_per_col",
        "fig_size",
        "max_pixel_value",
        "min_pixel_value",
    ],
    tfsim.samplers.MultiShotFileSampler: [
        "x",
        "y",
        "load_example_fn",
        "classes_per_batch",
        "examples_per_class_per_batch",
        "steps_per_epoch",
        "class_list",
        "total_examples_per_class",
        "augmenter",
        "warmup",
    ],
    tfsim.samplers.TFRecordDatasetSampler: [
        "shard_path",
        "deserialization_fn",
        "example_per_class",
        "batch_size",
        "shards_per_cycle",
        "compression",
        "parallelism",
        "async_cycle",
        "prefetch_size",
        "shard_suffix",
        "num_repeat",
    ],
    tfsim.samplers.load_image: ["path", "target_size"],
}

# 0.17.1's defaults, printed in its virtualenv with
#   source /tmp/tfsim017/bin/activate && TF_USE_LEGACY_KERAS=1 python -c "import inspect; ...
#   print([(n, p.default) for n, p in inspect.signature(f).parameters.items()])"
# (parameters without a default are left out; a function default is named by __name__).
DEFAULTS_017 = {
    tfsim.utils.unpack_lookup_distances: {"distance_rounding": None},
    tfsim.utils.unpack_results: {"name_suffix": ""},
    tfsim.schedules.WarmupCosineDecay: {"alpha": 0.0, "name": None},
    visualization.visualize_views: {
        "labels": None,
        "predictions": None,
        "num_imgs": None,
        "views_per_col": 4,
        "fig_size": (24, 4),
        "max_pixel_value": 1.0,
        "min_pixel_value": 0.0,
    },
    tfsim.samplers.MultiShotFileSampler: {
        "load_example_fn": "load_image",
        "classes_per_batch": 2,
        "examples_per_class_per_batch": 2,
        "steps_per_epoch": 1000,
        "class_list": None,
        "total_examples_per_class": None,
        "augmenter": None,
        "warmup": -1,
    },
    tfsim.samplers.TFRecordDatasetSampler: {
        "example_per_class": 2,
        "batch_size": 32,
        "shards_per_cycle": None,
        "compression": None,
        "parallelism": -1,
        "async_cycle": False,
        "prefetch_size": None,
        "shard_suffix": "*.tfrec",
        "num_repeat": -1,
    },
    tfsim.samplers.load_image: {"target_size": None},
}


@pytest.mark.parametrize("module_name", sorted(KEPT_017_NAMES))
def test_public_017_names_are_kept(module_name):
    module = importlib.import_module(module_name)
    missing = [name for name in KEPT_017_NAMES[module_name] if not hasattr(module, name)]
    assert not missing, f"{module_name} lost 0.17's public names {missing}"


@pytest.mark.parametrize("function", list(SIGNATURES_017), ids=lambda f: f.__qualname__)
def test_positional_order_is_017s_and_newer_arguments_are_keyword_only(function):
    parameters = list(inspect.signature(function).parameters.values())
    positional = [
        p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    expected = SIGNATURES_017[function]
    assert positional[: len(expected)] == expected


@pytest.mark.parametrize("function", list(DEFAULTS_017), ids=lambda f: f.__qualname__)
def test_017_defaults_are_kept_and_017s_required_arguments_stay_required(function):
    parameters = inspect.signature(function).parameters
    defaults = {
        name: getattr(p.default, "__name__", p.default)
        for name, p in parameters.items()
        if name in SIGNATURES_017[function] and p.default is not p.empty
    }
    assert defaults == DEFAULTS_017[function]


def test_017_tensor_annotations_still_annotate():
    def scale(x: tfsim.types.FloatTensor, k: tfsim.types.IntTensor) -> tfsim.types.Tensor:
        return x * tf.cast(k, x.dtype)

    hints = typing.get_type_hints(scale)
    assert hints["x"] is tfsim.types.FloatTensor and hints["return"] is tf.Tensor
    for annotation in ("FloatTensor", "IntTensor", "BoolTensor"):
        assert issubclass(getattr(tfsim.types, annotation), tf.Tensor)
    assert float(scale(tf.constant(1.5), tf.constant(2))) == 3.0
    assert isinstance(tfsim.types.PandasDataFrame, type)


@pytest.mark.parametrize("builder", [tfsim.architectures.ResNet18Sim, resnet18.build_resnet18])
def test_resnet18_arguments_017_lacked_are_keyword_only(builder):
    parameters = inspect.signature(builder).parameters
    for name in ("sync_bn", "stem", "name", "first_block_shortcut"):
        if builder is tfsim.architectures.ResNet18Sim or name == "first_block_shortcut":
            assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, name


# --- losses -----------------------------------------------------------------------------


def _views(scale=1.0):
    rng = np.random.default_rng(17)
    z1 = rng.normal(size=(8, 4))
    z2 = z1 + 0.5 * rng.normal(size=(8, 4))
    return (scale * z1).astype("float32"), (scale * z2).astype("float32")


def _cosines_017(a, b):
    return np.array(
        [
            sum(a[i, k] * b[i, k] for k in range(a.shape[1]))
            / math.sqrt(sum(v * v for v in a[i]) * sum(v * v for v in b[i]))
            for i in range(len(a))
        ]
    )


def simsiam_017(target, prediction, projection_type="negative_cosine_sim", margin=0.001):
    """0.17: per sample 0.5 * projection(cos) + margin, mean over the batch."""
    cos = _cosines_017(np.float64(target), np.float64(prediction))
    projected = {
        "negative_cosine_sim": -cos,
        "cosine_distance": 1.0 - cos,
        "angular_distance": np.arccos(np.clip(cos, -1, 1)) / math.pi,
    }[projection_type]
    return 0.5 * projected + margin


def simclr_017_per_sample(za, zb, temperature):
    """0.17: per sample, the cross entropy of za_i against all of zb and za (self masked),
    plus the same with the views swapped."""
    a = np.float64(za) / np.linalg.norm(za, axis=1, keepdims=True)
    b = np.float64(zb) / np.linalg.norm(zb, axis=1, keepdims=True)
    n = len(a)

    def direction(x, y, i):
        logits = [x[i] @ y[j] / temperature for j in range(n)]
        logits += [x[i] @ x[j] / temperature for j in range(n) if j != i]
        return -logits[i] + math.log(sum(math.exp(v) for v in logits))

    return np.array([direction(a, b, i) + direction(b, a, i) for i in range(n)])


def test_simsiam_in_017s_calling_order_trains_the_predictor():
    """0.17 and Keras call loss(y_true=stop_gradient(z), y_pred=p): the gradient reaches p."""
    rng = np.random.default_rng(0)
    z = tf.constant(rng.normal(size=(6, 4)), tf.float32)
    h = tf.constant(rng.normal(size=(6, 4)), tf.float32)
    predictor = keras.layers.Dense(4)
    predictor.build((None, 4))
    before = predictor.kernel.numpy()

    with tf.GradientTape(persistent=True) as tape:
        tape.watch(z)
        p = predictor(h)
        value = tfsim.losses.SimSiamLoss()(tf.stop_gradient(z), p)
        unstopped = tfsim.losses.SimSiamLoss()(z, p)
    assert np.abs(tape.gradient(value, p).numpy()).max() > 1e-3
    assert tape.gradient(unstopped, z) is None  # the loss stops the target's gradient itself
    grads = tape.gradient(value, predictor.trainable_variables)
    variables = predictor.trainable_variables
    keras.optimizers.SGD(0.5).apply_gradients(zip(grads, variables, strict=True))

    assert np.abs(predictor.kernel.numpy() - before).max() > 1e-4


@pytest.mark.parametrize(
    "projection_type", ["negative_cosine_sim", "cosine_distance", "angular_distance"]
)
def test_simsiam_is_twice_017s_less_its_margin(projection_type):
    z, p = _views()
    expected_017 = simsiam_017(z, p, projection_type)

    per_sample = tfsim.losses.SimSiamLoss(projection_type, reduction="none")(z, p).numpy()
    mean = tfsim.losses.SimSiamLoss(projection_type)(z, p).numpy()
    with_017_margin = tfsim.losses.SimSiamLoss(projection_type, margin=0.001)(z, p).numpy()

    assert per_sample.shape == (8,)
    np.testing.assert_allclose(0.5 * per_sample + 0.001, expected_017, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(0.5 * mean + 0.001, expected_017.mean(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(with_017_margin, mean + 0.001, rtol=1e-6)


def test_simclr_is_half_of_017s_at_the_same_temperature():
    za, zb = _views()
    expected_017 = simclr_017_per_sample(za, zb, temperature=0.05)

    mean = tfsim.losses.SimCLRLoss(temperature=0.05)(za, zb).numpy()
    per_sample = tfsim.losses.SimCLRLoss(0.05, reduction="none", dtype="float64")(za, zb).numpy()

    np.testing.assert_allclose(2 * mean, expected_017.mean(), rtol=1e-5)
    np.testing.assert_allclose(2 * per_sample, expected_017, rtol=1e-5)
    assert tfsim.losses.SimCLRLoss().temperature == 0.1  # 0.17: 0.05


def test_simclr_per_sample_terms_under_a_strategy_are_each_replicas_own():
    za, zb = _views()
    expected = tfsim.losses.SimCLRLoss(reduction="none")(za, zb).numpy()
    loss = tfsim.losses.SimCLRLoss(reduction="none")

    run = run_on_replicas(lambda a, b: loss(a, b), (za, zb), [3, len(za) - 3], traced=False)

    np.testing.assert_allclose(run.concatenated(), expected, rtol=1e-5)


def test_barlow_agrees_with_017_and_takes_its_margin():
    za, zb = _views()

    def standardise(z):  # 0.17: biased std, divide_no_nan, no epsilon
        z = np.float64(z)
        return (z - z.mean(axis=0)) / z.std(axis=0)

    a, b = standardise(za), standardise(zb)
    n, d = a.shape
    c = [[sum(a[k, i] * b[k, j] for k in range(n)) / n for j in range(d)] for i in range(d)]
    on = sum((1 - c[i][i]) ** 2 for i in range(d))
    off = sum(c[i][j] ** 2 for i in range(d) for j in range(d) if i != j)
    expected_017 = on + 5e-3 * off + 1e-12

    np.testing.assert_allclose(tfsim.losses.Barlow()(za, zb).numpy(), expected_017, atol=1e-5)
    np.testing.assert_allclose(
        tfsim.losses.Barlow(5e-3, 0.25)(za, zb).numpy(),
        tfsim.losses.Barlow()(za, zb).numpy() + 0.25,
        rtol=1e-6,
    )


def test_vicreg_std_const_is_the_variance_constant():
    za, zb = _views(scale=0.3)  # small features: the variance hinge is active
    by_017_name = tfsim.losses.VicReg(0.5)(za, zb).numpy()
    by_keyword = tfsim.losses.VicReg(epsilon=0.5)(za, zb).numpy()
    np.testing.assert_allclose(by_017_name, by_keyword, rtol=1e-7)
    assert by_017_name != tfsim.losses.VicReg()(za, zb).numpy()
    with pytest.raises(ValueError, match="same constant"):
        tfsim.losses.VicReg(std_const=1e-4, epsilon=1e-4)


@pytest.mark.parametrize("make_loss", [tfsim.losses.Barlow, tfsim.losses.VicReg])
def test_batch_statistic_losses_refuse_per_sample_reduction(make_loss):
    for reduction in ("none", None):
        with pytest.raises(ValueError, match="no per-sample terms"):
            make_loss(reduction=reduction)
    assert make_loss(reduction="auto").reduction == "sum_over_batch_size"


@pytest.mark.parametrize(
    "loss",
    [
        tfsim.losses.SimSiamLoss("angular_distance", 0.01, "none", "siam"),
        tfsim.losses.Barlow(0.01, 0.5, "sum", "twins"),
        tfsim.losses.VicReg(0.01, 10.0, 5.0, 2.0, "sum", "vr"),
    ],
    ids=lambda loss: type(loss).__name__,
)
def test_017_arguments_survive_get_config(loss):
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert restored.get_config() == loss.get_config()
    za, zb = _views()
    np.testing.assert_allclose(restored(za, zb).numpy(), loss(za, zb).numpy(), rtol=1e-6)


# --- architectures ----------------------------------------------------------------------


def resnet18_017_weights(input_channels=3):
    """0.17's ResNet-18 (resnet18.py: build_resnet, stack_fn, block0): (layer, weight shapes)."""
    layers = [("conv1_conv", [(3, 3, input_channels, 64)])]
    layers.append(("conv1_bn", [(64,)] * 4))
    previous = 64
    for stage, filters in zip((2, 3, 4, 5), (64, 128, 256, 512), strict=True):
        for block in (1, 2):
            prefix = f"conv{stage}_block{block}"
            if block == 1:  # conv_shortcut=True in every stage's first block
                layers.append((f"{prefix}_0_conv", [(1, 1, previous, filters)]))
                layers.append((f"{prefix}_0_bn", [(filters,)] * 4))
            in_channels = previous if block == 1 else filters
            layers.append((f"{prefix}_1_conv", [(3, 3, in_channels, filters)]))
            layers.append((f"{prefix}_1_bn", [(filters,)] * 4))
            layers.append((f"{prefix}_2_conv", [(3, 3, filters, filters)]))
            layers.append((f"{prefix}_2_bn", [(filters,)] * 4))
        previous = filters
    return layers


def _weights_by_layer(model):
    return [
        (layer.name, [tuple(w.shape) for w in layer.weights])
        for layer in model.layers
        if layer.weights
    ]


def test_resnet18_017s_network_layer_for_layer():
    expected = resnet18_017_weights()
    ours = resnet18.build_resnet((32, 32, 3))

    # The same layers and weight shapes on the same graph, so Keras' topological order of
    # the weights is the same too: set_weights(model_017.get_weights()) moves a 0.17 model.
    assert dict(_weights_by_layer(ours)) == dict(expected)
    assert len(_weights_by_layer(ours)) == len(expected)
    assert ours.count_params() == sum(int(np.prod(s)) for _, shapes in expected for s in shapes)

    default = resnet18.build_resnet18((32, 32, 3))
    assert "conv2_block1_0_conv" not in {layer.name for layer in default.layers}


def test_resnet18_017_call_with_l2_norm_off():
    model = tfsim.architectures.ResNet18Sim((32, 32, 3), 16, False)  # 0.17: l2_norm=False

    assert model.layers[-1].name == "embedding"
    assert type(model.layers[-1]) is keras.layers.Dense
    assert model.output_shape == (None, 16)


def test_017_builder_functions_apply_trainable():
    backbone = resnet50.build_resnet(trainable="partial")
    trainable = {layer.name for layer in backbone.layers if layer.trainable}
    assert trainable and all(name.startswith("conv5_") for name in trainable)
    assert backbone.input_shape == (None, None, None, 3)
    with pytest.raises(ValueError, match="trainable"):
        efficientnet_module.build_effnet("B0", trainable="some")


def test_builder_defaults_changed_on_purpose():
    for builder in (tfsim.architectures.ResNet50Sim, tfsim.architectures.EfficientNetSim):
        parameters = inspect.signature(builder).parameters
        assert parameters["weights"].default is None  # 0.17: "imagenet"
        assert parameters["trainable"].default == "full"  # 0.17: "frozen"


# --- layers -----------------------------------------------------------------------------


def gem_1d_reference(x, p, steps_axis):
    x = np.float64(x)
    out = np.zeros([d for i, d in enumerate(x.shape) if i != steps_axis])
    moved = np.moveaxis(x, steps_axis, -1)
    for b in range(moved.shape[0]):
        for c in range(moved.shape[1]):
            values = moved[b, c]
            low = min(values)
            shifted = [v - low + 1 for v in values]
            if p == math.inf:
                pooled = max(shifted)
            elif p == 0:
                pooled = math.exp(sum(math.log(v) for v in shifted) / len(shifted))
            else:
                pooled = (sum(v**p for v in shifted) / len(shifted)) ** (1 / p)
            out[b, c] = pooled + low - 1
    return out


@pytest.mark.parametrize("p", [1.0, 3.0, 0.0, math.inf])
@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_gem_pooling_1d_matches_numpy(p, data_format):
    x = np.random.default_rng(3).normal(0.5, 2.0, size=(2, 5, 3)).astype("float32")
    layer = tfsim.layers.GeneralizedMeanPooling1D(p=p, data_format=data_format)
    steps_axis = 1 if data_format == "channels_last" else 2

    out = keras.ops.convert_to_numpy(layer(x))

    np.testing.assert_allclose(out, gem_1d_reference(x, p, steps_axis), rtol=1e-5, atol=1e-5)
    kept = tfsim.layers.GeneralizedMeanPooling1D(p=p, data_format=data_format, keepdims=True)
    assert kept(x).shape == tuple(1 if i == steps_axis else d for i, d in enumerate(x.shape))


def test_gem_pooling_base_and_config():
    layer = tfsim.layers.GeneralizedMeanPooling1D(p=2.0, keepdims=True, name="gem1d")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is tfsim.layers.GeneralizedMeanPooling1D
    assert restored.get_config() == layer.get_config()
    assert isinstance(layer, tfsim.layers.GeneralizedMeanPooling)
    assert isinstance(tfsim.layers.GeneralizedMeanPooling2D(), tfsim.layers.GeneralizedMeanPooling)
    with pytest.raises(TypeError, match="base class"):
        tfsim.layers.GeneralizedMeanPooling()


def test_activation_std_logging_layer_passes_through_and_logs_the_spread():
    x = np.random.default_rng(4).normal(size=(16, 6)).astype("float32")
    layer = tfsim.layers.ActivationStdLoggingLayer(name="proj_std")

    out = layer(x)

    normalised = np.float64(x) / np.linalg.norm(np.float64(x), axis=1, keepdims=True)
    expected = np.mean([np.std(normalised[:, j]) for j in range(6)])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(out), x)
    np.testing.assert_allclose(layer.std_tracker.result().numpy(), expected, rtol=1e-5)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(restored) is tfsim.layers.ActivationStdLoggingLayer and restored.name == "proj_std"


def test_sync_batch_norm_reports_synchronized_without_keras_sync(monkeypatch):
    import keras.ops as keras_ops  # the module SyncBatchNormalization calls

    calls = []
    moments = keras_ops.moments

    def recording_moments(*args, synchronized=False, **kwargs):
        calls.append(synchronized)
        return moments(*args, synchronized=synchronized, **kwargs)

    monkeypatch.setattr(keras_ops, "moments", recording_moments)
    layer = tfsim.layers.SyncBatchNormalization()
    x = np.random.default_rng(5).normal(size=(8, 3)).astype("float32")

    out = layer(x, training=True)

    assert layer.synchronized is True
    assert calls == [False]  # one-device call: Keras' plain moments, not its sync path
    expected = (x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + layer.epsilon)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out), expected, rtol=1e-4, atol=1e-5)
    assert "synchronized" not in layer.get_config()


# --- augmenters -------------------------------------------------------------------------


def test_simclr_augmenter_017_call_scales_by_255():
    images = np.full((3, 12, 12, 3), 255, "uint8")
    augmenter = tfsim.augmenters.SimCLRAugmenter(8, 10, color_distort=False, crop=True, seed=0)

    views = augmenter(images, None, 3, False)

    assert isinstance(views, list) and len(views) == 3
    for view in views:
        assert view.shape == (3, 8, 10, 3)
        np.testing.assert_allclose(view.numpy(), 1.0, atol=1e-6)  # 255 / 255, any crop
    eval_views = tfsim.augmenters.SimCLRAugmenter(8, 8, is_training=False)(
        np.full((2, 16, 16, 3), 51.0, "float32"), None, 2, False
    )
    np.testing.assert_allclose(eval_views[0].numpy(), 0.2, atol=1e-6)  # floats too: / 255
    with pytest.raises(ValueError, match="version"):
        tfsim.augmenters.SimCLRAugmenter(8, 8, version="v1")


def test_barlow_augmenter_takes_width_first_and_honours_num_views():
    images = np.random.default_rng(6).uniform(size=(2, 16, 16, 3)).astype("float32")
    augmenter = tfsim.augmenters.BarlowAugmenter(12, 8, seed=1)

    views = augmenter(images, None, 3, False)

    assert len(views) == 3 and all(v.shape == (2, 8, 12, 3) for v in views)
    assert not np.allclose(views[0].numpy(), views[2].numpy())
    with pytest.raises(ValueError, match="solarize_thresh"):
        tfsim.augmenters.BarlowAugmenter(8, 8, solarize_thresh=128)


def test_contrastive_augmenter_maps_the_process_and_subclasses_work():
    images = np.arange(2 * 4 * 4 * 1, dtype="float32").reshape(2, 4, 4, 1)
    views = tfsim.augmenters.ContrastiveAugmenter(lambda img: img * 2.0)(images, None, 2, False)
    np.testing.assert_array_equal(views[1].numpy(), images * 2.0)

    class Identity(tfsim.augmenters.Augmenter):
        def augment(self, x, y=None, num_augmentations_per_example=2, is_warmup=True):
            return [x] * num_augmentations_per_example

    assert len(Identity()(images, None, 4, True)) == 4


# --- models -----------------------------------------------------------------------------


def _small_backbone():
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, padding="same")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, x, name="backbone")


def test_017_notebook_flow_under_a_strategy():
    """0.17's notebook: create_contrastive_model(backbone=, projector=, predictor=, algorithm=),
    compile(loss=SimSiamLoss(...)) and fit on (view1, view2) pairs, under strategy.scope()."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    views = tuple(rng.normal(size=(8, 8, 8, 3)).astype("float32") for _ in range(2))
    dataset = tf.data.Dataset.from_tensor_slices(views).batch(8)
    with mirrored_strategy(2).scope():
        projector = tfsim.models.get_projector(input_dim=4, dim=8, num_layers=2)
        predictor = tfsim.models.get_predictor(input_dim=8, hidden_dim=4)
        model = tfsim.models.create_contrastive_model(
            backbone=_small_backbone(),
            projector=projector,
            predictor=predictor,
            algorithm="simsiam",
            name="simsiam",
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.5),
            loss=tfsim.losses.SimSiamLoss(projection_type="cosine_distance", name="simsiam"),
        )
    before = model.predictor.get_weights()

    history = model.fit(dataset, epochs=1, verbose=0)

    assert np.isfinite(history.history["loss"][0])
    assert any(
        np.abs(a - b).max() > 1e-6
        for a, b in zip(before, model.predictor.get_weights(), strict=True)
    )
    # predict is the backbone's output here (0.17: the normalised projector output).
    assert model.predict(views[0], verbose=0).shape == (8, 4)
    assert model.embed(views[0], output="projector").shape == (8, 8)


def test_create_contrastive_model_refuses_contradicting_heads():
    backbone = _small_backbone()
    with pytest.raises(ValueError, match="Give either projector"):
        tfsim.models.create_contrastive_model(
            backbone=backbone, projector=tfsim.models.get_projector(4, 8), projector_output_dim=8
        )
    with pytest.raises(ValueError, match="only SimSiam, BYOL and MoCo v3 have a predictor"):
        tfsim.models.create_contrastive_model(
            backbone=backbone, algorithm="simclr", predictor=tfsim.models.get_predictor(8)
        )


def test_default_projector_widths_follow_the_backbone():
    assert tfsim.models.projector_widths(512, "barlow") == (2048, 2048)
    assert tfsim.models.projector_widths(512, "barlow", "paper") == (8192, 8192)
    assert tfsim.models.projector_widths(2048, "barlow") == (8192, 8192)
    assert tfsim.models.projector_widths(512, "simclr") == (512, 128)
    assert tfsim.models.projector_widths(64, "simsiam") == (256, 256)
    model = tfsim.models.create_contrastive_model(_small_backbone(), "vicreg")
    assert model.projector.output_shape == (None, 256)
