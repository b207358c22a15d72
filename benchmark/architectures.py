"""Benchmark of the architecture builders: build and rebuild time, size, synced step time.

For each builder (ResNet18Sim, ResNet50Sim, EfficientNetSim B0, ConvNeXtSim
tiny, BackboneSim on a keras-cv ResNetV2) at `--size` (224 by default):

1. Construction time with plain batch norm and with `sync_bn=True`, and
   their ratio. Target: synchronised batch norm adds at most 50% to a
   builder's construction time. The application builders (EfficientNet,
   ConvNeXt) convert their own temporary `keras.applications` model with
   `convert_sync_batchnorm(..., share_layers=True)`; BackboneSim shares the
   caller's backbone's layers by default and is also built with
   `share_layers=False` (a copy), in a row of its own. For these, the
   rebuild alone is also timed both ways on a built backbone, as a
   fraction of the backbone's construction time. The native builders
   (ResNet-18/50) create synced layers directly, so they have no rebuild.
2. Parameter counts and batch-norm layer counts.
3. One training step (forward, backward, SGD update) under a 4-replica
   MirroredStrategy, synced vs plain, for ResNet18Sim at `--step-size`
   (medians of `--repeats` steps after one warm-up step).

Every construction time is the median of `--build-repeats` runs, plain and
synced interleaved (alternating which goes first, with garbage collected
before each), so that load from other processes hits both alike.
The replicas are logical CPUs carved out of one host: step times measure the
synchronisation overhead, not a speed-up. Results go to
`<out>/architectures.md` and `<out>/architectures.json`: `benchmark/results` for
a full run, a new temporary folder (printed) for a `--quick` one.

Usage (from the repository root):

    python -m benchmark.architectures            # full run, a few minutes on 2 cores
    python -m benchmark.architectures --quick    # smoke run at 64x64, ResNet-18 and B0 only
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmark.common import machine_record, output_folder  # noqa: E402
from tensorflow_similarity import architectures as arch  # noqa: E402
from tensorflow_similarity.distribute import convert_sync_batchnorm  # noqa: E402
from tensorflow_similarity.layer_walk import all_layers  # noqa: E402
from tensorflow_similarity.layers import SyncBatchNormalization  # noqa: E402

NUM_REPLICAS = 4


def _seconds(fn):
    # Collect first, so that no timed build pays for the garbage of the one before.
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def _keras_cv_backbone(size: int) -> keras.Model:
    # keras-cv is optional: only the full run's BackboneSim rows need it.
    import keras_cv

    return keras_cv.models.ResNetV2Backbone(
        stackwise_filters=[64, 128, 256, 512],
        stackwise_blocks=[2, 2, 2, 2],
        stackwise_strides=[1, 2, 2, 2],
        include_rescaling=True,
        input_shape=(size, size, 3),
    )


def builders(size: int, quick: bool) -> dict:
    """Returns name -> (build(sync_bn), build_backbone() or None for native builders)."""
    shape = (size, size, 3)
    table = {
        "ResNet18Sim": (lambda s: arch.ResNet18Sim(shape, sync_bn=s), None),
        "ResNet50Sim": (lambda s: arch.ResNet50Sim(shape, sync_bn=s), None),
        "EfficientNetSim(B0)": (
            lambda s: arch.EfficientNetSim(shape, sync_bn=s),
            lambda: arch.build_efficientnet(shape),
        ),
        "ConvNeXtSim(tiny)": (
            lambda s: arch.ConvNeXtSim(shape, sync_bn=s),
            lambda: arch.build_convnext(shape),
        ),
        "BackboneSim(keras-cv ResNetV2)": (
            lambda s: arch.BackboneSim(_keras_cv_backbone(size), sync_bn=s),
            lambda: _keras_cv_backbone(size),
        ),
        "BackboneSim(keras-cv ResNetV2, share_layers=False)": (
            lambda s: arch.BackboneSim(_keras_cv_backbone(size), sync_bn=s, share_layers=False),
            None,
        ),
    }
    if quick:
        table = {k: v for k, v in table.items() if k in ("ResNet18Sim", "EfficientNetSim(B0)")}
    return table


def _median_seconds(fn, repeats: int) -> float:
    return statistics.median(_seconds(fn)[1] for _ in range(repeats))


def measure_builds(size: int, quick: bool, repeats: int) -> list[dict]:
    def quietly(fn):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()

    rows = []
    for name, (build, build_backbone) in builders(size, quick).items():
        keras.backend.clear_session()
        plain = build(False)  # also a warm-up: first-use imports and op registrations
        synced = quietly(lambda build=build: build(True))
        row = {
            "builder": name,
            "params": plain.count_params(),
            "batch_norm_layers": sum(
                isinstance(layer, keras.layers.BatchNormalization) for layer in all_layers(plain)
            ),
            "synced_layers": sum(
                isinstance(layer, SyncBatchNormalization) for layer in all_layers(synced)
            ),
            "build_plain_s": [],
            "build_sync_s": [],
            "backbone_s": [],
            "rebuild_copy_s": [],
            "rebuild_shared_s": [],
        }
        del plain, synced
        for repeat in range(repeats):
            keras.backend.clear_session()
            # Alternate which of the two goes first, so neither always runs on a fresh session.
            order = (False, True) if repeat % 2 == 0 else (True, False)
            for sync_bn in order:
                seconds = _seconds(lambda build=build, s=sync_bn: quietly(lambda: build(s)))[1]
                row["build_sync_s" if sync_bn else "build_plain_s"].append(seconds)
            if build_backbone is not None:
                backbone, seconds = _seconds(build_backbone)
                row["backbone_s"].append(seconds)
                row["rebuild_copy_s"].append(
                    _seconds(lambda b=backbone: quietly(lambda: convert_sync_batchnorm(b)))[1]
                )
                row["rebuild_shared_s"].append(
                    _seconds(
                        lambda b=backbone: quietly(
                            lambda: convert_sync_batchnorm(b, share_layers=True)
                        )
                    )[1]
                )
        for key in (
            "build_plain_s",
            "build_sync_s",
            "backbone_s",
            "rebuild_copy_s",
            "rebuild_shared_s",
        ):
            row[key] = statistics.median(row[key]) if row[key] else None
        row["sync_over_plain"] = row["build_sync_s"] / row["build_plain_s"]
        rows.append(row)
        print(row, flush=True)
    return rows


def measure_step(size: int, repeats: int) -> dict:
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")][:NUM_REPLICAS]
    strategy = tf.distribute.MirroredStrategy(cpus)
    per_replica = 8
    batch = per_replica * NUM_REPLICAS
    images = np.random.default_rng(0).uniform(size=(batch, size, size, 3)).astype("float32")
    dataset = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensors(images).repeat()
    )
    iterator = iter(dataset)
    result = {}
    for label, sync_bn in (("plain", False), ("sync", True)):
        with strategy.scope():
            model = arch.ResNet18Sim((size, size, 3), sync_bn=sync_bn)
            optimizer = keras.optimizers.SGD(0.01)
            optimizer.build(model.trainable_variables)

        @tf.function
        def step(x, model=model, optimizer=optimizer):
            def replica_step(x):
                with tf.GradientTape() as tape:
                    y = model(x, training=True)
                    loss = tf.reduce_mean(tf.reduce_sum(y[:, :1], -1)) / NUM_REPLICAS
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply(grads, model.trainable_variables)
                return loss

            return strategy.reduce("SUM", strategy.run(replica_step, args=(x,)), axis=None)

        (_, trace_s) = _seconds(lambda step=step: float(step(next(iterator))))
        times = []
        for _ in range(repeats):
            _, seconds = _seconds(lambda step=step: float(step(next(iterator))))
            times.append(seconds)
        result[label] = {"first_step_s": trace_s, "median_step_s": statistics.median(times)}
        print(label, result[label], flush=True)
    result["sync_over_plain"] = result["sync"]["median_step_s"] / result["plain"]["median_step_s"]
    return result


def _fmt(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


TARGET_RATIO = 1.5


def target_verdict(builds: list[dict]) -> str:
    """One sentence: which builds meet build sync_bn <= `TARGET_RATIO` x build plain."""
    over = [row for row in builds if row["sync_over_plain"] > TARGET_RATIO]
    text = (
        f"Target build sync_bn <= {TARGET_RATIO}x build plain: met by "
        f"{len(builds) - len(over)} of {len(builds)} rows"
    )
    if not over:
        return text + "."
    missed = ", ".join(f"{row['builder']} {row['sync_over_plain']:.2f}x" for row in over)
    return f"{text}; missed by {missed}."


def render_markdown(payload: dict) -> str:
    """The tables of `architectures.md` for a results payload (also used by report.py)."""
    lines = [
        "# Architecture builders: construction, rebuild, training step",
        "",
        f"Measured {payload['date']} on {payload['machine']}, TensorFlow {payload['tensorflow']}, "
        f"Keras {payload['keras']}, load average {payload.get('load_average', 0):.1f} at the "
        f"start. Builds at {payload['size']}x{payload['size']}"
        f"{' (--quick)' if payload['quick'] else ''}.",
        "",
        "| builder | params | BN layers | synced | build plain (s) | build sync_bn (s) "
        "| sync / plain | backbone (s) | rebuild, copy (s) | rebuild, shared (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def rebuild(row, key):
        if row[key] is None or not row["backbone_s"]:
            return "-"
        return f"{row[key]:.2f} ({100 * row[key] / row['backbone_s']:.0f}%)"

    for row in payload["builds"]:
        lines.append(
            f"| {row['builder']} | {row['params']:,} | {row['batch_norm_layers']} | "
            f"{row['synced_layers']} | {_fmt(row['build_plain_s'])} | "
            f"{_fmt(row['build_sync_s'])} | {row['sync_over_plain']:.2f}x | "
            f"{_fmt(row['backbone_s'])} | {rebuild(row, 'rebuild_copy_s')} | "
            f"{rebuild(row, 'rebuild_shared_s')} |"
        )
    lines += [
        "",
        f"Build times are medians of {payload['build_repeats']} runs, plain and sync_bn "
        "interleaved, alternating which goes first. EfficientNetSim and ConvNeXtSim convert "
        "their own temporary "
        "application with `share_layers=True` (the shared column); BackboneSim shares the "
        "caller's backbone's layers other than batch norm by default (the shared column), and "
        "copies the backbone with `share_layers=False` (its own row; the copy column). Rebuild "
        "percentages are of the backbone's construction time. Native builders (ResNet-18/50) "
        "create `SyncBatchNormalization` directly: no rebuild. ConvNeXt has no batch norm: "
        "nothing is rebuilt (a warning says so).",
        "",
        target_verdict(payload["builds"]),
        "",
    ]
    step = payload.get("step")
    if step:
        lines += [
            f"Training step of ResNet18Sim at {payload['step_size']}x{payload['step_size']}, "
            f"{NUM_REPLICAS} replicas (logical CPUs), 8 images per replica, median of "
            f"{payload['repeats']} steps:",
            "",
            "| batch norm | first step incl. tracing (s) | median step (s) |",
            "|---|---:|---:|",
            f"| plain | {_fmt(step['plain']['first_step_s'])} | "
            f"{_fmt(step['plain']['median_step_s'], 3)} |",
            f"| sync | {_fmt(step['sync']['first_step_s'])} | "
            f"{_fmt(step['sync']['median_step_s'], 3)} |",
            "",
            f"sync / plain step time: {step['sync_over_plain']:.2f}",
            "",
        ]
    return "\n".join(lines)


def write_results(out: Path, payload: dict) -> str:
    text = render_markdown(payload)
    out.mkdir(parents=True, exist_ok=True)
    (out / "architectures.md").write_text(text)
    (out / "architectures.json").write_text(json.dumps(payload, indent=2))
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 64x64, two builders")
    parser.add_argument("--size", type=int, default=224, help="image size of the builds")
    parser.add_argument("--step-size", type=int, default=32, help="image size of the step")
    parser.add_argument("--repeats", type=int, default=5, help="timed training steps")
    parser.add_argument("--build-repeats", type=int, default=4, help="timed builds (median)")
    parser.add_argument("--no-step", action="store_true", help="skip the training step")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results folder (default: benchmark/results; with --quick, a new temporary folder)",
    )
    args = parser.parse_args()
    if args.quick:
        args.size, args.repeats, args.build_repeats = 64, 2, 1
    out = output_folder(args.out, args.quick, "architectures")

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * NUM_REPLICAS
    )

    payload = {
        **machine_record(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "size": args.size,
        "step_size": args.step_size,
        "repeats": args.repeats,
        "build_repeats": args.build_repeats,
        "quick": args.quick,
        "builds": measure_builds(args.size, args.quick, args.build_repeats),
    }
    if not args.no_step:
        payload["step"] = measure_step(args.step_size, args.repeats)
    print(write_results(out, payload))


if __name__ == "__main__":
    main()
