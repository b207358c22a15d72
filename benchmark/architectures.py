"""Benchmark of the architecture builders: build and rebuild time, size, synced step time.

For each builder (ResNet18Sim, ResNet50Sim, EfficientNetSim B0, ConvNeXtSim
tiny, BackboneSim on a keras-cv ResNetV2) at `--size` (224 by default):

1. Construction time with plain batch norm, with `sync_bn=True`, and, for
   the application builders, the time of the rebuild alone
   (`convert_sync_batchnorm` on the built backbone) as a fraction of the
   backbone's construction time. Target: the rebuild adds at most 50%.
   The native builders (ResNet-18/50) create synced layers directly, so they
   have no rebuild.
2. Parameter counts and batch-norm layer counts.
3. One training step (forward, backward, SGD update) under a 4-replica
   MirroredStrategy, synced vs plain, for ResNet18Sim at `--step-size`
   (medians of `--repeats` steps after one warm-up step).

The replicas are logical CPUs carved out of one host: step times measure the
synchronisation overhead, not a speed-up. Results go to
`<out>/architectures.md` and `<out>/architectures.json`.

Usage:

    python benchmark/architectures.py            # full run, a few minutes on 2 cores
    python benchmark/architectures.py --quick    # smoke run at 64x64, ResNet-18 and B0 only
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

NUM_REPLICAS = 4


def _seconds(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def _keras_cv_backbone(size: int) -> keras.Model:
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
    from tensorflow_similarity import architectures as arch

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
    }
    if quick:
        table = {k: v for k, v in table.items() if k in ("ResNet18Sim", "EfficientNetSim(B0)")}
    return table


def measure_builds(size: int, quick: bool) -> list[dict]:
    from tensorflow_similarity.architectures.head import all_layers
    from tensorflow_similarity.distribute.conversion import convert_sync_batchnorm
    from tensorflow_similarity.layers.sync_batch_norm import SyncBatchNormalization

    rows = []
    for name, (build, build_backbone) in builders(size, quick).items():
        keras.backend.clear_session()
        build(False)  # warm-up: first-use imports and op registrations
        plain, plain_s = _seconds(lambda build=build: build(False))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            synced, synced_s = _seconds(lambda build=build: build(True))
        row = {
            "builder": name,
            "params": plain.count_params(),
            "batch_norm_layers": sum(
                isinstance(layer, keras.layers.BatchNormalization) for layer in all_layers(plain)
            ),
            "synced_layers": sum(
                isinstance(layer, SyncBatchNormalization) for layer in all_layers(synced)
            ),
            "build_plain_s": plain_s,
            "build_sync_s": synced_s,
            "backbone_s": None,
            "rebuild_s": None,
        }
        if build_backbone is not None:
            backbone, row["backbone_s"] = _seconds(build_backbone)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _, row["rebuild_s"] = _seconds(lambda b=backbone: convert_sync_batchnorm(b))
        rows.append(row)
        print(row, flush=True)
    return rows


def measure_step(size: int, repeats: int) -> dict:
    from tensorflow_similarity.architectures import ResNet18Sim

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
            model = ResNet18Sim((size, size, 3), sync_bn=sync_bn)
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


def write_results(out: Path, payload: dict) -> str:
    lines = [
        "# Architecture builders: construction, rebuild, training step",
        "",
        f"Measured {payload['date']} on {payload['machine']}, TensorFlow {payload['tensorflow']}, "
        f"Keras {payload['keras']}. Builds at {payload['size']}x{payload['size']}"
        f"{' (--quick)' if payload['quick'] else ''}.",
        "",
        "| builder | params | BN layers | synced | build plain (s) | build sync_bn (s) "
        "| backbone (s) | rebuild (s) | rebuild / backbone |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in payload["builds"]:
        ratio = (
            row["rebuild_s"] / row["backbone_s"]
            if row["rebuild_s"] is not None and row["backbone_s"]
            else None
        )
        lines.append(
            f"| {row['builder']} | {row['params']:,} | {row['batch_norm_layers']} | "
            f"{row['synced_layers']} | {_fmt(row['build_plain_s'])} | "
            f"{_fmt(row['build_sync_s'])} | {_fmt(row['backbone_s'])} | "
            f"{_fmt(row['rebuild_s'])} | {_fmt(ratio and 100 * ratio, 0)}"
            f"{'%' if ratio is not None else ''} |"
        )
    lines += [
        "",
        "Native builders (ResNet-18/50) create `SyncBatchNormalization` directly: no rebuild. "
        "ConvNeXt has no batch norm: nothing is rebuilt (a warning says so). "
        "Target: rebuild / backbone <= 50%.",
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
    text = "\n".join(lines)
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
    parser.add_argument("--no-step", action="store_true", help="skip the training step")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    if args.quick:
        args.size, args.repeats = 64, 2

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * NUM_REPLICAS
    )

    payload = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "size": args.size,
        "step_size": args.step_size,
        "repeats": args.repeats,
        "quick": args.quick,
        "builds": measure_builds(args.size, args.quick),
    }
    if not args.no_step:
        payload["step"] = measure_step(args.step_size, args.repeats)
    print(write_results(args.out, payload))


if __name__ == "__main__":
    main()
