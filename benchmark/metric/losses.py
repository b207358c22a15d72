"""Benchmark of metric losses: global-batch vs per-replica mining, cost and quality.

Under `tf.distribute` our metric losses gather the embeddings and labels of
every replica and mine over the global batch (`MetricLoss`); 0.17 mined each
replica's share on its own, which `PerReplicaMining` below reproduces.

1. Cost: median step time (forward, backward, SGD update) of a `ResNet18Sim`
   similarity model at 8x8 (the digits' size), 8 images per replica, at 2, 4
   and 8 logical replicas, for `MultiSimilarityLoss` and `TripletLoss`, global
   vs per-replica mining side by side in one run (interleaved), and the bytes
   each replica gathers per step (the global batch's embeddings, float32, and
   its int64 labels and replica ids).
2. Quality: `ResNet18Sim` trained with `MultiSimilarityLoss` on 6 of the
   digits' 10 classes, 4 replicas (2 in a quick run), 4 and 8 images per
   replica, batches from a `MultiShotMemorySampler` (as many classes a batch
   as replicas, grouped by class, as 0.17's samplers made them, so each
   replica's share holds one class); then
   recall@1 and mAP@R of leave-one-out retrieval among the held-out images
   of the 4 unseen classes. Three seeds; mean, sample standard deviation and
   the paired difference (global - per replica) per seed.

The replicas are logical CPUs of one host: the step times measure the extra
work and synchronisation, not a speed-up. Results go to
`<out>/metric_losses.json` and `.md`: `benchmark/results` for a full run, a
new temporary folder (printed) for a `--quick` one.

Usage (from the repository root):

    python -m benchmark.metric.losses            # full run
    python -m benchmark.metric.losses --quick    # smoke run
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmark.common import markdown_table, output_folder  # noqa: E402
from tensorflow_similarity.architectures import ResNet18Sim  # noqa: E402
from tensorflow_similarity.datasets import load_data  # noqa: E402
from tensorflow_similarity.losses import MetricLoss, MultiSimilarityLoss, TripletLoss  # noqa: E402
from tensorflow_similarity.retrieval_metrics import MapAtR, RecallAtK  # noqa: E402
from tensorflow_similarity.samplers import MultiShotMemorySampler  # noqa: E402

NUM_LOGICAL_DEVICES = 8
LOSSES = {"multisimilarity": MultiSimilarityLoss, "triplet": TripletLoss}
MINING = ("global", "per replica")
EMBEDDING_SIZE = 64
IMAGE_SIZE = 8
TRAIN_CLASSES = (0, 1, 2, 3, 4, 5)


class PerReplicaMining(keras.losses.Loss):
    """0.17's behaviour: each replica mines its own share of the batch.

    Each replica's loss is the mean of its anchors' terms against its own
    share only, divided by the number of replicas as Keras does for a mean
    loss, so the optimizer's sum is the mean of the replicas' losses.
    """

    def __init__(self, loss: MetricLoss) -> None:
        super().__init__(name=f"per_replica_{loss.name}")
        self.metric_loss = loss

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> tf.Tensor:
        labels = tf.reshape(tf.cast(y_true, tf.int64), [-1])
        embeddings = tf.cast(y_pred, tf.float32)
        # Mined against this replica's own rows only (`call` would gather the global batch).
        terms = self.metric_loss.per_anchor_loss(labels, embeddings, labels, embeddings)
        ctx = tf.distribute.get_replica_context()
        replicas = ctx.num_replicas_in_sync if ctx is not None else 1
        return tf.math.divide_no_nan(tf.reduce_sum(terms), tf.cast(tf.size(terms), tf.float32)) / (
            replicas
        )


def make_loss(name: str, mining: str) -> keras.losses.Loss:
    loss = LOSSES[name]()
    return loss if mining == "global" else PerReplicaMining(loss)


def strategies() -> dict[int, tf.distribute.MirroredStrategy]:
    """One MirroredStrategy per replica count over logical CPUs, each with its own keys.

    The logical devices are made here, before TensorFlow's runtime starts.
    """
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0],
        [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_DEVICES,
    )
    cpus = [device.name for device in tf.config.list_logical_devices("CPU")]
    found = {}
    for replicas in (2, 4, 8):
        keyed = type(
            f"MirroredStrategy{replicas}",
            (tf.distribute.MirroredStrategy,),
            {"_collective_key_base": 10_000 * replicas},
        )
        found[replicas] = keyed(cpus[:replicas])
    return found


def build_model(strategy: tf.distribute.Strategy, loss: keras.losses.Loss, seed: int) -> Any:
    with strategy.scope():
        keras.utils.set_random_seed(seed)
        model = ResNet18Sim(
            (IMAGE_SIZE, IMAGE_SIZE, 3), embedding_size=EMBEDDING_SIZE, sync_bn=True
        )
        model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9), loss=loss)
    return model


class StepTimer(keras.callbacks.Callback):
    """Seconds of each training step."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: list[float] = []
        self._start = 0.0

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.seconds.append(time.perf_counter() - self._start)


def measure_cost(config: argparse.Namespace, found: dict[int, Any]) -> list[dict[str, Any]]:
    rows = []
    rng = np.random.default_rng(0)
    for replicas in config.replicas:
        batch = config.per_replica * replicas
        images = rng.uniform(size=(batch, IMAGE_SIZE, IMAGE_SIZE, 3)).astype("float32")
        labels = rng.permutation(np.arange(batch) % 4)
        data = tf.data.Dataset.from_tensors((images, labels)).repeat()
        for name in config.losses:
            models = {m: build_model(found[replicas], make_loss(name, m), 0) for m in MINING}
            times: dict[str, list[float]] = {m: [] for m in MINING}
            for _ in range(config.repeats):
                for mining in MINING:
                    timer = StepTimer()
                    models[mining].fit(
                        data, steps_per_epoch=config.steps, epochs=1, verbose=0, callbacks=[timer]
                    )
                    # The first call traces the step: leave it out.
                    times[mining].extend(timer.seconds[1:] if not times[mining] else timer.seconds)
            medians = {m: statistics.median(times[m]) for m in MINING}
            gathered = batch * (EMBEDDING_SIZE * 4 + 8 + 8)
            rows.append(
                {
                    "loss": name,
                    "replicas": replicas,
                    "global_batch": batch,
                    "ms_global": 1e3 * medians["global"],
                    "ms_per_replica": 1e3 * medians["per replica"],
                    "ratio": medians["global"] / medians["per replica"],
                    "bytes_gathered": gathered,
                }
            )
            print(
                f"cost {name} x{replicas}: global {rows[-1]['ms_global']:.1f} ms, per replica "
                f"{rows[-1]['ms_per_replica']:.1f} ms ({rows[-1]['ratio']:.2f}x)",
                flush=True,
            )
    return rows


def retrieval_quality(model: keras.Model, images: np.ndarray, labels: np.ndarray) -> dict:
    """Recall@1 and mAP@R of each image querying all the others (leave one out)."""
    return retrieval_scores(model.predict(images, batch_size=256, verbose=0), labels)


def retrieval_scores(embeddings: np.ndarray, labels: np.ndarray) -> dict:
    """Recall@1 and mAP@R of each embedding querying all the others, by cosine similarity."""
    embeddings = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    counts = {int(c): int(n) for c, n in zip(*np.unique(labels, return_counts=True), strict=True)}
    k = max(counts.values())
    order = np.argsort(-(embeddings @ embeddings.T), axis=1)[:, :k]
    lookup_labels = labels[order]
    recall = RecallAtK(k=1, drop_closest_lookup=True)
    map_at_r = MapAtR(r=counts, drop_closest_lookup=True)
    return {
        "recall@1": recall.compute(query_labels=labels, lookup_labels=lookup_labels),
        "map@r": map_at_r.compute(query_labels=labels, lookup_labels=lookup_labels),
    }


def measure_quality(config: argparse.Namespace, found: dict[int, Any]) -> list[dict[str, Any]]:
    data = load_data("digits", IMAGE_SIZE, seed=0)
    images = np.concatenate([data.x_train, data.x_test])
    labels = np.concatenate([data.y_train, data.y_test])
    seen = np.isin(labels, TRAIN_CLASSES)
    x_train, y_train = images[seen], labels[seen]
    x_unseen, y_unseen = images[~seen], labels[~seen]
    rows = []
    for per_replica in config.quality_per_replica:
        for seed in config.seeds:
            for mining in MINING:
                model = build_model(
                    found[config.quality_replicas], make_loss("multisimilarity", mining), seed
                )
                before = retrieval_quality(model, x_unseen, y_unseen)
                sampler = MultiShotMemorySampler(
                    x_train,
                    y_train,
                    classes_per_batch=config.quality_replicas,
                    examples_per_class_per_batch=per_replica,
                    steps_per_epoch=config.quality_steps,
                    seed=seed,
                )
                model.fit(sampler, epochs=config.epochs, verbose=0)
                after = retrieval_quality(model, x_unseen, y_unseen)
                rows.append(
                    {"per_replica": per_replica, "seed": seed, "mining": mining}
                    | {f"{name}_before": value for name, value in before.items()}
                    | after
                )
                print(
                    f"quality {per_replica}/replica seed {seed} {mining}: recall@1 "
                    f"{before['recall@1']:.3f} -> {after['recall@1']:.3f}, mAP@R "
                    f"{before['map@r']:.3f} -> {after['map@r']:.3f}",
                    flush=True,
                )
    return rows


def spread(values: Sequence[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def render_markdown(payload: dict[str, Any]) -> str:
    cost = markdown_table(
        [
            "loss",
            "replicas",
            "global batch",
            "global mining ms",
            "per-replica mining ms",
            "global / per replica",
            "bytes gathered per replica and step",
        ],
        [
            [
                r["loss"],
                r["replicas"],
                r["global_batch"],
                f"{r['ms_global']:.1f}",
                f"{r['ms_per_replica']:.1f}",
                f"{r['ratio']:.2f}",
                f"{r['bytes_gathered']:,}",
            ]
            for r in payload["cost"]
        ],
    )
    quality_rows = []
    rows = payload["quality"]
    # Results written before the replica count was recorded were all on 4 replicas.
    replicas = payload.get("quality_replicas", 4)
    for per_replica in sorted({r["per_replica"] for r in rows}):
        for metric in ("recall@1", "map@r"):
            by = {
                m: {
                    r["seed"]: r[metric]
                    for r in rows
                    if r["per_replica"] == per_replica and r["mining"] == m
                }
                for m in MINING
            }
            seeds = sorted(by["global"])
            # Both minings start from the seed's same untrained model: one value per seed.
            before = [
                r[f"{metric}_before"]
                for r in rows
                if r["per_replica"] == per_replica and r["mining"] == "global"
            ]
            differences = [by["global"][s] - by["per replica"][s] for s in seeds]
            quality_rows.append(
                [
                    per_replica,
                    replicas * per_replica,
                    metric,
                    spread(before),
                    spread([by["global"][s] for s in seeds]),
                    spread([by["per replica"][s] for s in seeds]),
                    spread(differences),
                    f"{sum(d > 0 for d in differences)} of {len(differences)}",
                ]
            )
    quality = markdown_table(
        [
            "per-replica batch",
            "global batch",
            "metric (unseen classes)",
            "untrained",
            "global mining",
            "per-replica mining",
            "global - per replica",
            "seeds where global is higher",
        ],
        quality_rows,
    )
    return (
        "# Metric losses: global-batch vs per-replica mining\n\n"
        f"{payload['machine']}; {payload['date']}; quick: {payload['quick']}.\n\n"
        "## Cost\n\n"
        "Median ms per training step of ResNet18Sim (8x8, 64-d embedding, sync BN), "
        f"{payload['per_replica']} images per replica, interleaved repetitions.\n\n"
        f"{cost}\n\n"
        "## Quality\n\n"
        f"MultiSimilarityLoss, {replicas} replicas, trained on digits 0-5 with "
        f"MultiShotMemorySampler batches of {replicas} classes (each replica's share is one "
        "class), "
        f"{payload['epochs']} epochs of {payload['quality_steps']} steps; leave-one-out "
        "retrieval among the held-out images of digits 6-9 (mean ± sample std over seeds "
        f"{payload['seeds']}).\n\n"
        f"{quality}\n"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: small and short")
    parser.add_argument("--out", type=Path, default=None, help="folder for the results")
    args = parser.parse_args(argv)
    full = not args.quick
    args.replicas = (2, 4, 8) if full else (2,)
    args.losses = tuple(LOSSES) if full else ("multisimilarity",)
    args.per_replica = 8 if full else 4
    args.steps = 6 if full else 2
    args.repeats = 3 if full else 1
    # Tracing the synchronised step grows with the replica count: a smoke run keeps the
    # regime (one class per replica) on the fewest replicas that have one.
    args.quality_replicas = 4 if full else 2
    args.quality_per_replica = (4, 8) if full else (4,)
    args.seeds = (0, 1, 2) if full else (0,)
    args.epochs = 4 if full else 1
    args.quality_steps = 40 if full else 2
    return args


def main(argv: Sequence[str] | None = None) -> Path:
    config = parse_args(argv)
    out = output_folder(config.out, config.quick, "metric_losses")
    out.mkdir(parents=True, exist_ok=True)
    found = strategies()
    payload = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, "
        f"{NUM_LOGICAL_DEVICES} logical CPU devices",
        "date": datetime.date.today().isoformat(),
        "quick": config.quick,
        "per_replica": config.per_replica,
        "epochs": config.epochs,
        "quality_steps": config.quality_steps,
        "quality_replicas": config.quality_replicas,
        "seeds": list(config.seeds),
        "cost": measure_cost(config, found),
        "quality": measure_quality(config, found),
    }
    (out / "metric_losses.json").write_text(json.dumps(payload, indent=2))
    markdown = render_markdown(payload)
    (out / "metric_losses.md").write_text(markdown)
    print(markdown)
    return out


if __name__ == "__main__":
    main()
