"""The batch-norm leak, measured: per-replica against synchronised and shuffled batch norm.

With batch norm computed per replica, the samples that share a replica share
its batch statistics, and a contrastive model can tell them apart from the
other replicas' samples by that alone (SimCLR's authors: "the smaller each
local batch size per GPU, the easier it is for the model to cheat",
google-research/simclr #114). This measures the leak itself rather than its
effect on accuracy: for queries and keys computed as in training (training-
mode batch norm, the model's mode, 8 logical CPU replicas holding `b` images
each), the mean cosine similarity of a query to the negatives on its own
replica minus that to the negatives on other replicas. Without a leak it is
zero in expectation: a replica's images are a random draw of the batch. The
loss is split the same way: each query's InfoNCE term against its
own-replica negatives minus the same term against as many average
other-replica negatives (the method's temperature), zero without a leak.

Runs SimCLR (per-replica and synchronised batch norm) and MoCo v3
(per-replica, synchronised and shuffle batch norm; MoCo v2 too once it is
registered, with shuffle if it has a key encoder) on the package's glyphs,
at 2, 4 and 8 images per replica, for several seeds; a seed fixes the initial
weights, the images of every step and their views, the same in every mode.
At the start and after every epoch (`--steps` optimizer steps over a fresh
random draw of the training images) it records the leak and the loss split,
averaged over `--probe-batches` global batches of held-out views, and the
held-out kNN accuracy of the backbone (precise batch-norm statistics, as
`benchmark.self_supervised.quality`), beside the raw pixels'. The report
gives each cell's mean over seeds with its range, and says whether the modes'
ranges overlap.

Usage (from the repository root):

    python -m benchmark.self_supervised.leakage            # full run: ~35 min, 2 shared cores
    python -m benchmark.self_supervised.leakage --quick    # smoke run: 1 seed, b=2, 2 steps

Results: `<out>/leakage.json` and `<out>/leakage.md` (`benchmark/results` for a
full run, a new temporary folder for `--quick`); `python -m benchmark.report`
adds the section to `REPORT.md`.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from benchmark.common import (
    command_line,
    machine_record,
    markdown_table,
    output_folder,
    write_results,
)
from benchmark.self_supervised.quality_training import (
    build_backbone,
    embedding_function,
    evaluate,
    log,
    make_augmenter,
    view_pairs,
)
from tensorflow_similarity.callbacks import knn_accuracy
from tensorflow_similarity.collectives import gather_global_batch
from tensorflow_similarity.datasets import ImageData, load_data
from tensorflow_similarity.layers import recompute_batch_norm_statistics
from tensorflow_similarity.models import ContrastiveModel, create_contrastive_model
from tensorflow_similarity.models.algorithms import algorithm_names, get_algorithm
from tensorflow_similarity.models.shuffle_batch_norm import shuffle_across_replicas

NAME = "leakage"
MODULE = "benchmark.self_supervised.leakage"
NUM_REPLICAS = 8
BATCH_SIZES = (2, 4, 8)
# Training images in the kNN memory and the precise-BN pass, and held-out queries.
KNN_IMAGES = 768
# MoCo v2 is the method shuffle batch norm was made for; MoCo v3 (`--methods`) has it too.
DEFAULT_METHODS = ("simclr", "mocov2")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 seed, b=2, 2 steps")
    parser.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (default 3)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default 2)")
    parser.add_argument(
        "--steps", type=int, default=None, help="optimizer steps per epoch (default 6)"
    )
    parser.add_argument(
        "--batch-sizes", type=int, nargs="+", default=None, help="images per replica (2 4 8)"
    )
    parser.add_argument(
        "--methods", nargs="+", default=None, help="methods (default: simclr mocov2)"
    )
    parser.add_argument("--probe-batches", type=int, default=16, help="held-out global batches")
    parser.add_argument("--image-size", type=int, default=16, help="image side (16)")
    parser.add_argument("--width", type=int, default=8, help="backbone's first stage (8)")
    parser.add_argument("--learning-rate", type=float, default=2e-3, help="Adam (2e-3)")
    parser.add_argument("--out", type=Path, default=None, help="results folder")
    args = parser.parse_args(argv)
    args.methods = tuple(args.methods or DEFAULT_METHODS)
    args.seeds = args.seeds or (1 if args.quick else 3)
    args.epochs = args.epochs or (1 if args.quick else 2)
    args.steps = args.steps or (2 if args.quick else 6)
    args.batch_sizes = tuple(args.batch_sizes or ((2,) if args.quick else BATCH_SIZES))
    for flag, value, low in (
        ("--seeds", args.seeds, 1),
        ("--epochs", args.epochs, 1),
        ("--steps", args.steps, 1),
        ("--probe-batches", args.probe_batches, 1),
        ("--image-size", args.image_size, 8),
        ("--width", args.width, 1),
    ):
        if value < low:
            raise SystemExit(f"{flag} must be at least {low}; got {value}.")
    if min(args.batch_sizes) < 2:
        raise SystemExit(f"--batch-sizes must all be at least 2; got {list(args.batch_sizes)}.")
    return args


def methods(names: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The methods and their batch-norm modes: shuffle where the method has a key encoder."""
    unknown = sorted(set(names) - set(algorithm_names()))
    if unknown:
        raise SystemExit(f"--methods: unknown {unknown}; registered: {algorithm_names()}.")
    chosen = {}
    for name in names:
        shuffle = ("shuffle",) if get_algorithm(name).has_key_encoder else ()
        chosen[name] = ("per_replica", "sync", *shuffle)
    return chosen


# --------------------------------------------------------------------------------------
# The leak of one global batch, from its queries and keys.
# --------------------------------------------------------------------------------------


def leak_figures(
    queries: np.ndarray, keys: np.ndarray, per_replica: int, temperature: float
) -> dict[str, float]:
    """The leak and the loss split of one global batch, replica `r` holding rows `r*b..`.

    Args:
        queries: `[n, d]` queries of the global batch, in replica order.
        keys: `[n, d]` keys, row `i` the positive of query `i`.
        per_replica: Rows per replica, `b`.
        temperature: The method's InfoNCE temperature.

    Returns:
        `sim_own`, `sim_other` (mean cosine similarity of a query to the negatives
        on its own replica and on the others), `leak` (their difference) and
        `loss_split`: the mean over queries of the InfoNCE term
        `log(1 + sum_j exp((s_j - s_pos) / t))` over its `b - 1` own-replica
        negatives, minus the mean of the same term over each other replica's
        first `b - 1` rows. Both sides sum the same number of random draws, so
        without a leak the split is zero in expectation.
    """
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    k = keys / np.linalg.norm(keys, axis=1, keepdims=True)
    similarity = q.astype(np.float64) @ k.astype(np.float64).T
    n = len(q)
    replica = np.arange(n) // per_replica
    same = replica[:, None] == replica[None, :]
    own, other = same & ~np.eye(n, dtype=bool), ~same
    # Logits relative to the positive's: the InfoNCE term of a set J is log(1 + sum_J exp).
    relative = (similarity - np.diag(similarity)[:, None]) / temperature
    own_term = np.logaddexp.reduce(np.where(own, relative, -np.inf), axis=1)
    own_term = np.logaddexp(0.0, own_term)
    # Each other replica's first b - 1 rows: as many negatives as on one's own replica.
    first = (np.arange(n) % per_replica) < per_replica - 1
    groups = np.where((other & first[None, :]), relative, -np.inf)
    group_terms = [
        np.logaddexp(0.0, np.logaddexp.reduce(groups[:, replica == r], axis=1))
        for r in range(n // per_replica)
    ]
    stacked = np.stack(group_terms, axis=1)  # [n, replicas]; own replica's column unused.
    other_term = np.where(replica[:, None] == np.arange(n // per_replica)[None, :], np.nan, stacked)
    other_term = np.nanmean(other_term, axis=1)
    sim_own, sim_other = float(similarity[own].mean()), float(similarity[other].mean())
    return {
        "sim_own": sim_own,
        "sim_other": sim_other,
        "leak": sim_own - sim_other,
        "loss_split": float(np.mean(own_term - other_term)),
    }


# --------------------------------------------------------------------------------------
# Training and measuring.
# --------------------------------------------------------------------------------------


class Cell:
    """One compiled model per (method, mode) on the 8 replicas, reset for each seed and `b`.

    Tracing an 8-replica step costs more than the training at these sizes,
    so the model and its traced functions serve every seed and batch size: a
    run assigns the seed's initial weights (every variable of the model,
    the teacher's too) and the optimizer's state as built.
    """

    def __init__(self, method: str, mode: str, args: argparse.Namespace, strategy: Any) -> None:
        self.method, self.mode, self.args, self.strategy = method, mode, args, strategy
        with strategy.scope():
            self.model = self.build(mode)
            self.model.compile(
                optimizer=keras.optimizers.Adam(args.learning_rate), jit_compile=False
            )
            self.model.optimizer.build(self.model.trainable_variables)
        self.fresh_optimizer = [v.numpy() for v in self.model.optimizer.variables]
        self.embed = embedding_function(self.model.backbone, args.image_size)
        model = self.model
        self.temperature = float(getattr(get_algorithm(method).default_loss(), "temperature", 0.2))

        def student(views: Any) -> Any:
            return model.projector(model.backbone(views, training=True), training=True)

        # As the training step runs the student: both views as one batch where the method
        # does (SimCLR), so that batch norm sees what it sees in training.
        concatenated = get_algorithm(method).concat_views

        def encode(view1: Any, view2: Any) -> tuple:
            # The training forward pass's queries and keys (training-mode batch norm).
            if model.teacher_backbone is None:  # SimCLR: the two views' projections.
                if concatenated:
                    z1, z2 = tf.split(student(tf.concat([view1, view2], 0)), 2)
                else:
                    z1, z2 = student(view1), student(view2)
                return gather_global_batch(z1, z2)
            z1 = student(view1)
            queries = model.predictor(z1, training=True) if model.predictor is not None else z1

            def teacher(v: Any) -> tuple:
                h = model.teacher_backbone(v, training=True)
                return (model.teacher_projector(h, training=True),)

            if model.bn == "shuffle":
                step = model.optimizer.iterations
                (keys,) = shuffle_across_replicas(teacher, (view2,), step, model.shuffle_seed)
            else:
                (keys,) = teacher(view2)
            return gather_global_batch(queries, keys)

        @tf.function
        def probe(batch: Any) -> tuple:
            return strategy.run(encode, args=batch)

        self.probe = probe

    def build(self, mode: str) -> ContrastiveModel:
        dim = 32
        return create_contrastive_model(
            build_backbone(self.args.image_size, self.args.width),
            self.method,
            projector_hidden_dim=2 * dim,
            projector_output_dim=dim,
            predictor_hidden_dim=2 * dim if self.method == "mocov3" else None,
            bn=mode,
        )

    def reset(self, seed: int) -> None:
        """Assigns the seed's initial weights and a fresh optimizer."""
        keras.utils.set_random_seed(seed)
        initial = self.build("per_replica")
        for variable, value in zip(self.model.weights, initial.weights, strict=True):
            if tuple(variable.shape) != tuple(value.shape):
                raise ValueError(f"{variable.path}: {variable.shape} against {value.shape}")
            variable.assign(value.numpy())
        for variable, value in zip(
            self.model.optimizer.variables, self.fresh_optimizer, strict=True
        ):
            variable.assign(value)

    def measure(self, probes: list[Any], per_replica: int, data: ImageData) -> dict[str, float]:
        """The leak figures averaged over the probe batches, and the held-out kNN accuracy."""
        figures = []
        for batch in probes:
            queries, keys = self.probe(batch)
            queries = self.strategy.experimental_local_results(queries)[0].numpy()
            keys = self.strategy.experimental_local_results(keys)[0].numpy()
            figures.append(leak_figures(queries, keys, per_replica, self.temperature))
        result = {key: float(np.mean([f[key] for f in figures])) for key in figures[0]}
        recompute_batch_norm_statistics(self.model.backbone, data.x_train)
        result["knn_accuracy"] = evaluate(self.embed, data)
        return result

    def run(self, seed: int, per_replica: int, data: ImageData, probe_images: np.ndarray) -> dict:
        """Trains from the seed's weights; the figures at the start and after every epoch."""
        args = self.args
        self.reset(seed)
        global_batch = NUM_REPLICAS * per_replica
        rng = np.random.default_rng(seed)
        order = np.stack(
            [
                rng.permutation(len(data.x_train))[: args.steps * global_batch]
                for _ in range(args.epochs)
            ]
        ).reshape(-1, global_batch)
        augmenter = make_augmenter("simclr", args.image_size, seed)
        dataset = view_pairs(data.x_train, order, augmenter)
        # The same held-out batches in every run of this `b`: a fixed seed, each batch a
        # random draw of the held-out images.
        probe_rng = np.random.default_rng(1000)
        probe_order = np.stack(
            [
                probe_rng.permutation(len(probe_images))[:global_batch]
                for _ in range(args.probe_batches)
            ]
        )
        # The same held-out views for every run: a fixed augmenter seed.
        probe_augmenter = make_augmenter("simclr", args.image_size, 1000)
        probe_views = view_pairs(probe_images, probe_order, probe_augmenter)
        probes = list(self.strategy.experimental_distribute_dataset(probe_views))
        epochs = [{"epoch": 0, **self.measure(probes, per_replica, data)}]
        cell = self

        class EveryEpoch(keras.callbacks.Callback):
            def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
                record = {"epoch": epoch + 1, "train_loss": float((logs or {})["loss"])}
                epochs.append({**record, **cell.measure(probes, per_replica, data)})

        started = time.perf_counter()
        self.model.fit(
            dataset,
            epochs=args.epochs,
            steps_per_epoch=args.steps,
            verbose=0,
            callbacks=[EveryEpoch()],
        )
        last = epochs[-1]
        log(
            f"{self.method:7s} {self.mode:11s} b={per_replica} seed={seed} "
            f"leak {epochs[0]['leak']:+.4f} -> {last['leak']:+.4f}, "
            f"loss split {last['loss_split']:+.4f}, kNN {last['knn_accuracy']:.3f} "
            f"({time.perf_counter() - started:.0f} s)"
        )
        return {
            "method": self.method,
            "mode": self.mode,
            "per_replica": per_replica,
            "seed": seed,
            "epochs": epochs,
        }


# --------------------------------------------------------------------------------------
# The report.
# --------------------------------------------------------------------------------------


def _spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.fmean(values), min(values), max(values)


def cell_summary(runs: list[dict[str, Any]], key: str, epoch: int) -> dict[tuple, tuple]:
    """(method, mode, b) -> (mean, min, max) over seeds of `key` at `epoch`."""
    cells: dict[tuple, list[float]] = {}
    for run in runs:
        at = [e for e in run["epochs"] if e["epoch"] == epoch]
        if at and key in at[0]:
            cells.setdefault((run["method"], run["mode"], run["per_replica"]), []).append(
                at[0][key]
            )
    return {cell: _spread(values) for cell, values in cells.items()}


def _fmt(spread: tuple[float, float, float] | None, digits: int = 4) -> str:
    if spread is None:
        return "-"
    mean, low, high = spread
    return f"{mean:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"


def _verdict(base: tuple, other: tuple) -> str:
    apart = base[1] > other[2] or base[2] < other[1]
    return (
        "outside the seed spread (the ranges do not overlap)"
        if apart
        else "within the seed spread (the ranges overlap)"
    )


def findings(report: dict[str, Any]) -> list[str]:
    """One line per (method, b, mode): its leak and kNN against per-replica's, and the verdict.

    A difference is called outside the seed spread when the two modes' ranges
    over seeds (min to max) do not overlap.
    """
    runs, last = report["runs"], report["config"]["epochs"]
    leak = cell_summary(runs, "leak", last)
    knn = cell_summary(runs, "knn_accuracy", last)
    lines = []
    for method, modes in report["methods"].items():
        for b in report["config"]["batch_sizes"]:
            base = leak.get((method, "per_replica", b))
            if base is None:
                continue
            for mode in modes[1:]:
                other = leak.get((method, mode, b))
                if other is None:
                    continue
                line = (
                    f"- {method}, b={b}: leak {base[0]:+.4f} per-replica against "
                    f"{other[0]:+.4f} {mode}: {_verdict(base, other)}"
                )
                base_knn, other_knn = (
                    knn.get((method, "per_replica", b)),
                    knn.get((method, mode, b)),
                )
                if base_knn and other_knn:
                    line += (
                        f"; kNN {base_knn[0]:.3f} against {other_knn[0]:.3f}: "
                        f"{_verdict(base_knn, other_knn)}"
                    )
                lines.append(line + ".")
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    config = report["config"]
    last = config["epochs"]
    parts = [
        "# The batch-norm leak, measured\n",
        f"{NUM_REPLICAS} logical CPU replicas, `b` images each; {config['seeds']} seeds, "
        f"{config['epochs']} epochs of {config['steps']} steps (Adam "
        f"{config['learning_rate']}), {config['image_size']}-pixel glyphs, small ResNet of "
        f"width {config['width']}. Leak: mean cosine similarity of a query to its own "
        "replica's negatives minus to the other replicas' (training-mode forward pass, "
        f"{config['probe_batches']} held-out global batches); loss split: the InfoNCE term "
        "against the own-replica negatives minus against as many average other-replica "
        "negatives. Both are zero without a leak. Cells: mean over seeds [min, max]. Raw "
        f"pixels' kNN accuracy: {report['pixels_knn']:.3f}.\n",
    ]
    rows = []
    leak0 = cell_summary(report["runs"], "leak", 0)
    leak = cell_summary(report["runs"], "leak", last)
    split = cell_summary(report["runs"], "loss_split", last)
    knn0 = cell_summary(report["runs"], "knn_accuracy", 0)
    knn = cell_summary(report["runs"], "knn_accuracy", last)
    for cell in sorted(leak, key=lambda c: (c[0], c[2], c[1])):
        rows.append(
            [
                cell[0],
                cell[2],
                cell[1],
                _fmt(leak0.get(cell)),
                _fmt(leak.get(cell)),
                _fmt(split.get(cell), 3),
                _fmt(knn0.get(cell), 3),
                _fmt(knn.get(cell), 3),
            ]
        )
    header = ["method", "b", "bn", "leak, untrained", f"leak, epoch {last}"]
    header += [f"loss split, epoch {last}", "kNN, untrained", f"kNN, epoch {last}"]
    parts.append(markdown_table(header, rows) + "\n")
    parts.append("## By epoch (leak, mean over seeds)\n")
    epoch_rows = []
    for cell in sorted(leak, key=lambda c: (c[0], c[2], c[1])):
        means = [cell_summary(report["runs"], "leak", e).get(cell) for e in range(last + 1)]
        epoch_rows.append([*cell, *(f"{m[0]:+.4f}" if m else "-" for m in means)])
    parts.append(
        markdown_table(["method", "bn", "b", *(str(e) for e in range(last + 1))], epoch_rows) + "\n"
    )
    parts.append("## What was and was not seen\n")
    parts.append(
        "A negative leak means a query's own-replica negatives are *less* similar to it than "
        "the other replicas' (easier to reject: a negative loss split), a positive one that "
        "they are more similar; either way the replica's batch statistics, not the images, "
        "set them apart. Per (method, `b`, mode), at the last epoch, against per-replica "
        "batch norm:\n"
    )
    parts.append("\n".join(findings(report)) + "\n")
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv if argv is None else argv)
    args = parse_args(argv[1:])
    # The logical replicas must exist before TensorFlow initialises its runtime.
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_REPLICAS
    )
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    data = load_data("glyphs", image_size=args.image_size, seed=0)
    if len(data.x_test) < NUM_REPLICAS * max(args.batch_sizes):
        raise SystemExit(f"--batch-sizes {max(args.batch_sizes)}: too few held-out images.")
    rng = np.random.default_rng(0)
    memory = rng.permutation(len(data.x_train))[:KNN_IMAGES]
    queries = rng.permutation(len(data.x_test))[:KNN_IMAGES]
    knn_data = dataclasses.replace(
        data,
        x_train=data.x_train[memory],
        y_train=data.y_train[memory],
        x_test=data.x_test[queries],
        y_test=data.y_test[queries],
    )
    probe_images = data.x_test
    flat = lambda x: x.reshape(len(x), -1)  # noqa: E731
    pixels = knn_accuracy(
        flat(knn_data.x_train), knn_data.y_train, flat(knn_data.x_test), knn_data.y_test, k=20
    )
    strategy = tf.distribute.MirroredStrategy(devices[:NUM_REPLICAS])
    out = output_folder(args.out, args.quick, NAME)
    out.mkdir(parents=True, exist_ok=True)
    chosen = methods(args.methods)
    report = {
        "meta": machine_record(),
        "command": command_line(MODULE, argv[1:]),
        "quick": args.quick,
        "config": {
            "seeds": args.seeds,
            "epochs": args.epochs,
            "steps": args.steps,
            "batch_sizes": list(args.batch_sizes),
            "probe_batches": args.probe_batches,
            "image_size": args.image_size,
            "width": args.width,
            "learning_rate": args.learning_rate,
            "replicas": NUM_REPLICAS,
        },
        "methods": {m: list(modes) for m, modes in chosen.items()},
        "pixels_knn": pixels,
        "runs": [],
    }
    started = time.perf_counter()
    for method, modes in chosen.items():
        for mode in modes:
            cell = Cell(method, mode, args, strategy)
            for b in args.batch_sizes:
                for seed in range(args.seeds):
                    report["runs"].append(cell.run(seed, b, knn_data, probe_images))
                    report["seconds"] = round(time.perf_counter() - started, 1)
                    write_results(out, NAME, report, render_markdown)
    print(render_markdown(report))
    print(f"Wrote {out / (NAME + '.json')}")
    return report


if __name__ == "__main__":
    main()
