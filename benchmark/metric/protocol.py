"""The package's metric losses under one protocol (Musgrave, Belongie and Lim, 2020).

"A Metric Learning Reality Check" showed that most reported gains between
metric losses came from unequal protocols. Here every metric loss of
`tensorflow_similarity.losses` (each subclass of `MetricLoss`: the pair-based
losses, SupCon, ArcFace and the proxy losses) is trained the same way:

* one backbone (a small convolutional network, `build_model`) and one
  embedding size (`EMBEDDING_SIZE`), from the same initial weights per seed
  (ArcFace, a loss of the cosines to trained class centres, trains a
  `CosineClassifier` head on the embedding; the embedding is evaluated);
* one budget: the same number of steps of the same batches (a
  `MultiShotMemorySampler` of `CLASSES_PER_BATCH` classes times
  `EXAMPLES_PER_CLASS` images, seeded), Adam at one learning rate (the proxies
  too: their larger learning rate is a recipe, left out so that the budget is
  one);
* class-disjoint splits of the glyphs: training on the first seen classes
  (Latin letters and digits), a validation split of the remaining
  `VALIDATION_CLASSES` seen classes to choose among each loss's few settings
  (`SETTINGS`, by validation MAP@R, with the first seed), and the test on the
  unseen classes (Greek and Cyrillic letters, every image);
* the test metrics of the literature, leave-one-out by cosine similarity:
  MAP@R (the headline), R-precision, precision@1, and NMI and AMI of a k-means
  clustering (`evaluators.clustering_metrics`), mean and sample standard
  deviation over seeds, beside raw pixels and the untrained network.

Left out by name (`LEFT_OUT`): `MultiNegativesRankLoss`, whose targets are a
second tower's embeddings, not class labels, and `XBM`, a cross-batch memory
around another metric loss rather than a loss of its own.

Results go to `<out>/metric_protocol.json` and `.md`: `benchmark/results` for
a full run, a new temporary folder (printed) for a `--quick` one.
`python -m benchmark.report` adds them to `REPORT.md`.

Usage (from the repository root):

    python -m benchmark.metric.protocol            # full run, a few minutes on 2 cores
    python -m benchmark.metric.protocol --quick    # smoke run: 2 losses, 2 steps
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from benchmark.common import (  # noqa: E402
    command_line,
    machine_record,
    markdown_table,
    output_folder,
    write_results,
)
from tensorflow_similarity import losses  # noqa: E402
from tensorflow_similarity.datasets import ImageData, load_data  # noqa: E402
from tensorflow_similarity.evaluators import clustering_metrics  # noqa: E402
from tensorflow_similarity.layers import CosineClassifier, MetricEmbedding  # noqa: E402
from tensorflow_similarity.models import SimilarityModel  # noqa: E402
from tensorflow_similarity.retrieval_metrics import MapAtR, PrecisionAtK, RPrecision  # noqa: E402
from tensorflow_similarity.samplers import MultiShotMemorySampler  # noqa: E402

IMAGE_SIZE = 16
EMBEDDING_SIZE = 32
CLASSES_PER_BATCH = 8
EXAMPLES_PER_CLASS = 4
LEARNING_RATE = 1e-3
VALIDATION_CLASSES = 12
# Losses of the cosines to trained class centres (a `CosineClassifier` head), not of embeddings.
COSINE_HEAD = ("ArcFaceLoss",)
METRICS = ("map@r", "r_precision", "precision@1", "nmi", "ami")
LEFT_OUT = {
    "MultiNegativesRankLoss": "its targets are a second tower's embeddings, not labels",
    "XBM": "a cross-batch memory around another metric loss, not a loss of its own",
}

# Each loss's few settings: the paper's default first, then one or two alternatives.
SETTINGS: dict[str, tuple[dict[str, Any], ...]] = {
    "ArcFaceLoss": ({"margin": 0.5}, {"margin": 0.2}),
    "CircleLoss": ({"gamma": 80.0, "margin": 0.4}, {"gamma": 256.0, "margin": 0.25}),
    "MultiSimilarityLoss": ({"beta": 40.0}, {"beta": 10.0}),
    "PNLoss": ({"margin": None}, {"margin": 0.2}),
    "ProxyAnchorLoss": ({"alpha": 32.0, "margin": 0.1}, {"alpha": 16.0, "margin": 0.1}),
    "ProxyNCALoss": ({"temperature": 1 / 9}, {"temperature": 1 / 3}),
    "SoftNearestNeighborLoss": ({"temperature": 1.0}, {"temperature": 0.1}),
    "SupConLoss": ({"temperature": 0.07}, {"temperature": 0.2}, {"temperature": 0.5}),
    "TripletLoss": ({"margin": None}, {"margin": 0.2}),
}


def metric_loss_names() -> list[str]:
    """The package's metric losses (subclasses of `MetricLoss`), each with its `SETTINGS`.

    Raises:
        ValueError: For a metric loss without settings here (a loss added to
            the package), so that none is silently left out.
    """
    names = sorted(
        name
        for name in losses.__all__
        if isinstance(getattr(losses, name), type)
        and issubclass(getattr(losses, name), losses.MetricLoss)
        and getattr(losses, name) not in (losses.MetricLoss, losses.ProxyLoss)
        and name not in LEFT_OUT
    )
    missing = [name for name in names if name not in SETTINGS]
    if missing:
        raise ValueError(
            f"benchmark.metric.protocol has no settings for {', '.join(missing)}: add a row "
            "for each to SETTINGS (its default first), so that every metric loss is compared."
        )
    return names


def make_loss(name: str, setting: dict[str, Any], num_classes: int) -> keras.losses.Loss:
    """The loss `name` with `setting`; a proxy loss gets the classes and embedding size."""
    cls = getattr(losses, name)
    if issubclass(cls, losses.ProxyLoss):
        return cls(num_classes, EMBEDDING_SIZE, **setting)
    return cls(**setting)


def split_classes(data: ImageData, validation_classes: int) -> dict[str, tuple]:
    """Class-disjoint splits: `train` (training images), `validation` and `test` (all images).

    The seen classes are labels `0 .. seen - 1`; the last `validation_classes`
    of them are the validation split, the others train; the unseen classes
    are the test.
    """
    seen = data.seen_classes
    train_classes = seen - validation_classes
    if train_classes < 2:
        raise ValueError(
            f"{seen} seen classes leave {train_classes} to train on after "
            f"{validation_classes} validation classes; use fewer validation classes."
        )
    images = np.concatenate([data.x_train, data.x_test])
    labels = np.concatenate([data.y_train, data.y_test])
    train = data.y_train < train_classes
    validation = (labels >= train_classes) & (labels < seen)
    return {
        "train": (data.x_train[train], data.y_train[train]),
        "validation": (images[validation], labels[validation]),
        "test": (images[labels >= seen], labels[labels >= seen]),
    }


def build_model(seed: int, head_classes: int | None = None) -> tuple[keras.Model, keras.Model]:
    """The one backbone: two convolutions and poolings, flattened, a `MetricEmbedding`.

    Returns the model to train and the model that embeds (the same one, except
    with `head_classes`: then a `CosineClassifier` of that many class centres
    on the embedding is trained, as ArcFace takes the cosines to them). The
    backbone's initial weights depend on `seed` alone.
    """
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3))
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(x)
    # Flattened, not averaged: a glyph is its strokes' places.
    x = keras.layers.Flatten()(keras.layers.MaxPooling2D()(x))
    embedding = MetricEmbedding(EMBEDDING_SIZE)(x)
    model = SimilarityModel(inputs, embedding)
    if head_classes is None:
        return model, model
    return keras.Model(inputs, CosineClassifier(head_classes)(embedding)), model


def scores(embeddings: np.ndarray, labels: np.ndarray, seed: int = 0) -> dict[str, float]:
    """MAP@R, R-precision and precision@1 (leave one out, cosine), NMI and AMI."""
    embeddings = np.asarray(embeddings, dtype="float64")
    embeddings = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    counts = {int(c): int(n) for c, n in zip(*np.unique(labels, return_counts=True), strict=True)}
    order = np.argsort(-(embeddings @ embeddings.T), axis=1, kind="stable")
    lookup = labels[order[:, : max(counts.values())]]
    found = {
        name: float(metric.compute(query_labels=labels, lookup_labels=lookup))
        for name, metric in (
            ("map@r", MapAtR(r=counts, drop_closest_lookup=True)),
            ("r_precision", RPrecision(r=counts, drop_closest_lookup=True)),
            ("precision@1", PrecisionAtK(k=1, drop_closest_lookup=True)),
        )
    }
    return found | clustering_metrics(embeddings, labels, seed=seed)


def embed(model: keras.Model, images: np.ndarray) -> np.ndarray:
    return model.predict(images, batch_size=256, verbose=0)


def train(
    name: str, setting: dict[str, Any], seed: int, config: argparse.Namespace, splits: dict
) -> keras.Model:
    """One run of the budget: `config.steps` steps of seeded sampler batches.

    Returns the model that embeds (see `build_model`).
    """
    x_train, y_train = splits["train"]
    classes = int(y_train.max()) + 1
    model, embedder = build_model(seed, classes if name in COSINE_HEAD else None)
    loss = make_loss(name, setting, classes)
    model.compile(keras.optimizers.Adam(LEARNING_RATE), loss=loss)
    sampler = MultiShotMemorySampler(
        x_train,
        y_train,
        classes_per_batch=CLASSES_PER_BATCH,
        examples_per_class_per_batch=EXAMPLES_PER_CLASS,
        steps_per_epoch=config.steps,
        seed=seed,
    )
    model.fit(sampler, epochs=1, verbose=0)
    return embedder


def run_loss(name: str, config: argparse.Namespace, splits: dict) -> dict[str, Any]:
    """Chooses `name`'s setting on validation (first seed), then tests it with every seed."""
    first = config.seeds[0]
    start = time.perf_counter()
    settings = SETTINGS[name][: config.settings]
    selection, models = [], []
    for setting in settings:
        model = train(name, setting, first, config, splits)
        validation = scores(embed(model, splits["validation"][0]), splits["validation"][1])
        selection.append({"setting": setting, "validation_map@r": validation["map@r"]})
        models.append(model)
    chosen = max(range(len(settings)), key=lambda i: selection[i]["validation_map@r"])
    runs = []
    for seed in config.seeds:
        model = (
            models[chosen] if seed == first else train(name, settings[chosen], seed, config, splits)
        )
        runs.append({"seed": seed} | scores(embed(model, splits["test"][0]), splits["test"][1]))
    print(
        f"{name} ({time.perf_counter() - start:.0f} s): chose {settings[chosen]} (validation MAP@R "
        f"{selection[chosen]['validation_map@r']:.3f}); test MAP@R "
        + ", ".join(f"{r['map@r']:.3f}" for r in runs),
        flush=True,
    )
    return {"loss": name, "selection": selection, "chosen": chosen, "runs": runs}


def spread(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def cell(values: Sequence[float]) -> str:
    mean, sd = spread(values)
    return f"{mean:.3f} ± {sd:.3f}" if len(values) > 1 else f"{mean:.3f}"


def setting_text(setting: dict[str, Any]) -> str:
    return ", ".join(
        f"{key}={'none' if value is None else f'{value:.3g}'}" for key, value in setting.items()
    )


def findings(payload: dict[str, Any]) -> str:
    """Which test MAP@R differences are outside the seed spread, each stated plainly.

    Two entries trained with the same seeds start from the same weights, so
    their difference is taken seed by seed; it is outside the seed spread
    when its mean exceeds the larger of the two entries' standard deviations
    over seeds (the rule of `benchmark.metric.small_batch`).
    """
    key = "map@r"
    values = {r["loss"]: [run[key] for run in r["runs"]] for r in payload["losses"]}
    values["untrained network"] = [run[key] for run in payload["untrained"]]
    ranked = sorted(payload["losses"], key=lambda r: -spread(values[r["loss"]])[0])
    best = ranked[0]["loss"]
    sentences = []
    seeds = len(payload["meta"]["seeds"])
    for other in [r["loss"] for r in ranked[1:]] + ["untrained network"]:
        differences = [a - b for a, b in zip(values[best], values[other], strict=True)]
        mean = statistics.fmean(differences)
        limit = max(spread(values[best])[1], spread(values[other])[1])
        verdict = "outside the seed spread" if abs(mean) > limit else "within the seed spread"
        positive = sum(d > 0 for d in differences)
        sentences.append(
            f"- {best} - {other}: {mean:+.3f} ({positive}/{seeds} seeds > 0; seed spread "
            f"{limit:.3f}): {verdict}."
        )
    raw = payload["raw_pixels"][key]
    above = [r["loss"] for r in ranked if min(values[r["loss"]]) > raw]
    below = [r["loss"] for r in ranked if max(values[r["loss"]]) < raw]
    sentences.append(
        f"- Raw pixels score {raw:.3f}: every seed of {', '.join(above) or 'no loss'} above it; "
        f"every seed of {', '.join(below) or 'no loss'} below it."
    )
    return "\n".join(sentences)


def render_markdown(payload: dict[str, Any]) -> str:
    meta = payload["meta"]
    selection_rows = [
        [
            entry["loss"],
            setting_text(choice["setting"]),
            f"{choice['validation_map@r']:.3f}",
            "chosen" if i == entry["chosen"] else "",
        ]
        for entry in payload["losses"]
        for i, choice in enumerate(entry["selection"])
    ]
    test_rows = [
        [
            entry["loss"],
            setting_text(entry["selection"][entry["chosen"]]["setting"]),
            *(cell([run[m] for run in entry["runs"]]) for m in METRICS),
        ]
        for entry in sorted(
            payload["losses"], key=lambda e: -spread([r["map@r"] for r in e["runs"]])[0]
        )
    ]
    test_rows.append(
        ["untrained network", "-", *(cell([r[m] for r in payload["untrained"]]) for m in METRICS)]
    )
    test_rows.append(["raw pixels", "-", *(f"{payload['raw_pixels'][m]:.3f}" for m in METRICS)])
    sizes = meta["split_sizes"]
    return (
        "# Metric losses under one protocol\n\n"
        f"{meta['machine']}; {meta['date']}; quick: {meta['quick']}; "
        f"{meta['seconds']:.0f} s.\n\n"
        f"Glyphs at {IMAGE_SIZE}x{IMAGE_SIZE}: trained on {sizes['train_classes']} seen classes "
        f"({sizes['train']} images), settings chosen on {sizes['validation_classes']} other "
        f"seen classes ({sizes['validation']} images), tested on the {sizes['test_classes']} "
        f"unseen classes ({sizes['test']} images). One backbone (two convolutions and poolings, "
        f"{EMBEDDING_SIZE}-d `MetricEmbedding`), one budget: {meta['steps']} steps of "
        f"{CLASSES_PER_BATCH} classes x {EXAMPLES_PER_CLASS} images, Adam {LEARNING_RATE:g}. "
        f"Seeds {meta['seeds']} (the first chooses the setting); mean ± sample std over seeds. "
        f"Left out: {', '.join(f'{k} ({v})' for k, v in meta['left_out'].items())}.\n\n"
        "## Settings chosen on validation (MAP@R, first seed)\n\n"
        + markdown_table(["loss", "setting", "validation MAP@R", ""], selection_rows)
        + "\n\n## Test: unseen classes\n\n"
        + markdown_table(
            ["", "setting", "MAP@R", "R-precision", "precision@1", "NMI", "AMI"], test_rows
        )
        + "\n\n## Which MAP@R differences are outside the seed spread\n\n"
        + findings(payload)
        + "\n"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 losses, 2 steps")
    parser.add_argument("--out", type=Path, default=None, help="folder for the results")
    args = parser.parse_args(argv)
    args.losses = metric_loss_names() if not args.quick else ["ProxyAnchorLoss", "SupConLoss"]
    args.settings = 3 if not args.quick else 2
    args.steps = 200 if not args.quick else 2
    args.seeds = (0, 1, 2) if not args.quick else (0, 1)
    return args


def main(argv: Sequence[str] | None = None) -> Path:
    config = parse_args(argv)
    out = output_folder(config.out, config.quick, "metric_protocol")
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    data = load_data("glyphs", IMAGE_SIZE, seed=0)
    splits = split_classes(data, VALIDATION_CLASSES)
    test_images, test_labels = splits["test"]
    results = [run_loss(name, config, splits) for name in config.losses]
    untrained = [
        {"seed": seed} | scores(embed(build_model(seed)[1], test_images), test_labels)
        for seed in config.seeds
    ]
    payload = {
        "command": command_line("benchmark.metric.protocol", ["--quick"] if config.quick else []),
        "meta": machine_record()
        | {
            "quick": config.quick,
            "seeds": list(config.seeds),
            "steps": config.steps,
            "left_out": LEFT_OUT,
            "split_sizes": {
                "train_classes": int(len(np.unique(splits["train"][1]))),
                "validation_classes": VALIDATION_CLASSES,
                "test_classes": int(len(np.unique(test_labels))),
                **{split: int(len(labels)) for split, (_, labels) in splits.items()},
            },
        },
        "losses": results,
        "untrained": untrained,
        "raw_pixels": scores(test_images.reshape(len(test_images), -1), test_labels),
    }
    payload["meta"]["seconds"] = time.perf_counter() - start
    print(write_results(out, "metric_protocol", payload, render_markdown))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
