"""The training side of `benchmark.self_supervised.quality`: devices, models, data and `Trainer`.

The logical CPU replicas and their strategy, the small ResNet-style backbone and
its contrastive model, the views each step trains on, the kNN evaluation, and
`Trainer`, which trains one (algorithm, setting) from a seed's weights and returns
the run's row of results.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from benchmark.self_supervised.quality_options import RunConfig
from benchmark.self_supervised.quality_tables import KNN_K, KNN_TEMPERATURE, NUM_REPLICAS
from tensorflow_similarity import augmenters
from tensorflow_similarity.augmenters import ViewAugmenter
from tensorflow_similarity.callbacks import knn_accuracy
from tensorflow_similarity.datasets import ImageData
from tensorflow_similarity.layers import recompute_batch_norm_statistics
from tensorflow_similarity.models import ContrastiveModel, create_contrastive_model

AUGMENTERS = {
    "simsiam": augmenters.simsiam_augmenter,
    "simclr": augmenters.simclr_augmenter,
    "barlow": augmenters.barlow_augmenter,
}


def configure_devices() -> list[str]:
    """Splits the host CPU into `NUM_REPLICAS` logical devices; must run before TF initialises."""
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_REPLICAS
    )
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def make_strategy(devices: Sequence[str]) -> tf.distribute.MirroredStrategy:
    # A key range of its own, as in benchmark.sync_bn, so that nothing else
    # in the process can collide with its collective keys.
    cls = type(
        "QualityMirroredStrategy",
        (tf.distribute.MirroredStrategy,),
        {"_collective_key_base": 10_000 * NUM_REPLICAS},
    )
    return cls(list(devices[:NUM_REPLICAS]))


_START = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - _START:7.1f} s] {message}", flush=True)


# --------------------------------------------------------------------------------------
# Models and data.
# --------------------------------------------------------------------------------------


def build_backbone(image_size: int, width: int) -> keras.Model:
    """A ResNet-style backbone small enough for CPU: 3 stages of one basic block each.

    Stem conv, then basic blocks of `width`, `2 width`, `4 width` channels
    (strides 1, 2, 2), global average pooling: representation of `4 width`
    features, 9 batch-norm layers.
    """
    inputs = keras.Input((image_size, image_size, 3), name="images")
    x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False, name="stem_conv")(inputs)
    x = keras.layers.BatchNormalization(name="stem_bn")(x)
    x = keras.layers.ReLU(name="stem_relu")(x)
    for stage, (filters, stride) in enumerate(((width, 1), (2 * width, 2), (4 * width, 2))):
        prefix = f"stage{stage}"
        shortcut = x
        if stride != 1 or x.shape[-1] != filters:
            shortcut = keras.layers.Conv2D(
                filters, 1, strides=stride, use_bias=False, name=f"{prefix}_proj_conv"
            )(x)
            shortcut = keras.layers.BatchNormalization(name=f"{prefix}_proj_bn")(shortcut)
        y = keras.layers.Conv2D(
            filters, 3, strides=stride, padding="same", use_bias=False, name=f"{prefix}_conv1"
        )(x)
        y = keras.layers.BatchNormalization(name=f"{prefix}_bn1")(y)
        y = keras.layers.ReLU(name=f"{prefix}_relu1")(y)
        y = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"{prefix}_conv2")(
            y
        )
        y = keras.layers.BatchNormalization(name=f"{prefix}_bn2")(y)
        x = keras.layers.ReLU(name=f"{prefix}_relu2")(keras.layers.Add()([shortcut, y]))
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    return keras.Model(inputs, x, name="small_resnet")


def build_model(algorithm: str, config: RunConfig, sync_bn: bool) -> ContrastiveModel:
    return create_contrastive_model(
        build_backbone(config.image_size, config.width),
        algorithm,
        projector_hidden_dim=2 * config.projector_dim,
        projector_output_dim=config.projector_dim,
        sync_bn=sync_bn,
    )


def sub_models(model: ContrastiveModel) -> list[keras.Model]:
    return [m for m in (model.backbone, model.projector, model.predictor) if m is not None]


def copy_weights(source: ContrastiveModel, target: ContrastiveModel) -> None:
    """Copies every layer's weights by layer name (conversion keeps the names).

    Raises:
        ValueError: If a layer's weights differ in number or shape.
    """
    for source_model, target_model in zip(sub_models(source), sub_models(target), strict=True):
        for layer in source_model.layers:
            weights = layer.get_weights()
            if weights:
                target_model.get_layer(layer.name).set_weights(weights)


def make_augmenter(algorithm: str, image_size: int, seed: int) -> ViewAugmenter:
    # Characters are not mirror-symmetric (a mirrored letter is another letter), and a
    # 16-pixel image cannot lose 92% of its area and stay legible: no flips, crops keep at
    # least 25% of the area.
    # Colour and blur stay as in the papers.
    return AUGMENTERS[algorithm](image_size, seed=seed, flip_prob=0.0, crop_scale=(0.25, 1.0))


def batch_order(num_images: int, global_batch: int, epochs: int, seed: int) -> np.ndarray:
    """Image indices of every step, `[epochs * steps, global_batch]`, the same for a/b/c."""
    rng = np.random.default_rng(seed)
    steps = num_images // global_batch
    return np.stack(
        [rng.permutation(num_images)[: steps * global_batch] for _ in range(epochs)]
    ).reshape(-1, global_batch)


def view_pairs(images: np.ndarray, order: np.ndarray, augmenter: ViewAugmenter) -> tf.data.Dataset:
    """Global batches of `(view1, view2)`, a pure function of `order` and the augmenter seed.

    `step=i` makes batch `i`'s views independent of when the pipeline runs them.
    """
    images = tf.constant(images)
    _, height, width, channels = images.shape

    def views(i, indices):
        view1, view2 = augmenter(tf.gather(images, indices), step=i)
        # An unknown batch dimension lets one traced training step serve every
        # batch size, instead of one trace per size.
        loose = [None, height, width, channels]
        return tuple(tf.compat.v1.placeholder_with_default(v, loose) for v in (view1, view2))

    return (
        tf.data.Dataset.from_tensor_slices(order)
        .enumerate()
        .map(views, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(2)
    )


def embedding_function(backbone: keras.Model, image_size: int) -> Callable[[tf.Tensor], tf.Tensor]:
    """Backbone inference on one device, traced once for any number of images."""
    spec = tf.TensorSpec([None, image_size, image_size, 3], tf.float32)
    return tf.function(lambda x: backbone(x, training=False), input_signature=[spec])


def evaluate(embed: Callable[[tf.Tensor], tf.Tensor], data: ImageData) -> float:
    train = embed(tf.constant(data.x_train)).numpy()
    test = embed(tf.constant(data.x_test)).numpy()
    return knn_accuracy(
        train, data.y_train, test, data.y_test, k=KNN_K, temperature=KNN_TEMPERATURE
    )


# --------------------------------------------------------------------------------------
# Training.
# --------------------------------------------------------------------------------------


class Trainer:
    """One compiled model per (algorithm, setting), reset to a seed's weights before each run.

    Tracing a 4-replica training step costs far more than the training
    itself at these sizes, so the model, its optimizer and its traced
    functions are kept across seeds and batch sizes: each run copies the
    seed's initial weights in and puts back the optimizer's state as built
    (zero moments and iteration count; the learning rate, also one of the
    optimizer's variables, kept), which is what a freshly built model would
    start from.
    """

    def __init__(
        self, algorithm: str, setting: str, config: RunConfig, strategy: tf.distribute.Strategy
    ) -> None:
        self.algorithm = algorithm
        self.setting = setting
        self.config = config
        self.replicas = 1 if setting == "single" else NUM_REPLICAS
        self.strategy = tf.distribute.get_strategy() if setting == "single" else strategy
        with self.strategy.scope():
            self.model = build_model(algorithm, config, sync_bn=setting == "sync")
            # XLA is off on CPU and under tf.distribute anyway; off everywhere keeps the
            # three settings' numerics comparable on a GPU host too.
            self.model.compile(
                optimizer=keras.optimizers.Adam(config.learning_rate),
                jit_compile=False,
            )
            self.model.optimizer.build(self.model.trainable_variables)
        self.fresh_optimizer = [v.numpy() for v in self.model.optimizer.variables]
        self.embed = embedding_function(self.model.backbone, config.image_size)

    def run(
        self, batch_per_replica: int, seed: int, reference: ContrastiveModel, data: ImageData
    ) -> dict[str, Any]:
        """Trains from `reference`'s weights and returns the run's row of results."""
        config = self.config
        global_batch = NUM_REPLICAS * batch_per_replica
        order = batch_order(len(data.x_train), global_batch, config.epochs, seed)
        steps_per_epoch = len(order) // config.epochs
        augmenter = make_augmenter(self.algorithm, config.image_size, seed)
        dataset = view_pairs(data.x_train, order, augmenter)
        copy_weights(reference, self.model)
        for variable, value in zip(
            self.model.optimizer.variables, self.fresh_optimizer, strict=True
        ):
            variable.assign(value)
        started = time.perf_counter()
        history = self.model.fit(
            dataset, epochs=config.epochs, steps_per_epoch=steps_per_epoch, verbose=0
        )
        train_s = time.perf_counter() - started
        recompute_batch_norm_statistics(self.model.backbone, data.x_train)
        accuracy = evaluate(self.embed, data)
        row = {
            "algorithm": self.algorithm,
            "setting": self.setting,
            "batch_per_replica": batch_per_replica,
            "global_batch": global_batch,
            "replicas": self.replicas,
            "seed": seed,
            "knn_accuracy": accuracy,
            "final_loss": float(history.history["loss"][-1]),
            "final_proj_std": float(history.history["proj_std"][-1]),
            "steps": len(order),
            "train_s": round(train_s, 1),
        }
        log(
            f"{self.algorithm:8s} {self.setting:11s} b={batch_per_replica:<3d} seed={seed} "
            f"knn={accuracy:.4f} loss={row['final_loss']:.4f} ({train_s:.0f} s)"
        )
        return row
