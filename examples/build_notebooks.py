"""Writes the example notebooks from the cells below, and optionally runs them.

The notebooks are generated, not edited by hand, so that what they say and what
the test suite executes stay the same text:

    python examples/build_notebooks.py            # write the .ipynb files (no outputs)
    python examples/build_notebooks.py --execute  # write them, run them, store the outputs

`tests/test_examples.py` checks that the committed notebooks hold exactly these
cells and runs each of them top to bottom with `TFSIM_EXAMPLE_SMALL=1`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import nbformat

EXAMPLES = Path(__file__).resolve().parent

PARAMETERS_NOTE = (
    "# TFSIM_EXAMPLE_SMALL=1 (set by the test suite) shrinks the run to a quick smoke test.\n"
)

HELLO_WORLD = [
    (
        "markdown",
        """# Self-supervised learning, hello world

This notebook trains a ResNet-18 **without labels** on scikit-learn's handwritten digits
(1,797 real 8x8 images, shipped with scikit-learn, so no download) with two self-supervised
algorithms, SimSiam and SimCLR, under `tf.distribute.MirroredStrategy` with
**synchronised batch norm**. It then measures how good the embeddings are with the labels it
never saw: the weighted k-nearest-neighbour (kNN) accuracy on held-out digits, a 2-D
projection, and the nearest neighbours of a few queries.

Without a GPU, the strategy runs over two *logical* CPU devices, so everything here also
runs on a laptop: a few minutes on two CPU cores. With GPUs, it uses all of them.""",
    ),
    (
        "code",
        PARAMETERS_NOTE
        + """import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
SMALL = os.environ.get("TFSIM_EXAMPLE_SMALL") == "1"

REPLICAS = 2  # logical CPU devices when there is no GPU
IMAGE_SIZE = 8  # the digits' own resolution keeps a full-width ResNet-18 fast on CPUs
EPOCHS = 1 if SMALL else 3
LIMIT = 300 if SMALL else None  # number of images used (None: all 1,797)
GLOBAL_BATCH = 64 if SMALL else 128
ALGORITHMS = ["simsiam", "simclr"]

import tensorflow as tf

# Logical devices must be declared before TensorFlow starts its runtime.
if not tf.config.list_physical_devices("GPU"):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * REPLICAS
    )""",
    ),
    (
        "code",
        """import keras
import matplotlib.pyplot as plt
import numpy as np

from tensorflow_similarity.architectures import ResNet18Sim
from tensorflow_similarity.augmenters import simclr_augmenter, simsiam_augmenter
from tensorflow_similarity.callbacks import KNNAccuracy
from tensorflow_similarity.data import load_data
from tensorflow_similarity.models import create_contrastive_model

keras.utils.set_random_seed(0)
devices = [d.name for d in tf.config.list_logical_devices("GPU")] or [
    d.name for d in tf.config.list_logical_devices("CPU")
]
strategy = tf.distribute.MirroredStrategy(devices)
print("replicas in sync:", strategy.num_replicas_in_sync)""",
    ),
    (
        "markdown",
        """## The data

`load_data("digits")` scales the pixels to `[0, 1]`, makes them RGB, and splits each class
80/20 into train and test images, deterministically from the seed. Only the training images
are used for learning, and without their labels; the labels serve the evaluation.""",
    ),
    (
        "code",
        """data = load_data("digits", image_size=IMAGE_SIZE, seed=0, limit=LIMIT)
print(data.source)
print("train", data.x_train.shape, "test", data.x_test.shape)

figure, axes = plt.subplots(1, 10, figsize=(10, 1.3))
for label, axis in enumerate(axes):
    axis.imshow(data.x_train[data.y_train == label][0])
    axis.set_title(data.class_names[label])
    axis.axis("off")
plt.show()""",
    ),
    (
        "markdown",
        """## Training

For each algorithm: its paper's view augmentation (random crops, flips, colour jitter, ...)
makes two views of every image; `ResNet18Sim(sync_bn=True)` builds the backbone with
`SyncBatchNormalization` layers, and `create_contrastive_model(..., sync_bn=True)` adds the
paper's projector (and SimSiam's predictor), also with synchronised batch norm. Under the
strategy, every batch-norm layer normalises with the statistics of the **global** batch, as
one device holding the whole batch would.

`KNNAccuracy` embeds the train and test images after each epoch and logs the kNN accuracy
(k=20, cosine similarity). `proj_std` (and SimSiam's `pred_std`) watch for collapse: they
fall to 0 if every image gets the same embedding.""",
    ),
    (
        "code",
        """AUGMENTERS = {"simsiam": simsiam_augmenter, "simclr": simclr_augmenter}


def train(algorithm):
    augmenter = AUGMENTERS[algorithm](IMAGE_SIZE, seed=0)
    views = (
        tf.data.Dataset.from_tensor_slices(data.x_train)
        .shuffle(len(data.x_train), seed=0)
        .batch(GLOBAL_BATCH, drop_remainder=True)
        .map(augmenter)
        .prefetch(2)
    )
    with strategy.scope():
        backbone = ResNet18Sim(
            (IMAGE_SIZE, IMAGE_SIZE, 3), include_top=False, pooling="avg", sync_bn=True
        )
        model = create_contrastive_model(
            backbone,
            algorithm,
            projector_hidden_dim=512,
            projector_output_dim=512,
            predictor_hidden_dim=128,
            sync_bn=True,
        )
        model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9, weight_decay=5e-4))
    knn = KNNAccuracy(
        (data.x_train, data.y_train),
        (data.x_test, data.y_test),
        k=20,
        embedding_fn=model.backbone,
    )
    before = knn.evaluate()
    print(f"{algorithm}: kNN accuracy before training {before:.3f}")
    history = model.fit(views, epochs=EPOCHS, callbacks=[knn], verbose=2)
    return model, before, history.history


results = {algorithm: train(algorithm) for algorithm in ALGORITHMS}""",
    ),
    (
        "markdown",
        """## Loss and kNN accuracy

Epoch 0 is the randomly initialised network. On 8x8 digits, random convolutional features
are already strong (about 95% kNN accuracy), and three epochs on two CPU cores do not beat
them: this notebook shows the mechanics (the loss, `proj_std` staying away from 0, i.e. no
collapse, and the kNN accuracy tracked per epoch), not what self-supervised learning
achieves with larger images and hundreds of epochs, a job for `tfsim train` on a GPU. The
losses are on different scales (SimSiam's is a negative cosine similarity, at least -1;
SimCLR's a cross-entropy).""",
    ),
    (
        "code",
        """figure, (loss_axis, knn_axis) = plt.subplots(1, 2, figsize=(10, 3.5))
for algorithm, (_, before, history) in results.items():
    epochs = np.arange(1, len(history["loss"]) + 1)
    loss_axis.plot(epochs, history["loss"], marker="o", label=algorithm)
    knn_axis.plot(
        np.arange(0, len(epochs) + 1),
        [before, *history["knn_accuracy"]],
        marker="o",
        label=algorithm,
    )
loss_axis.set(title="training loss", xlabel="epoch", yscale="symlog")
knn_axis.set(title="kNN accuracy (test digits)", xlabel="epoch (0: before training)")
loss_axis.legend()
knn_axis.legend()
plt.show()
for algorithm, (_, before, history) in results.items():
    print(f"{algorithm:8s} kNN accuracy {before:.3f} -> {history['knn_accuracy'][-1]:.3f}")""",
    ),
    (
        "markdown",
        """## The embeddings in 2-D

A PCA projection of the backbone's embeddings of the test digits, coloured by their (unseen)
labels.""",
    ),
    (
        "code",
        """def pca_2d(x):
    x = x - x.mean(axis=0)
    _, _, components = np.linalg.svd(x, full_matrices=False)
    return x @ components[:2].T


embeddings = {a: m.embed(data.x_test) for a, (m, _, _) in results.items()}
figure, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4.2))
for axis, (algorithm, emb) in zip(np.atleast_1d(axes), embeddings.items()):
    points = pca_2d(emb)
    scatter = axis.scatter(points[:, 0], points[:, 1], c=data.y_test, cmap="tab10", s=8)
    axis.set(title=f"{algorithm}: test embeddings (PCA)")
figure.colorbar(scatter, ax=axes, label="digit")
plt.show()""",
    ),
    (
        "markdown",
        """## Nearest neighbours

For a few test digits (left column), the five most similar training digits by cosine
similarity of the SimSiam embeddings, with their labels.""",
    ),
    (
        "code",
        """model = results["simsiam"][0]
train_emb = tf.math.l2_normalize(model.embed(data.x_train), axis=1).numpy()
test_emb = tf.math.l2_normalize(embeddings["simsiam"], axis=1).numpy()
queries = np.random.default_rng(0).choice(len(data.x_test), size=6, replace=False)
neighbours = np.argsort(-test_emb[queries] @ train_emb.T, axis=1)[:, :5]

figure, axes = plt.subplots(len(queries), 6, figsize=(6, 1.2 * len(queries)))
for row, (query, found) in enumerate(zip(queries, neighbours)):
    axes[row, 0].imshow(data.x_test[query])
    axes[row, 0].set_title(f"query {data.y_test[query]}", fontsize=8)
    for column, index in enumerate(found, start=1):
        axes[row, column].imshow(data.x_train[index])
        axes[row, column].set_title(str(data.y_train[index]), fontsize=8)
for axis in axes.flat:
    axis.axis("off")
plt.tight_layout()
plt.show()""",
    ),
    (
        "markdown",
        """## Next

* The same job from the command line, with more options, plots and resumable training:
  `tfsim train --help`.
* Why synchronised batch norm matters, and how to add it to any Keras model:
  `sync_batchnorm.ipynb`.
* Several machines: `multi_worker.md`.""",
    ),
]

SYNC_BATCHNORM = [
    (
        "markdown",
        """# Synchronised batch norm

Under `tf.distribute`, each replica runs batch norm on its own share of the global batch.
With 8 GPUs and a global batch of 256, every batch-norm layer normalises with the mean and
variance of only 32 images, and the smaller the per-replica batch, the noisier these
statistics are. Self-supervised methods (SimCLR, BYOL, Barlow Twins, SimSiam) and detection
models are known to suffer from it; their papers synchronise batch norm across replicas.

This notebook shows

1. how per-replica statistics drift from the global ones as the per-replica batch shrinks,
2. how to convert any `keras.applications` model with `convert_sync_batchnorm`,
3. that a synchronised model trained on 4 replicas takes exactly the step of one device
   holding the whole batch,
4. custom plugins: group synchronisation and your own selection of layers,
5. how to revert to plain batch norm for export.

It runs on 4 logical CPU devices, so no GPU is needed.""",
    ),
    (
        "code",
        PARAMETERS_NOTE
        + """import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
SMALL = os.environ.get("TFSIM_EXAMPLE_SMALL") == "1"
REPLICAS = 4
IMAGE_SIZE = 32
GLOBAL_BATCH = 32

import tensorflow as tf

# Logical devices must be declared before TensorFlow starts its runtime.
cpu = tf.config.list_physical_devices("CPU")[0]
logical_devices = [tf.config.LogicalDeviceConfiguration()] * REPLICAS
tf.config.set_logical_device_configuration(cpu, logical_devices)""",
    ),
    (
        "code",
        """import keras
import matplotlib.pyplot as plt
import numpy as np

from tensorflow_similarity.data import load_data
from tensorflow_similarity.distribute import (
    GroupSyncBatchNorm,
    SyncBatchNormPlugin,
    convert_sync_batchnorm,
    revert_sync_batchnorm,
)
from tensorflow_similarity.layers import SyncBatchNormalization

keras.utils.set_random_seed(0)
strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
print("replicas in sync:", strategy.num_replicas_in_sync)
data = load_data("digits", image_size=IMAGE_SIZE, seed=0, limit=600 if SMALL else None)""",
    ),
    (
        "markdown",
        """## 1. Per-replica statistics as the per-replica batch shrinks

Take one global batch of 256 digits and one feature (the mean intensity of each image).
Split the batch over more and more replicas: each replica's mean and variance of the
feature is what plain batch norm would use. The dots are the replicas' values; the line is
the global batch's, which is what `SyncBatchNormalization` uses however many replicas
there are.""",
    ),
    (
        "code",
        """feature = data.x_train[:256].mean(axis=(1, 2, 3))
sizes = [256, 128, 64, 32, 16, 8, 4, 2]
figure, axes = plt.subplots(1, 2, figsize=(10, 3.5))
for axis, statistic, name in zip(axes, (np.mean, np.var), ("mean", "variance")):
    for size in sizes:
        per_replica = statistic(feature.reshape(-1, size), axis=1)
        axis.scatter(np.full(len(per_replica), size), per_replica, s=6, alpha=0.5, c="C0")
    axis.axhline(statistic(feature), color="C3", label="global batch (synchronised)")
    axis.set(xscale="log", xlabel="images per replica", title=f"per-replica {name}")
    axis.set_xticks(sizes, [str(s) for s in sizes])
    axis.legend()
plt.show()
for size in (32, 8, 2):
    spread = np.var(feature.reshape(-1, size), axis=1)
    print(
        f"{size:3d} images per replica: variance from {spread.min():.4f} to "
        f"{spread.max():.4f} (global {np.var(feature):.4f})"
    )""",
    ),
    (
        "markdown",
        """## 2. Converting a `keras.applications` model

`convert_sync_batchnorm` rebuilds a Functional or Sequential model with every
`BatchNormalization` replaced by `SyncBatchNormalization`, keeping all weights, names,
`trainable` flags and dtype policies. Call it inside `strategy.scope()` so that the copy's
variables are mirrored.""",
    ),
    (
        "code",
        """def count(model, cls):
    return sum(isinstance(layer, cls) for layer in model.layers)


with strategy.scope():
    base = keras.applications.MobileNet(
        input_shape=(IMAGE_SIZE, IMAGE_SIZE, 3),
        alpha=0.25,
        weights=None,
        include_top=False,
        pooling="avg",
    )
    synced = convert_sync_batchnorm(base)

print("plain BatchNormalization:", count(base, keras.layers.BatchNormalization))
print("after conversion, SyncBatchNormalization:", count(synced, SyncBatchNormalization))
same = all(np.array_equal(a, b) for a, b in zip(base.get_weights(), synced.get_weights()))
print("weights kept:", same)""",
    ),
    (
        "markdown",
        """## 3. The parity check: 4 replicas = 1 device

Run the converted MobileNet in training mode on a global batch of 32 digits split over the 4
replicas (8 each), and compare with the same model with plain batch norm on one device fed
the 32 digits at once: the features it computes, and the moving statistics the batch norms
update. With synchronised batch norm they agree up to float32 round-off (amplified to about
1e-4 through the 27 normalised layers of a random network); with per-replica batch norm the
features are different altogether. (The test suite also checks whole training steps,
gradients included, against one device.)""",
    ),
    (
        "code",
        """x, y = data.x_train[:GLOBAL_BATCH], data.y_train[:GLOBAL_BATCH]
per_replica = GLOBAL_BATCH // REPLICAS


def moving_statistics(model):
    return [w.numpy() for w in model.non_trainable_weights]


def forward_on_replicas(model):
    shards = strategy.experimental_distribute_values_from_function(
        lambda context: x[context.replica_id_in_sync_group * per_replica :][:per_replica]
    )

    @tf.function
    def step(inputs):
        return strategy.run(lambda images: model(images, training=True), args=(inputs,))

    return np.concatenate(strategy.experimental_local_results(step(shards)))


reference = revert_sync_batchnorm(synced)  # one device, plain batch norm
reference_features = reference(x, training=True).numpy()
with strategy.scope():
    runs = {
        "synchronised batch norm": convert_sync_batchnorm(base),
        "per-replica batch norm": revert_sync_batchnorm(synced),
    }
scale = np.abs(reference_features).max()
for name, model in runs.items():
    features = forward_on_replicas(model)
    statistics = max(
        float(np.max(np.abs(a - b)))
        for a, b in zip(moving_statistics(model), moving_statistics(reference))
    )
    print(
        f"4 replicas, {name:24s} features: max |difference| / max |feature| = "
        f"{np.abs(features - reference_features).max() / scale:.1e}; "
        f"moving statistics: max |difference| = {statistics:.1e}"
    )""",
    ),
    (
        "markdown",
        """## 4. Custom plugins

A `SyncBatchNormPlugin` decides which layers are converted (`should_convert`) and what
replaces them (`create_layer`). `GroupSyncBatchNorm(g)` synchronises groups of `g`
consecutive replicas: for example the GPUs of one machine, when the network between
machines is slow. Below, replica `r` holds values around `r`: all-replica sync normalises
everyone with the global mean 1.5, groups of two with 0.5 (replicas 0 and 1) and 2.5
(replicas 2 and 3), plain batch norm with each replica's own mean.""",
    ),
    (
        "code",
        """per_replica_inputs = [
    np.float32(r) + np.random.default_rng(r).normal(0, 0.1, (8, 1)).astype("float32")
    for r in range(REPLICAS)
]


def normalised_means(layer):
    values = strategy.experimental_distribute_values_from_function(
        lambda context: per_replica_inputs[context.replica_id_in_sync_group]
    )

    @tf.function
    def step(inputs):
        return strategy.run(lambda v: layer(v, training=True), args=(inputs,))

    outputs = strategy.experimental_local_results(step(values))
    # Output = (v - mean) / sqrt(variance + eps): recover the mean each replica subtracted.
    return [
        float(np.mean(v) - np.mean(o) * np.std(v) / np.std(o))
        for v, o in zip(per_replica_inputs, outputs)
    ]


with strategy.scope():
    layers = {
        "all replicas": SyncBatchNormPlugin().create_layer(center=False, scale=False),
        "groups of 2": GroupSyncBatchNorm(2).create_layer(center=False, scale=False),
        "per replica": keras.layers.BatchNormalization(center=False, scale=False),
    }
    for layer in layers.values():
        layer.build((None, 1))
for name, layer in layers.items():
    print(f"{name:13s} mean used by replicas 0..3:", np.round(normalised_means(layer), 2))""",
    ),
    (
        "markdown",
        """A plugin of your own: keep the stem's batch norm per replica (say, to save one
all-reduce on a layer with very large activations) and synchronise all the others.""",
    ),
    (
        "code",
        """class KeepStemLocal(SyncBatchNormPlugin):
    def should_convert(self, layer):
        return super().should_convert(layer) and layer.name != "conv1_bn"


with strategy.scope():
    partly = convert_sync_batchnorm(base, plugin=KeepStemLocal())
kinds = {
    layer.name: type(layer).__name__
    for layer in partly.layers
    if isinstance(layer, keras.layers.BatchNormalization)
}
synchronised = sum(kind == "SyncBatchNormalization" for kind in kinds.values())
print("conv1_bn:", kinds["conv1_bn"])
print("synchronised:", synchronised, "of", len(kinds))""",
    ),
    (
        "markdown",
        """## 5. Reverting for export

For single-device inference or serving, `revert_sync_batchnorm` turns every
`SyncBatchNormalization` back into a plain `keras.layers.BatchNormalization` with the same
weights, so the saved model needs nothing but Keras. In inference the two compute the
same thing.""",
    ),
    (
        "code",
        """import tempfile


def all_layers(model):
    for layer in model.layers:
        yield layer
        if isinstance(layer, keras.Model):
            yield from all_layers(layer)


synced_model = runs["synchronised batch norm"]
exported = revert_sync_batchnorm(synced_model)
left = sum(isinstance(layer, SyncBatchNormalization) for layer in all_layers(exported))
print("SyncBatchNormalization layers left:", left)
path = os.path.join(tempfile.mkdtemp(), "classifier.keras")
exported.save(path)
reloaded = keras.saving.load_model(path)
difference = np.max(np.abs(reloaded.predict(x, verbose=0) - synced_model.predict(x, verbose=0)))
print(f"inference difference after revert, save and load: {difference:.1e}")""",
    ),
]

SUPERVISED_HELLO_WORLD = [
    (
        "markdown",
        """# Supervised similarity learning, hello world

This notebook is the 0.17 "hello world" (which used MNIST) on scikit-learn's handwritten
digits (1,797 real 8x8 images, shipped with scikit-learn, so no download). It trains a
`ResNet18Sim` with **labels** and a metric loss, so that images of the same class get
nearby embeddings, then uses the model as 0.17 users did: it indexes examples, looks up
nearest neighbours, calibrates a distance threshold and matches new images to classes.

As 0.17's notebook did, it trains on **6 of the 10 classes** and keeps 4 out: the index and
the evaluation contain all 10, so we can see how well the learned similarity carries over to
classes the model never saw.

Training runs under `tf.distribute.MirroredStrategy` with synchronised batch norm: over two
*logical* CPU devices without a GPU (a few minutes on two CPU cores), over all GPUs with
them.""",
    ),
    (
        "code",
        PARAMETERS_NOTE
        + """import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
SMALL = os.environ.get("TFSIM_EXAMPLE_SMALL") == "1"

REPLICAS = 2  # logical CPU devices when there is no GPU
IMAGE_SIZE = 8  # the digits' own resolution keeps a full-width ResNet-18 fast on CPUs
LIMIT = 400 if SMALL else None  # number of images used (None: all 1,797)
EPOCHS = 1 if SMALL else 4
STEPS_PER_EPOCH = 3 if SMALL else 20
TRAIN_CLASSES = [0, 1, 2, 3, 4, 5]  # digits 6 to 9 are never trained on
CLASSES_PER_BATCH = 6
EXAMPLES_PER_CLASS = 8  # a global batch of 6 x 8 = 48 images, 24 per replica

import tensorflow as tf  # noqa: E402 (after TF_CPP_MIN_LOG_LEVEL is set)

# Logical devices must be declared before TensorFlow starts its runtime.
if not tf.config.list_physical_devices("GPU"):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * REPLICAS
    )""",
    ),
    (
        "code",
        """import keras
import matplotlib.pyplot as plt
import numpy as np

from tensorflow_similarity.architectures import ResNet18Sim
from tensorflow_similarity.callbacks import EvalCallback
from tensorflow_similarity.data import load_data
from tensorflow_similarity.losses import MultiSimilarityLoss
from tensorflow_similarity.retrieval_metrics import MapAtK, PrecisionAtK, RecallAtK
from tensorflow_similarity.samplers import MultiShotMemorySampler
from tensorflow_similarity.visualization import confusion_matrix, projector, viz_neighbors_imgs

keras.utils.set_random_seed(0)
devices = [d.name for d in tf.config.list_logical_devices("GPU")] or [
    d.name for d in tf.config.list_logical_devices("CPU")
]
strategy = tf.distribute.MirroredStrategy(devices)
print("replicas in sync:", strategy.num_replicas_in_sync)""",
    ),
    (
        "markdown",
        """## The data

`load_data("digits")` splits each class 80/20 into train and test images. The model trains
on the training images of digits 0 to 5 only. The test images (all 10 digits) are split in
two halves: a **calibration** half, to choose the distance threshold of `match`, and an
**evaluation** half, the queries of every number reported below.""",
    ),
    (
        "code",
        """data = load_data("digits", image_size=IMAGE_SIZE, seed=0, limit=LIMIT)
names = data.class_names
seen = np.isin(data.y_train, TRAIN_CLASSES)
x_fit, y_fit = data.x_train[seen], data.y_train[seen]

order = np.random.default_rng(0).permutation(len(data.y_test))
x_cal, y_cal = data.x_test[order[::2]], data.y_test[order[::2]]
x_eval, y_eval = data.x_test[order[1::2]], data.y_test[order[1::2]]
known = np.isin(y_eval, TRAIN_CLASSES)
print(data.source)
print("train", data.x_train.shape, "of which trained on", x_fit.shape)
print("calibration", x_cal.shape, "evaluation", x_eval.shape,
      f"({known.sum()} of seen classes, {(~known).sum()} of unseen ones)")""",
    ),
    (
        "markdown",
        """## The model, the sampler and the loss

`ResNet18Sim` is a ResNet-18 with 0.17's head: GeM pooling, then an L2-normalised
`MetricEmbedding` of 64 dimensions; `sync_bn=True` makes its batch norms
`SyncBatchNormalization`, which normalise with the statistics of the global batch.

A metric loss needs positives in every batch: `MultiShotMemorySampler` draws each batch as
6 classes times 8 images of each. `MultiSimilarityLoss` (Wang et al., 2019) pulls the
hardest positives together and pushes the hardest negatives apart; under the strategy, it
mines pairs over the **global** batch, as one device holding all 48 images would.

`EvalCallback` indexes the training images of all 10 classes after each epoch and looks up
the evaluation queries, split into seen ("known") and unseen ("unknown") classes: recall@1
is the fraction of queries whose nearest indexed image has their class.""",
    ),
    (
        "code",
        """sampler = MultiShotMemorySampler(
    x_fit,
    y_fit,
    classes_per_batch=CLASSES_PER_BATCH,
    examples_per_class_per_batch=EXAMPLES_PER_CLASS,
    steps_per_epoch=STEPS_PER_EPOCH,
    seed=0,
)
with strategy.scope():
    model = ResNet18Sim((IMAGE_SIZE, IMAGE_SIZE, 3), embedding_size=64, sync_bn=True)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3), loss=MultiSimilarityLoss(), distance="cosine"
    )

evaluation = EvalCallback(
    x_eval,
    y_eval,
    data.x_train,
    data.y_train,
    known_classes=TRAIN_CLASSES,
    retrieval_metrics=[RecallAtK(k=1), RecallAtK(k=5)],
)
evaluation.set_model(model)
before = evaluation.evaluate()  # the randomly initialised network
print({name: round(value, 3) for name, value in before.items()})""",
    ),
    (
        "markdown",
        """## Training""",
    ),
    (
        "code",
        """fit = model.fit(sampler, epochs=EPOCHS, callbacks=[evaluation], verbose=2)
history = fit.history""",
    ),
    (
        "markdown",
        """## Training curves

The loss, and recall@1 of the evaluation queries against the training images, for seen and
unseen classes; epoch 0 is the randomly initialised network.""",
    ),
    (
        "code",
        """epochs = np.arange(0, EPOCHS + 1)
figure, (loss_axis, recall_axis) = plt.subplots(1, 2, figsize=(10, 3.5))
loss_axis.plot(epochs[1:], history["loss"], marker="o")
loss_axis.set(title="MultiSimilarityLoss", xlabel="epoch")
for split in ["known", "unknown"]:
    name = f"recall@1_{split}_classes"
    recall_axis.plot(epochs, [before[name], *history[name]], marker="o", label=f"{split} classes")
recall_axis.set(title="recall@1 (evaluation queries)", xlabel="epoch (0: before training)")
recall_axis.legend()
plt.show()
for split in ["known", "unknown"]:
    name = f"recall@1_{split}_classes"
    print(f"recall@1, {split + ' classes':15s} {before[name]:.3f} -> {history[name][-1]:.3f}")""",
    ),
    (
        "markdown",
        """## Indexing and looking up

`model.index` embeds the training images of all 10 classes and stores them with their labels
and, as `data`, the images themselves, so that a lookup can show them. `model.lookup` returns
each query's nearest indexed images, nearest first; `viz_neighbors_imgs` draws them, titled
with their class and cosine distance, in red when the class differs from the query's.""",
    ),
    (
        "code",
        """model.index(data.x_train, data.y_train, data=data.x_train)
examples = [np.flatnonzero(y_eval == digit)[0] for digit in (1, 4, 7, 9)]  # 2 seen, 2 unseen
neighbours = model.lookup(x_eval[examples], k=5)
mapping = dict(enumerate(names))
for example, found in zip(examples, neighbours, strict=True):
    viz_neighbors_imgs(x_eval[example], y_eval[example], found, mapping, fig_size=(9, 1.8))""",
    ),
    (
        "markdown",
        """## Retrieval metrics

`evaluate_retrieval` looks up each query in the index and scores its neighbours: recall@k
(a neighbour of the query's class among the k nearest), precision@k (the fraction of the k
that are) and mAP@k. Seen and unseen classes separately.""",
    ),
    (
        "code",
        """metrics = [RecallAtK(k=1), RecallAtK(k=5), PrecisionAtK(k=5), MapAtK(k=5)]
retrieval = {}
for split, mask in [("seen classes", known), ("unseen classes", ~known)]:
    print(split)
    retrieval[split] = model.evaluate_retrieval(x_eval[mask], y_eval[mask], metrics)""",
    ),
    (
        "markdown",
        """## Calibration and matching

`match` assigns a query the class of its nearest indexed image, but only within a distance
threshold: farther queries get `no_match_label` (-1), "not something I know".
`calibrate` chooses the threshold on the calibration half: the `"optimal"` one maximises F1
(`thresholds_targets={"name": value}` would add cutpoints at target F1 values).""",
    ),
    (
        "code",
        """calibration = model.calibrate(
    x_cal,
    y_cal,
    extra_metrics=["precision", "recall", "binary_accuracy"],
    verbose=1,
)
matches = np.asarray(model.match(x_eval, cutpoint="optimal"))
threshold = calibration.cutpoints["optimal"]["distance"]
print(f"optimal distance threshold {threshold:.3f}")
for split, mask in [("seen classes", known), ("unseen classes", ~known)]:
    print(f"{split:15s} matched correctly {np.mean(matches[mask] == y_eval[mask]):.3f}, "
          f"no match {np.mean(matches[mask] == -1):.3f}")
confusion_matrix(matches, y_eval, labels=names, title="match(x_eval): confusion matrix")""",
    ),
    (
        "markdown",
        """## The embeddings in 2-D

`projector` draws a PCA projection of the evaluation queries' embeddings, one colour per
class, seen and unseen.""",
    ),
    (
        "code",
        """figure, _ = projector(model.predict(x_eval, verbose=0), y_eval, class_mapping=names,
                      plot_size=5.5, title="evaluation embeddings (PCA)")""",
    ),
    (
        "markdown",
        """## What the numbers show

Read the numbers printed above, all computed in this notebook, against epoch 0, the
randomly initialised network. Random ResNet-18 features are already strong on clean 8x8
digits: before training, the nearest training image of a test digit has its class most of
the time, for seen and unseen classes alike. In the run stored here, a few epochs of
`MultiSimilarityLoss` on the 6 training classes did **not** beat that: the loss fell
quickly towards 0 (the network separates the training classes' pairs), while recall@1 of
the test queries went down, a little for the seen classes and more for the unseen ones, the
embedding specialising to the classes it was trained on. So this small run shows the
workflow (sampler, loss, distributed training, index, lookup, calibration, matching,
evaluation), not a gain over random features; whether training helps has to be measured, as
here, against the untrained network, on data harder than these digits.

## Next

* Save the model with its index: `model.save("model.keras")`, then
  `keras.saving.load_model("model.keras")` and `model.load_index("model.keras")`.
* Self-supervised training, without labels: `unsupervised_hello_world.ipynb` and
  `tfsim train --help`.""",
    ),
]

NOTEBOOKS = {
    "unsupervised_hello_world.ipynb": HELLO_WORLD,
    "sync_batchnorm.ipynb": SYNC_BATCHNORM,
    "supervised_hello_world.ipynb": SUPERVISED_HELLO_WORLD,
}


def build(cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    """Returns a notebook (without outputs) made of `(kind, source)` cells."""
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {
        "display_name": "Python 3",
        "language": "python",
        "name": "python3",
    }
    notebook.metadata["language_info"] = {"name": "python"}
    make = {"markdown": nbformat.v4.new_markdown_cell, "code": nbformat.v4.new_code_cell}
    notebook.cells = [make[kind](source) for kind, source in cells]
    for index, cell in enumerate(notebook.cells):
        cell["id"] = f"cell-{index}"
    return notebook


# TensorFlow's C++ start-up lines, strategy INFO logs and Keras' dataset-shuffle notice: noise
# that depends on the machine, not on the example.
_LOG_NOISE = re.compile(
    r"^(WARNING: All log messages before absl|[IWE]\d{4} |INFO:tensorflow:|.*UserWarning: "
    r"`shuffle=True` was passed|\s+self\.data_adapter = )"
)


def drop_log_noise(notebook: nbformat.NotebookNode) -> None:
    """Removes TensorFlow's log lines from the notebook's text outputs, in place."""
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                lines = output["text"].splitlines(keepends=True)
                output["text"] = "".join(
                    line for line in lines if line.strip() and not _LOG_NOISE.match(line)
                )
                if not output["text"]:
                    continue
            kept.append(output)
        cell["outputs"] = kept


def execute(notebook: nbformat.NotebookNode, timeout: int = 1800, small: bool = False) -> None:
    """Runs `notebook` in place with a fresh Python kernel (the current interpreter)."""
    from nbclient import NotebookClient

    env_small = os.environ.get("TFSIM_EXAMPLE_SMALL")
    os.environ["TFSIM_EXAMPLE_SMALL"] = "1" if small else "0"
    try:
        NotebookClient(
            notebook,
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(EXAMPLES)}},
        ).execute()
    finally:
        if env_small is None:
            os.environ.pop("TFSIM_EXAMPLE_SMALL", None)
        else:
            os.environ["TFSIM_EXAMPLE_SMALL"] = env_small


def main(argv: list[str] | None = None) -> int:
    """Writes (and with `--execute`, runs) every notebook."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--execute", action="store_true", help="run them and keep the outputs")
    parser.add_argument("--only", help="build only this notebook (file name)")
    args = parser.parse_args(argv)
    for name, cells in NOTEBOOKS.items():
        if args.only and name != args.only:
            continue
        notebook = build(cells)
        if args.execute:
            print(f"running {name} ...", file=sys.stderr, flush=True)
            execute(notebook)
            drop_log_noise(notebook)
        nbformat.write(notebook, EXAMPLES / name)
        print(f"wrote {EXAMPLES / name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
