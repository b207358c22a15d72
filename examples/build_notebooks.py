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

NOTEBOOKS = {
    "unsupervised_hello_world.ipynb": HELLO_WORLD,
    "sync_batchnorm.ipynb": SYNC_BATCHNORM,
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
