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

This notebook trains a quarter-width ResNet-18 **without labels** on glyphs: letters and
digits drawn in the 22 fonts matplotlib ships (2,626 images of 143 Latin, Greek and Cyrillic
characters at 16x16, drawn on first use, so no download), with SimCLR, under
`tf.distribute.MirroredStrategy` with **synchronised batch norm**. It then measures how good
the embeddings are with the labels it never saw: the weighted k-nearest-neighbour (kNN)
accuracy of held-out fonts, beside two references computed here, the randomly initialised
network and the raw pixels (which any learnt embedding should beat), then a 2-D projection
and the nearest neighbours of a few Greek and Cyrillic letters.

The settings are `tfsim train`'s defaults on glyphs: SimCLR (SimSiam, the job's choice on
other data, collapses on glyphs), views by `GlyphAugmenter`, Adam at 1e-3 with a cosine
decay, a global batch of 128, a ResNet-18 with a quarter of its filters (16 to 128), 30
epochs. Without a GPU, the strategy runs over two *logical*
CPU devices, so everything here also runs on a laptop: several minutes on two CPU cores. With
GPUs, it uses all of them.""",
    ),
    (
        "code",
        PARAMETERS_NOTE
        + """import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
SMALL = os.environ.get("TFSIM_EXAMPLE_SMALL") == "1"

REPLICAS = 2  # logical CPU devices when there is no GPU
IMAGE_SIZE = 16  # glyphs' size in `tfsim train`
WIDTH = 0.25  # ResNet-18's filters x 0.25 (16 to 128), as `tfsim train` on glyphs
EPOCHS = 1 if SMALL else 30
LIMIT = 400 if SMALL else None  # number of images used (None: all 2,626)
GLOBAL_BATCH = 64 if SMALL else 128
LEARNING_RATE = 1e-3  # Adam's, decayed to 0 along a cosine over the run

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
from tensorflow_similarity.augmenters import GlyphAugmenter
from tensorflow_similarity.callbacks import BatchNormStatistics, KNNAccuracy
from tensorflow_similarity.datasets import load_data
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
        """## The data and its views

`load_data("glyphs")` draws each character in each font that has it (the Latin ones in all
22 fonts, Greek and Cyrillic in the 16 DejaVu and STIX ones), makes the images RGB in
`[0, 1]` and splits each class 80/20 into train and test images, deterministically from the
seed: a test image is its character in a font that the class's training images do not
include. Look-alikes are one class, named by all its characters (Latin A, Greek Alpha and
Cyrillic A are "A Α А"). Only the training images are used for learning, and without their
labels; the labels serve the evaluation.

SimCLR learns to give two *views* of an image nearby embeddings, and those of other images
distant ones. Crops, flips and colour jitter suit photographs, not characters: a mirrored
letter is another letter, or none. `GlyphAugmenter` draws each view by a random affine warp
(rotation, scale, shear, shift) and a random stroke width. Below, a few training images and
two views of each.""",
    ),
    (
        "code",
        """data = load_data("glyphs", image_size=IMAGE_SIZE, seed=0, limit=LIMIT)
names = data.class_names
print(data.source)
print("train", data.x_train.shape, "test", data.x_test.shape, f"{data.num_classes} classes")

augmenter = GlyphAugmenter(IMAGE_SIZE, seed=0)
shown = np.random.default_rng(0).choice(len(data.x_train), size=8, replace=False)
view1, view2 = GlyphAugmenter(IMAGE_SIZE, seed=1)(data.x_train[shown])
figure, axes = plt.subplots(3, len(shown), figsize=(8, 3.2))
for column, index in enumerate(shown):
    axes[0, column].set_title(names[data.y_train[index]], fontsize=9)
    for row, images in enumerate((data.x_train[shown], view1.numpy(), view2.numpy())):
        axes[row, column].imshow(images[column])
for axis in axes.flat:
    axis.axis("off")
axes[0, 0].text(-0.5, 0.5, "image", transform=axes[0, 0].transAxes, ha="right", va="center")
axes[1, 0].text(-0.5, 0.5, "view 1", transform=axes[1, 0].transAxes, ha="right", va="center")
axes[2, 0].text(-0.5, 0.5, "view 2", transform=axes[2, 0].transAxes, ha="right", va="center")
plt.show()""",
    ),
    (
        "markdown",
        """## Training

`ResNet18Sim(sync_bn=True)` builds the backbone with `SyncBatchNormalization` layers, and
`create_contrastive_model(..., sync_bn=True)` adds SimCLR's projector, also with synchronised
batch norm. Under the strategy, every batch-norm layer normalises with the statistics of the
**global** batch, as one device holding the whole batch would; SimCLR's loss also takes its
negatives from the global batch.

`KNNAccuracy` embeds the train and test images after each epoch and logs the kNN accuracy
(k=20, cosine similarity) over all 143 classes, for two sets of queries, as `tfsim train`
does: the test images themselves (their characters in fonts the training images of their
class do not include), and **augmented** test images, one fixed `GlyphAugmenter` view of
each (warped and re-stroked): invariance to these is what SimCLR's objective teaches
directly. Both are measured before training too, and for the raw pixels (the flattened
images, compared the same way). `proj_std` watches for collapse: it falls to 0 if every
image gets the same embedding.

Before each evaluation the backbone's batch norm statistics are recomputed from the training
images (the `BatchNormStatistics` callback, as `tfsim train` does): Keras' moving averages
(momentum 0.99) mix the statistics of a hundred or so past steps, of augmented views, while
the weights kept changing; the evaluation uses those of the clean images through the
network as it is.""",
    ),
    (
        "code",
        """steps_per_epoch = len(data.x_train) // GLOBAL_BATCH
views = (
    tf.data.Dataset.from_tensor_slices(data.x_train)
    .shuffle(len(data.x_train), seed=0)
    .batch(GLOBAL_BATCH, drop_remainder=True)
    .map(augmenter)
    .prefetch(2)
)
with strategy.scope():
    backbone = ResNet18Sim(
        (IMAGE_SIZE, IMAGE_SIZE, 3), include_top=False, pooling="avg", sync_bn=True, width=WIDTH
    )
    model = create_contrastive_model(
        backbone,
        "simclr",
        projector_hidden_dim=512,
        projector_output_dim=512,
        sync_bn=True,
    )
    schedule = keras.optimizers.schedules.CosineDecay(
        LEARNING_RATE, decay_steps=EPOCHS * steps_per_epoch
    )
    model.compile(optimizer=keras.optimizers.Adam(schedule))

# One view of each test image, drawn once (its own seed: not a view training draws).
augmented_test = GlyphAugmenter(IMAGE_SIZE, seed=2)(data.x_test, step=0)[0].numpy()
train_set = (data.x_train, data.y_train)
queries = {"test images": data.x_test, "augmented test images": augmented_test}
knn = {
    name: KNNAccuracy(
        train_set,
        (images, data.y_test),
        k=20,
        embedding_fn=model.backbone,
        name="knn_accuracy" + ("_augmented" if name.startswith("augmented") else ""),
    )
    for name, images in queries.items()
}
to_pixels = lambda images: images.reshape(len(images), -1)
pixels = {
    name: KNNAccuracy(train_set, (images, data.y_test), k=20, embedding_fn=to_pixels).evaluate()
    for name, images in queries.items()
}
before = {name: callback.evaluate() for name, callback in knn.items()}
for name in queries:
    print(f"kNN accuracy, {name:21s} raw pixels {pixels[name]:.3f}, "
          f"untrained network {before[name]:.3f}")

# A few classes, Latin and not, whose embeddings are drawn in 2-D below, before and after.
projected = [n for n in ("A Α А", "g", "3", "λ", "Ω", "Ж", "ю", "ф") if n in names]
projected_mask = np.isin(data.y_train, [names.index(n) for n in projected])
projected_before = model.backbone.predict(data.x_train[projected_mask], verbose=0)

# First, so that the kNN callbacks see the network with its recomputed statistics.
callbacks = [BatchNormStatistics(backbone, data.x_train), *knn.values()]
history = model.fit(views, epochs=EPOCHS, callbacks=callbacks, verbose=2).history""",
    ),
    (
        "markdown",
        """## Loss and kNN accuracy

Epoch 0 is the randomly initialised network; the dashed lines are the raw pixels'.""",
    ),
    (
        "code",
        """figure, (loss_axis, knn_axis) = plt.subplots(1, 2, figsize=(12, 3.5))
epochs = np.arange(1, len(history["loss"]) + 1)
loss_axis.plot(epochs, history["loss"], marker="o")
loss_axis.set(title="SimCLR loss", xlabel="epoch")
after = {name: history[callback.name][-1] for name, callback in knn.items()}
for colour, (name, callback) in zip(("C0", "C1"), knn.items(), strict=True):
    knn_axis.plot(np.arange(0, len(epochs) + 1), [before[name], *history[callback.name]],
                  marker="o", color=colour, label=name)
    knn_axis.axhline(pixels[name], color=colour, linestyle="--", label=f"{name}, raw pixels")
knn_axis.set(title="kNN accuracy (143 classes)", xlabel="epoch (0: before training)")
knn_axis.legend(fontsize="small", loc="center left", bbox_to_anchor=(1, 0.5))
plt.show()
print(f"{'kNN accuracy':22s} {'raw pixels':>10s} {'untrained':>10s} {'trained':>10s}")
for name in queries:
    print(f"{name:22s} {pixels[name]:10.3f} {before[name]:10.3f} {after[name]:10.3f}")""",
    ),
    (
        "markdown",
        """## The embeddings in 2-D

A PCA projection of the backbone's embeddings of the training images of a few classes,
Latin, Greek and Cyrillic, before and after training, coloured by their (unused) labels.""",
    ),
    (
        "code",
        """def pca_2d(x):
    x = x - x.mean(axis=0)
    _, _, components = np.linalg.svd(x, full_matrices=False)
    return x @ components[:2].T


projected_after = model.backbone.predict(data.x_train[projected_mask], verbose=0)
labels = data.y_train[projected_mask]
figure, axes = plt.subplots(1, 2, figsize=(10, 4.2))
for axis, embeddings, when in zip(
    axes, (projected_before, projected_after), ("before", "after"), strict=True
):
    points = pca_2d(embeddings)
    for name in projected:
        mask = labels == names.index(name)
        axis.scatter(points[mask, 0], points[mask, 1], s=14, label=name)
    axis.set(title=f"{when} training (PCA)", xticks=[], yticks=[])
axes[1].legend(loc="center left", bbox_to_anchor=(1, 0.5))
plt.tight_layout()
plt.show()""",
    ),
    (
        "markdown",
        """## Nearest neighbours

For a few Greek and Cyrillic test images (left column), the five most similar training
images by cosine similarity, with the trained network's embeddings (first row of each pair)
and with the raw pixels (second row). A neighbour's title is its class, in red when it is
not the query's.""",
    ),
    (
        "code",
        """def nearest(index_vectors, query_vectors, k=5):
    index_vectors = index_vectors / np.linalg.norm(index_vectors, axis=1, keepdims=True)
    query_vectors = query_vectors / np.linalg.norm(query_vectors, axis=1, keepdims=True)
    return np.argsort(-query_vectors @ index_vectors.T, axis=1)[:, :k]


# The first test image of four Greek and Cyrillic classes (any unseen ones in a small run).
wanted = [names.index(n) for n in ("λ", "Ж", "Ω", "ю")]
queries = [i for c in wanted for i in np.flatnonzero(data.y_test == c)[:1]]
queries = queries or list(np.flatnonzero(data.y_test >= data.seen_classes)[:4])
flat = lambda images: images.reshape(len(images), -1)
found = {
    "network": nearest(
        model.backbone.predict(data.x_train, verbose=0),
        model.backbone.predict(data.x_test[queries], verbose=0),
    ),
    "pixels": nearest(flat(data.x_train), flat(data.x_test[queries])),
}
figure, axes = plt.subplots(2 * len(queries), 6, figsize=(6, 2.4 * len(queries)))
rows = [(query, method, found[method][i]) for i, query in enumerate(queries) for method in found]
for row, (query, method, neighbours) in enumerate(rows):
    axes[row, 0].imshow(data.x_test[query])
    axes[row, 0].set_title(f"{names[data.y_test[query]]} ({method})", fontsize=8)
    for column, index in enumerate(neighbours, start=1):
        axes[row, column].imshow(data.x_train[index])
        wrong = data.y_train[index] != data.y_test[query]
        axes[row, column].set_title(
            names[data.y_train[index]], fontsize=8, color="red" if wrong else "black"
        )
for axis in axes.flat:
    axis.axis("off")
plt.tight_layout()
plt.show()""",
    ),
    (
        "markdown",
        """## What the figures show

All the figures above are computed in this notebook. The loss falls, `proj_std` stays where
it started, far from 0 (nothing collapsed), and the kNN accuracy climbs above the untrained
network's on both sets of queries. On the augmented test images, warped and re-stroked copies
of held-out drawings, it ends far above the raw pixels' too: that invariance is what SimCLR's
views teach. On the test images themselves, characters in fonts that their class's training
images do not include, it ends just above the raw pixels'. Nothing in a glyph's views says
that a bold serif drawing and a thin sans one of the same character belong together; that
takes labels: in `supervised_hello_world.ipynb`, training on the Latin classes lifts recall@1
above the raw pixels', for the Greek and Cyrillic letters too. A full-width ResNet-18
(`width=1.0`) gains far more slowly on glyphs: see the benchmark report.

## Next

* The same job from the command line, with more options, plots and resumable training:
  `tfsim train --help`.
* Training with labels, and what carries over to scripts never trained on:
  `supervised_hello_world.ipynb`.
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

from tensorflow_similarity.datasets import load_data
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

This notebook is the 0.17 "hello world" (which used MNIST) on **glyphs**: letters and digits
drawn in the 22 fonts matplotlib ships (2,626 images at 16x16, drawn on first use, so no
download). It trains a `ResNet18Sim` with **labels** and a metric loss, so that images of the
same character get nearby embeddings, then uses the model as 0.17 users did: it indexes
examples, looks up nearest neighbours, calibrates a distance threshold and matches new images
to classes.

It trains on the **62 Latin letters and digits** only and keeps the 81 Greek and Cyrillic
letters out: the index and the evaluation hold all 143 classes, so we can see whether what
the network learns on one script carries over to letters of scripts it never saw. The recall
figures are set beside two references computed here: the randomly initialised network, and
the raw pixels (the flattened images, searched the same way), which any learnt embedding
should beat.

The settings are those of `tfsim train --algorithm multisimilarity` on glyphs. Training runs
under `tf.distribute.MirroredStrategy` with synchronised batch norm: over two *logical* CPU
devices without a GPU (several minutes on two CPU cores), over all GPUs with them.""",
    ),
    (
        "code",
        PARAMETERS_NOTE
        + """import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
SMALL = os.environ.get("TFSIM_EXAMPLE_SMALL") == "1"

REPLICAS = 2  # logical CPU devices when there is no GPU
IMAGE_SIZE = 16  # glyphs' size in `tfsim train`: a full-width ResNet-18 stays fast on CPUs
LIMIT = 600 if SMALL else None  # number of images used (None: all 2,626)
EPOCHS = 1 if SMALL else 12
CLASSES_PER_BATCH = 8 if SMALL else 16
EXAMPLES_PER_CLASS = 4  # a global batch of 16 x 4 = 64 images, 32 per replica
LEARNING_RATE = 1e-3  # Adam's, decayed to 0 along a cosine over the run

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
from tensorflow_similarity.augmenters import GlyphAugmenter
from tensorflow_similarity.callbacks import BatchNormStatistics, EvalCallback
from tensorflow_similarity.datasets import load_data
from tensorflow_similarity.losses import MultiSimilarityLoss
from tensorflow_similarity.retrieval_metrics import MapAtK, PrecisionAtK, RecallAtK
from tensorflow_similarity.samplers import MultiShotMemorySampler
from tensorflow_similarity.visualization import projector, viz_neighbors_imgs

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

`load_data("glyphs")` draws each character in each font that has it (the Latin ones in all
22 fonts, Greek and Cyrillic in the 16 DejaVu and STIX ones), makes the images RGB in
`[0, 1]` and splits each class 80/20 into train and test images, deterministically from the
seed: a test image is its character in a font that the class's training images do not
include. Classes `0` to `data.seen_classes - 1` are the 62 Latin letters and digits; a Greek
or Cyrillic letter that looks like a Latin one belongs to its class, named by all its
characters (Latin A, Greek Alpha and Cyrillic A are "A Α А"), so the 81 other classes are the
Greek and Cyrillic letters unlike any Latin one.

The model trains on the training images of the Latin classes only. All test images are the
queries of the retrieval figures. For matching, they are split in two halves: a
**calibration** half, to choose a distance threshold, and an **evaluation** half, to score
the matches.""",
    ),
    (
        "code",
        """data = load_data("glyphs", image_size=IMAGE_SIZE, seed=0, limit=LIMIT)
names = data.class_names
TRAIN_CLASSES = list(range(data.seen_classes))  # the Latin letters and digits
seen = np.isin(data.y_train, TRAIN_CLASSES)
x_fit, y_fit = data.x_train[seen], data.y_train[seen]
STEPS_PER_EPOCH = 3 if SMALL else len(y_fit) // (CLASSES_PER_BATCH * EXAMPLES_PER_CLASS)
known = np.isin(data.y_test, TRAIN_CLASSES)

order = np.random.default_rng(0).permutation(len(data.y_test))
calibration_half, evaluation_half = order[::2], order[1::2]
print(data.source)
print("train", data.x_train.shape, "of which trained on", x_fit.shape)
print("test", data.x_test.shape,
      f"({known.sum()} of seen classes, {(~known).sum()} of unseen ones)")

# A few characters of each script, one font per column.
shown = [n for n in ("A Α А", "g", "7", "Q", "λ", "Ω", "Ж", "ю") if n in names]
figure, axes = plt.subplots(len(shown), 8, figsize=(8, 1.05 * len(shown)))
for row, name in zip(axes, shown):
    images = data.x_train[data.y_train == names.index(name)][:8]
    row[0].set_title(name, loc="left", fontsize=9)
    for axis, image in zip(row, images):
        axis.imshow(image)
for axis in axes.flat:
    axis.axis("off")
plt.show()""",
    ),
    (
        "markdown",
        """## The model, the sampler, the augmenter and the loss

`ResNet18Sim` is a ResNet-18 with 0.17's head: GeM pooling, then an L2-normalised
`MetricEmbedding` of 128 dimensions; `sync_bn=True` makes its batch norms
`SyncBatchNormalization`, which normalise with the statistics of the global batch.

A metric loss needs positives in every batch: `MultiShotMemorySampler` draws each batch as 16
classes times 4 images of each. Its augmenter replaces each image with a view drawn by
`GlyphAugmenter`: a random affine warp (rotation, scale, shear, shift) and stroke width, never
a flip (a mirrored letter is another letter, or none). `MultiSimilarityLoss` (Wang et al.,
2019) pulls the hardest positives together and pushes the hardest negatives apart; under the
strategy, it mines pairs over the **global** batch, as one device holding all 64 images
would. Adam's learning rate of 1e-3 decays to 0 along a cosine over the 12 epochs.

`EvalCallback` indexes the training images of all 143 classes after each epoch and looks up
the test images, split into seen ("known") and unseen ("unknown") classes: recall@1 is the
fraction of queries whose nearest indexed image has their class. The raw pixels' recall@1 is
computed the same way: the class of the nearest training image by cosine similarity of the
flattened images.""",
    ),
    (
        "code",
        """augmenter = GlyphAugmenter(IMAGE_SIZE, seed=0)


def augment(x, y, num_augmentations_per_example, is_warmup):
    return augmenter(x)[0].numpy(), y  # the first of its two views


sampler = MultiShotMemorySampler(
    x_fit,
    y_fit,
    classes_per_batch=CLASSES_PER_BATCH,
    examples_per_class_per_batch=EXAMPLES_PER_CLASS,
    steps_per_epoch=STEPS_PER_EPOCH,
    augmenter=augment,
    seed=0,
)
schedule = keras.optimizers.schedules.CosineDecay(
    LEARNING_RATE, decay_steps=EPOCHS * STEPS_PER_EPOCH
)
with strategy.scope():
    model = ResNet18Sim((IMAGE_SIZE, IMAGE_SIZE, 3), embedding_size=128, sync_bn=True)
    model.compile(
        optimizer=keras.optimizers.Adam(schedule), loss=MultiSimilarityLoss(), distance="cosine"
    )

evaluation = EvalCallback(
    data.x_test,
    data.y_test,
    data.x_train,
    data.y_train,
    metrics=[],
    known_classes=TRAIN_CLASSES,
    retrieval_metrics=[RecallAtK(k=1), RecallAtK(k=5)],
)
evaluation.set_model(model)
before = evaluation.evaluate()  # the randomly initialised network


def nearest(index_vectors, query_vectors, k=5):
    \"\"\"The indices of each query's k nearest indexed vectors, by cosine similarity.\"\"\"
    index_vectors = index_vectors / np.linalg.norm(index_vectors, axis=1, keepdims=True)
    query_vectors = query_vectors / np.linalg.norm(query_vectors, axis=1, keepdims=True)
    return np.argsort(-query_vectors @ index_vectors.T, axis=1)[:, :k]


flat = lambda images: images.reshape(len(images), -1)
pixel_found = data.y_train[nearest(flat(data.x_train), flat(data.x_test), k=1)[:, 0]]
pixels = {
    "known": np.mean(pixel_found[known] == data.y_test[known]),
    "unknown": np.mean(pixel_found[~known] == data.y_test[~known]),
}
for split in ["known", "unknown"]:
    print(f"recall@1, {split + ' classes':15s} raw pixels {pixels[split]:.3f}, "
          f"untrained network {before[f'recall@1_{split}_classes']:.3f}")""",
    ),
    (
        "markdown",
        """## Training""",
    ),
    (
        "code",
        """# Keras' moving averages of the batch norm statistics lag the weights in a short run:
# recomputed from the seen classes' training images before each evaluation, as
# `tfsim train-metric` does.
recompute = BatchNormStatistics(model, x_fit)
fit = model.fit(sampler, epochs=EPOCHS, callbacks=[recompute, evaluation], verbose=2)
history = fit.history""",
    ),
    (
        "markdown",
        """## Training curves

The loss, and recall@1 of the test images against the training images, for seen and unseen
classes; epoch 0 is the randomly initialised network, the dashed lines the raw pixels'.""",
    ),
    (
        "code",
        """epochs = np.arange(0, EPOCHS + 1)
figure, (loss_axis, recall_axis) = plt.subplots(1, 2, figsize=(12, 3.5))
loss_axis.plot(epochs[1:], history["loss"], marker="o")
loss_axis.set(title="MultiSimilarityLoss", xlabel="epoch")
for colour, split in zip(("C0", "C1"), ["known", "unknown"]):
    name = f"recall@1_{split}_classes"
    recall_axis.plot(epochs, [before[name], *history[name]], marker="o", color=colour,
                     label=f"{split} classes")
    recall_axis.axhline(pixels[split], color=colour, linestyle="--",
                        label=f"{split} classes, raw pixels")
recall_axis.set(title="recall@1 (test images)", xlabel="epoch (0: before training)")
recall_axis.legend(fontsize="small", loc="center left", bbox_to_anchor=(1, 0.5))
plt.show()
print(f"{'recall@1':18s} {'raw pixels':>10s} {'untrained':>10s} {'trained':>10s}")
for split in ["known", "unknown"]:
    name = f"recall@1_{split}_classes"
    print(f"{split + ' classes':18s} {pixels[split]:10.3f} {before[name]:10.3f} "
          f"{history[name][-1]:10.3f}")""",
    ),
    (
        "markdown",
        """## Indexing and looking up

`model.index` embeds the training images of all 143 classes and stores them with their labels
and, as `data`, the images themselves, so that a lookup can show them. `model.lookup` returns
each query's nearest indexed images, nearest first; `viz_neighbors_imgs` draws them, titled
with their class and cosine distance, in red when the class differs from the query's. The
queries: a test image of one Latin letter and of four Greek and Cyrillic letters the model
never trained on. The last figure shows, for the same queries, the nearest training images
by raw pixels.""",
    ),
    (
        "code",
        """model.index(data.x_train, data.y_train, data=data.x_train)
# The first test image of a few classes: one seen, four unseen (any unseen in a small run).
wanted = [names.index(n) for n in ("g", "λ", "Ж", "Ω", "ю")]
queries = [i for c in wanted for i in np.flatnonzero(data.y_test == c)[:1]]
queries = queries or list(np.flatnonzero(~known)[:4])
neighbours = model.lookup(data.x_test[queries], k=5)
mapping = dict(enumerate(names))
for query, found in zip(queries, neighbours, strict=True):
    viz_neighbors_imgs(data.x_test[query], data.y_test[query], found, mapping, fig_size=(9, 1.8))

pixel_neighbours = nearest(flat(data.x_train), flat(data.x_test[queries]))
figure, axes = plt.subplots(len(queries), 6, figsize=(6, 1.25 * len(queries)), squeeze=False)
for row, (query, found) in zip(axes, zip(queries, pixel_neighbours, strict=True)):
    row[0].imshow(data.x_test[query])
    row[0].set_title(f"query {names[data.y_test[query]]}", fontsize=8)
    for axis, index in zip(row[1:], found):
        axis.imshow(data.x_train[index])
        wrong = data.y_train[index] != data.y_test[query]
        axis.set_title(names[data.y_train[index]], fontsize=8, color="red" if wrong else "black")
for axis in axes.flat:
    axis.axis("off")
figure.suptitle("raw pixels: nearest training images", fontsize=9)
plt.tight_layout()
plt.show()""",
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
    retrieval[split] = model.evaluate_retrieval(data.x_test[mask], data.y_test[mask], metrics)""",
    ),
    (
        "markdown",
        """## Calibration and matching

`match` assigns a query the class of its nearest indexed image, but only within a distance
threshold: farther queries get `no_match_label` (-1), "not something I know".
`calibrate` chooses the threshold on the calibration half of the test images: the
`"optimal"` one maximises F1 (`thresholds_targets={"name": value}` would add cutpoints at
target F1 values). The matches are scored on the evaluation half.""",
    ),
    (
        "code",
        """x_cal, y_cal = data.x_test[calibration_half], data.y_test[calibration_half]
x_eval, y_eval = data.x_test[evaluation_half], data.y_test[evaluation_half]
calibration = model.calibrate(
    x_cal,
    y_cal,
    extra_metrics=["precision", "recall", "binary_accuracy"],
    verbose=1,
)
matches = np.asarray(model.match(x_eval, cutpoint="optimal"))
threshold = calibration.cutpoints["optimal"]["distance"]
print(f"optimal distance threshold {threshold:.3f}")
for split, mask in [("seen classes", known[evaluation_half]),
                    ("unseen classes", ~known[evaluation_half])]:
    correct = np.mean(matches[mask] == y_eval[mask])
    unmatched = np.mean(matches[mask] == -1)
    print(f"{split:15s} matched correctly {correct:.3f}, no match {unmatched:.3f}, "
          f"another class {1 - correct - unmatched:.3f}")""",
    ),
    (
        "markdown",
        """## The embeddings in 2-D

`projector` draws a PCA projection of embeddings, one colour per class: here all the images
(training and test) of ten Greek and Cyrillic classes, none of which the model trained on.""",
    ),
    (
        "code",
        """unseen_shown = [names.index(n) for n in "λ Ω Ж ю Φ δ Я ш ξ Ψ".split()]
images = np.concatenate([data.x_train, data.x_test])
labels = np.concatenate([data.y_train, data.y_test])
mask = np.isin(labels, unseen_shown)
figure, _ = projector(model.predict(images[mask], verbose=0), labels[mask],
                      class_mapping=names, pt_size=12, title="unseen classes' embeddings (PCA)")""",
    ),
    (
        "markdown",
        """## What the figures show

All the figures above are computed in this notebook. Glyphs are clean, centred drawings, so
the raw pixels are a strong reference, and in this run the randomly initialised network
retrieves no better than they do, for seen and unseen classes alike. Twelve epochs of
`MultiSimilarityLoss` on the Latin letters and digits lift recall@1 of the seen classes well
above the raw pixels', and that of the Greek and Cyrillic letters above both references too,
although the network never saw any of them: what it learns about strokes and shapes on one
script carries over to two others, though the unseen classes stay below the seen ones. Both
curves flatten over the last epochs, as the learning rate decays.

The neighbours show what stays hard: characters that, cropped to their ink and scaled to
16x16, hardly differ, such as a Cyrillic capital and its small letter (Ж and ж), and what
training changed: the raw pixels find O's for the query Ω, the trained network Ω's first.
This is one run of one seed; `tfsim train --algorithm multisimilarity` makes the same
comparison for any seed, and `python -m benchmark.glyphs.runs` over several.

## Next

* The same run from the command line, with resumable training and plots:
  `tfsim train --algorithm multisimilarity` (`tfsim train --help`).
* Save the model with its index: `model.save("model.keras")`, then
  `keras.saving.load_model("model.keras")` and `model.load_index("model.keras")`.
* Self-supervised training, without labels: `unsupervised_hello_world.ipynb`.""",
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
