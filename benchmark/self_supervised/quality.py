"""Benchmark of representation quality: per-replica vs synchronised batch norm vs one device.

For SimSiam, SimCLR and Barlow Twins, trains a small ResNet-style backbone
self-supervised under three settings that see exactly the same global batches:

* (a) `per_replica`: 4 replicas (`MirroredStrategy`), plain
  `keras.layers.BatchNormalization`, so every replica normalises its own
  `b` images;
* (b) `sync`: 4 replicas, `sync_bn=True` (every batch norm of the backbone,
  projector and predictor uses the statistics of the global batch `4 b`);
* (c) `single`: one device, the global batch `4 b` in one piece.

The losses gather embeddings across replicas, so (a), (b) and (c) minimise
the same global-batch objective; only the batch-norm statistics differ. For
each seed the three settings start from the same weights and see the same
images, in the same order, with the same augmentations. After training, the
backbone's batch-norm moving statistics are recomputed from the clean
training images (`recompute_batch_norm_statistics`, precise BN, as the tfsim
jobs do: after a short run Keras' 0.99 momentum still weighs the initial
mean 0 and variance 1 heavily), the backbone embeds the (un-augmented)
training and test images and the weighted kNN top-1 accuracy
(`knn_accuracy`, k=20, temperature 0.07) of the test images is recorded.
Results are reported as mean and spread over seeds, next to two references:
kNN on raw pixels and on the untrained backbone, evaluated as built (no
recomputation, as the jobs' "before" figure).

The default data is the package's glyphs (`load_data("glyphs")`: characters
drawn in matplotlib's fonts, every class, held-out fonts as queries), on
which raw pixels leave room for learning; `--data digits` runs the
scikit-learn digits of the earlier reports.

The replicas are logical CPU devices carved out of the host (4 of them), so
this measures what the statistics do to learning, not speed.

The options are in `quality_options.py`, the models, data and training in
`quality_training.py`, the cells and their tables in `quality_tables.py`; this
module trains every cell and writes the results. Results go to
`<out>/ssl_quality.md` and `<out>/ssl_quality.json`: `benchmark/results`
for a full run, a new temporary folder (printed) for a `--quick` one, so that a
smoke run never replaces the full results; `--out` chooses the folder either way.
`python -m benchmark.report` turns the JSON into plots and `benchmark/results/REPORT.md`.

Usage (from the repository root):

    python -m benchmark.self_supervised.quality          # full run on glyphs, ~20 min on 2 cores
    python -m benchmark.self_supervised.quality --quick  # smoke run, under 2 minutes
    python -m benchmark.self_supervised.quality --data digits --epochs 8
    python -m benchmark.self_supervised.quality --data path/to/class_folders --image-size 32
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# Importing these creates no TensorFlow context, so the logical devices can
# still be configured in main().
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmark.common import command_line, output_folder  # noqa: E402
from benchmark.self_supervised.quality_options import RunConfig, parse_args, run_config  # noqa: E402
from benchmark.self_supervised.quality_tables import (  # noqa: E402
    KNN_K,
    NUM_REPLICAS,
    SETTINGS,
    render_markdown,
)
from benchmark.self_supervised.quality_training import (  # noqa: E402
    Trainer,
    build_model,
    configure_devices,
    embedding_function,
    evaluate,
    log,
    make_strategy,
)
from tensorflow_similarity.callbacks import knn_accuracy  # noqa: E402
from tensorflow_similarity.datasets import ImageData, check_data_spec, load_data  # noqa: E402
from tensorflow_similarity.models import ContrastiveModel  # noqa: E402

MODULE = "benchmark.self_supervised.quality"


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean, sample standard deviation, min and max of the kNN accuracy per cell.

    Also the paired differences `(a) - (c)` and `(b) - (c)` per seed (same
    initial weights and data), which cancel most of the seed-to-seed noise.
    """
    cells: dict[tuple[str, int, str], dict[int, float]] = {}
    for run in runs:
        key = (run["algorithm"], run["batch_per_replica"], run["setting"])
        cells.setdefault(key, {})[run["seed"]] = run["knn_accuracy"]
    rows = []
    for (algorithm, batch, setting), by_seed in cells.items():
        values = list(by_seed.values())
        row = {
            "algorithm": algorithm,
            "batch_per_replica": batch,
            "setting": setting,
            "n": len(values),
            "mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values),
            "max": max(values),
        }
        single = cells.get((algorithm, batch, "single"), {})
        differences = [by_seed[s] - single[s] for s in by_seed if s in single]
        if setting != "single" and differences:
            row["diff_vs_single_mean"] = statistics.fmean(differences)
            row["diff_vs_single_std"] = (
                statistics.stdev(differences) if len(differences) > 1 else 0.0
            )
        rows.append(row)
    return rows


def metadata(
    config: RunConfig,
    argv: Sequence[str],
    data: ImageData,
    reference: ContrastiveModel,
    module: str = MODULE,
) -> dict[str, Any]:
    backbone = reference.backbone
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(module, argv[1:]),
        "hardware": (
            f"{NUM_REPLICAS} logical CPU devices on {os.cpu_count()} CPU cores "
            f"({platform.processor() or platform.machine()})"
        ),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "data_source": data.source,
        "train_images": len(data.x_train),
        "test_images": len(data.x_test),
        "backbone_params": backbone.count_params(),
        "backbone_batch_norm_layers": sum(
            isinstance(layer, keras.layers.BatchNormalization) for layer in backbone.layers
        ),
        "replicas": NUM_REPLICAS,
        # Trained backbones: moving statistics recomputed from the clean training images
        # before evaluation; the untrained backbone is evaluated as built.
        "precise_bn": True,
        "config": dataclasses.asdict(config),
    }


def main(
    argv: Sequence[str] | None = None,
    name: str = "ssl_quality",
    module: str = MODULE,
    forwarded: Sequence[str] = (),
) -> dict[str, Any]:
    """Trains every cell and writes `<out>/<name>.md` and `<out>/<name>.json`.

    Args:
        argv: The command line, `sys.argv` by default; recorded as the command.
        name: The results' name: `ssl_quality`, or `ssl_small_batch` for
            `benchmark.self_supervised.small_batch`, which presets some options.
        module: The benchmark module run by the user, recorded in the command.
        forwarded: Options parsed before `argv[1:]` (the presets, which the
            command line may override), not recorded in the command.
    """
    argv = list(sys.argv if argv is None else argv)
    args = parse_args([*forwarded, *argv[1:]])
    config = run_config(args)
    try:
        check_data_spec(config.data)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    # Loading resizes with TensorFlow, which fixes the devices: configure them first.
    devices = configure_devices()
    try:
        data = load_data(config.data, image_size=config.image_size, seed=0, limit=config.limit)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    strategy = make_strategy(devices)
    out = output_folder(args.out, config.quick, name)
    started = time.perf_counter()
    log(
        f"{data.source}: {len(data.x_train)} train / {len(data.x_test)} test images; "
        f"{len(config.algorithms)} algorithms x {len(config.batch_sizes)} batch sizes x "
        f"{len(SETTINGS)} settings x {len(config.seeds)} seeds"
    )

    flat = lambda x: x.reshape(len(x), -1)  # noqa: E731
    baselines = [
        {
            "name": "raw pixels",
            "knn_accuracy": knn_accuracy(
                flat(data.x_train), data.y_train, flat(data.x_test), data.y_test, k=KNN_K
            ),
        }
    ]
    references = {}
    for seed in config.seeds:
        for algorithm in config.algorithms:
            keras.utils.set_random_seed(seed)
            references[algorithm, seed] = build_model(algorithm, config, sync_bn=False)
        baselines.append(
            {
                "name": "untrained backbone",
                "seed": seed,
                "knn_accuracy": evaluate(
                    embedding_function(
                        references[config.algorithms[0], seed].backbone, config.image_size
                    ),
                    data,
                ),
            }
        )
    reference_meta = metadata(
        config, argv, data, references[config.algorithms[0], config.seeds[0]], module
    )
    out.mkdir(parents=True, exist_ok=True)

    def write(runs: list[dict[str, Any]], complete: bool) -> dict[str, Any]:
        report = {
            "meta": {
                **reference_meta,
                "complete": complete,
                "elapsed_s": round(time.perf_counter() - started, 1),
            },
            "baselines": baselines,
            "runs": runs,
            "summary": summarise(runs),
        }
        (out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
        return report

    # Seed-major, with every trainer kept: a run stopped early still holds whole seeds
    # of every cell, and each model is traced once.
    trainers: dict[tuple[str, str], Trainer] = {}
    runs = []
    for seed in config.seeds:
        for algorithm in config.algorithms:
            for setting in SETTINGS:
                if (algorithm, setting) not in trainers:
                    trainers[algorithm, setting] = Trainer(algorithm, setting, config, strategy)
                for batch in config.batch_sizes:
                    runs.append(
                        trainers[algorithm, setting].run(
                            batch, seed, references[algorithm, seed], data
                        )
                    )
        write(runs, complete=False)

    report = write(runs, complete=True)
    markdown = render_markdown(report)
    print()
    print(markdown)
    (out / f"{name}.md").write_text(markdown)
    print(f"Wrote {out / f'{name}.md'} and {out / f'{name}.json'}")
    return report


if __name__ == "__main__":
    main()
