"""The `tfsim` command: self-supervised pretraining with synchronised batch norm.

`tfsim train` (or `python -m tensorflow_similarity train`) trains a
`ContrastiveModel` under a `tf.distribute` strategy and reports the kNN
accuracy of its embeddings. With no options it runs a small job that needs no
network: SimSiam with a ResNet-18 on scikit-learn's handwritten digits, batch
norm synchronised over 2 replicas (logical CPU devices when there is no GPU,
all visible GPUs when there are). Run `tfsim train --help` for every option.

What it writes to `--output` (default `tfsim-output`):

* `model.keras`: the trained `ContrastiveModel` (`keras.saving.load_model`).
* `history.json`: per-epoch loss, collapse monitors, kNN accuracy, seconds
  and images per second, and the kNN accuracy before training.
* `run.json`: the options of the run (what `--resume` continues).
* `summary.json`: the table printed at the end.
* `logs/`: TensorBoard logs (`tensorboard --logdir OUTPUT/logs`).
* `loss.png`, `knn_accuracy.png`, `embeddings.png`: the curves and a 2-D PCA
  projection of the test embeddings coloured by label.
* `backup/`: the last completed epoch while training runs (deleted at the
  end); `--resume` continues from it after an interruption.

Bad input (an unknown algorithm, a missing data folder, an unreadable image,
a batch smaller than the replicas, ...) ends with `tfsim: error: ...` and exit
status 2 before any model is built; Ctrl-C ends with exit status 130 and
keeps what was written.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import keras

ALGORITHMS = ("simsiam", "simclr", "barlow", "vicreg")
# Smallest image side each backbone accepts (ResNet-18's CIFAR stem keeps 8x8 images whole).
BACKBONES = {"resnet18": 8, "resnet50": 32, "efficientnet": 32, "convnext": 32}
STRATEGIES = ("mirrored", "multi-worker", "one-device")

# The default job must finish in a few minutes on two CPU cores: a full-width
# ResNet-18 costs about 4x more per image at 16x16 than at the digits' own 8x8.
DEFAULT_IMAGE_SIZE = 8
DEFAULT_EPOCHS = 3
DEFAULT_BATCH_SIZE = 128
DEFAULT_CPU_REPLICAS = 2
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

# Options that define the run: `--resume` takes them from run.json, and giving a different
# value is an error (the backup would not fit the model or the schedule).
_RUN_OPTIONS = (
    "algorithm",
    "backbone",
    "sync_bn",
    "sync_group_size",
    "replicas",
    "strategy",
    "data",
    "image_size",
    "epochs",
    "batch_size",
    "learning_rate",
    "projector_dim",
    "seed",
    "limit",
)


class _UsageError(Exception):
    """Bad input: reported as `tfsim: error: <message>`, exit status 2, no traceback."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"tfsim: error: {message}\n")


def build_parser(suppress_defaults: bool = False) -> argparse.ArgumentParser:
    """Returns the `tfsim` argument parser.

    Args:
        suppress_defaults: Leave options that are not given out of the parsed
            namespace (used to tell explicit options from defaults on
            `--resume`). Defaults to `False`.

    Returns:
        An `argparse.ArgumentParser` with the `train` sub-command.
    """

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress_defaults else value

    parser = _Parser(
        prog="tfsim",
        description="Self-supervised learning with exact synchronised batch norm (Keras 3).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    train = commands.add_parser(
        "train",
        help="pretrain a self-supervised model and report the kNN accuracy of its embeddings",
        description=(
            "Pretrain a self-supervised model with synchronised batch norm under tf.distribute "
            "and report how good its embeddings are (weighted kNN accuracy on held-out "
            "images). With no options: SimSiam, ResNet-18, sync batch norm over 2 replicas, "
            f"the scikit-learn digits at {DEFAULT_IMAGE_SIZE}x{DEFAULT_IMAGE_SIZE}, "
            f"{DEFAULT_EPOCHS} epochs: a few minutes on two CPU cores."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    train.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default=default("simsiam"),
        help="self-supervised algorithm (loss, projector and predictor of its paper)",
    )
    train.add_argument(
        "--backbone",
        choices=tuple(BACKBONES),
        default=default("resnet18"),
        help="backbone network: ResNet-18 (images from 8x8), ResNet-50, EfficientNet-B0, "
        "ConvNeXt-Tiny (images from 32x32), all trained from scratch",
    )
    train.add_argument(
        "--sync-bn",
        action=argparse.BooleanOptionalAction,
        default=default(True),
        help="synchronise batch norm across replicas (global-batch statistics); "
        "--no-sync-bn normalises each replica's batch on its own",
    )
    train.add_argument(
        "--sync-group-size",
        type=int,
        default=default(None),
        metavar="G",
        help="synchronise batch norm within groups of G consecutive replicas "
        "(GroupSyncBatchNorm); G must divide the number of replicas. Default: all replicas",
    )
    train.add_argument(
        "--replicas",
        type=int,
        default=default(None),
        metavar="N",
        help="replicas of --strategy mirrored: the first N GPUs, or N logical CPU devices "
        f"when there is no GPU. Default: all visible GPUs, else {DEFAULT_CPU_REPLICAS} CPU "
        "devices",
    )
    train.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default=default("mirrored"),
        help="tf.distribute strategy: MirroredStrategy on this machine, "
        "MultiWorkerMirroredStrategy over the cluster in TF_CONFIG (replicas: workers x "
        "local GPUs, or one CPU per worker), or OneDeviceStrategy",
    )
    train.add_argument(
        "--data",
        default=default("digits"),
        metavar="SOURCE",
        help="'digits' (scikit-learn's 1,797 handwritten 8x8 digits, no network needed), a "
        "folder with one sub-folder of images per class, or tfds:NAME (TensorFlow Datasets, "
        "if installed and its data reachable). Each class is split 80/20 into train/test",
    )
    train.add_argument(
        "--image-size",
        type=int,
        default=default(DEFAULT_IMAGE_SIZE),
        metavar="PIXELS",
        help="side of the square images the model sees (the data are resized); the default "
        "keeps the digits' own resolution so that the default run stays fast on CPUs",
    )
    train.add_argument(
        "--epochs", type=int, default=default(DEFAULT_EPOCHS), help="training epochs"
    )
    train.add_argument(
        "--batch-size",
        type=int,
        default=default(DEFAULT_BATCH_SIZE),
        help="global batch size, split over the replicas (at least one image each)",
    )
    train.add_argument(
        "--learning-rate",
        type=float,
        default=default(0.05),
        metavar="LR",
        help="peak learning rate of SGD (momentum 0.9, weight decay 5e-4, cosine decay)",
    )
    train.add_argument(
        "--projector-dim",
        type=int,
        default=default(512),
        metavar="D",
        help="width of the projector's layers (SimSiam's predictor: D/4); the papers use "
        "2048-8192 for ImageNet",
    )
    train.add_argument(
        "--seed", type=int, default=default(0), help="seed of the split, weights and views"
    )
    train.add_argument(
        "--limit",
        type=int,
        default=default(None),
        metavar="N",
        help="use at most N images (a random subset), for quick runs. Default: all",
    )
    train.add_argument(
        "--output",
        default=default("tfsim-output"),
        metavar="DIR",
        help="folder for the model, history, TensorBoard logs and plots (created if needed)",
    )
    train.add_argument(
        "--resume",
        action="store_true",
        default=default(False),
        help="continue the interrupted run in --output from its last completed epoch, "
        "with the options it was started with",
    )
    # Test hook: sends SIGINT to this process after epoch N, as Ctrl-C would.
    train.add_argument(
        "--interrupt-after-epoch", type=int, default=default(None), help=argparse.SUPPRESS
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs the `tfsim` command.

    Args:
        argv: Command-line arguments without the program name. Defaults to
            `sys.argv[1:]`.

    Returns:
        The exit status: 0 on success, 2 for bad input, 130 when interrupted.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    explicit = vars(build_parser(suppress_defaults=True).parse_args(argv))
    try:
        return _train(args, explicit)
    except _UsageError as error:
        print(f"tfsim: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        # Interrupted before training started (training handles its own interruption).
        print("\ntfsim: interrupted before training started.", file=sys.stderr)
        return EXIT_INTERRUPTED


def _train(args: argparse.Namespace, explicit: dict[str, Any]) -> int:
    output = Path(args.output).expanduser()
    if args.resume:
        args = _resumed_options(args, explicit, output)
    _check_numbers(args)
    _check_output(output)
    from tensorflow_similarity.data import check_data_spec

    try:
        check_data_spec(args.data)
    except ValueError as error:
        raise _UsageError(str(error)) from None
    plan = _plan_devices(args)
    _check_replicas(args, plan["replicas"])

    import tensorflow as tf

    if plan["logical_cpus"]:
        cpus = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * plan["logical_cpus"]
        )
    from tensorflow_similarity.data import load_data

    try:
        data = load_data(args.data, args.image_size, seed=args.seed, limit=args.limit)
    except ValueError as error:
        raise _UsageError(str(error)) from None
    if len(data.y_train) < args.batch_size:
        raise _UsageError(
            f"--batch-size {args.batch_size} is larger than the {len(data.y_train)} training "
            "images; use a smaller batch or more data."
        )
    return _run(args, plan, data, output)


def _resumed_options(
    args: argparse.Namespace, explicit: dict[str, Any], output: Path
) -> argparse.Namespace:
    run_file = output / "run.json"
    if not (output / "backup").is_dir() or not run_file.is_file():
        if (output / "model.keras").is_file():
            reason = "its run finished (no backup left)"
        elif run_file.is_file():
            reason = "its run stopped before completing an epoch (no backup)"
        else:
            reason = "no run was started there (no run.json)"
        raise _UsageError(
            f"nothing to resume in {str(output)!r}: {reason}. Run without --resume to start "
            "a new run."
        )
    saved = json.loads(run_file.read_text())["options"]
    for key in _RUN_OPTIONS:
        if key in explicit and explicit[key] != saved.get(key):
            flag = "--" + key.replace("_", "-")
            raise _UsageError(
                f"{flag} {explicit[key]!r} differs from the interrupted run's "
                f"{saved.get(key)!r}. --resume continues that run with its own options; "
                "drop the option, or start a new run in another --output."
            )
    merged = vars(args).copy()
    merged.update({key: saved.get(key) for key in _RUN_OPTIONS})
    return argparse.Namespace(**merged)


def _check_numbers(args: argparse.Namespace) -> None:
    for flag, value, low in (
        ("--epochs", args.epochs, 1),
        ("--batch-size", args.batch_size, 1),
        ("--image-size", args.image_size, 1),
        ("--projector-dim", args.projector_dim, 4),
    ):
        if value < low:
            raise _UsageError(f"{flag} must be at least {low}; got {value}.")
    if args.replicas is not None and args.replicas < 1:
        raise _UsageError(f"--replicas must be a positive integer; got {args.replicas}.")
    if args.limit is not None and args.limit < 2:
        raise _UsageError(f"--limit must be at least 2 images; got {args.limit}.")
    if not (math.isfinite(args.learning_rate) and args.learning_rate > 0):
        raise _UsageError(f"--learning-rate must be positive; got {args.learning_rate}.")
    minimum = BACKBONES[args.backbone]
    if args.image_size < minimum:
        raise _UsageError(
            f"--backbone {args.backbone} needs --image-size of at least {minimum}; "
            f"got {args.image_size}."
        )
    if args.sync_group_size is not None:
        if not args.sync_bn:
            raise _UsageError(
                "--sync-group-size groups synchronised batch norm, but --no-sync-bn turns it "
                "off; drop one of the two."
            )
        if args.sync_group_size < 1:
            raise _UsageError(
                f"--sync-group-size must be a positive integer; got {args.sync_group_size}."
            )


def _check_output(output: Path) -> None:
    if output.exists() and not output.is_dir():
        raise _UsageError(f"--output {str(output)!r} is a file; give a folder.")
    try:
        output.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=output, prefix=".tfsim-write-test"):
            pass
    except OSError as error:
        raise _UsageError(
            f"cannot write to --output {str(output)!r} ({error.strerror or error}); "
            "choose a folder you can write to."
        ) from None


def _plan_devices(args: argparse.Namespace) -> dict[str, Any]:
    """Decides the devices before TensorFlow's runtime starts (logical CPUs are fixed then)."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if args.strategy == "one-device":
        if args.replicas not in (None, 1):
            raise _UsageError(
                f"--strategy one-device has one replica; got --replicas {args.replicas}. Use "
                "--strategy mirrored for several."
            )
        device = "/gpu:0" if gpus else "/cpu:0"
        return {"replicas": 1, "logical_cpus": 0, "devices": [device], "workers": 1}
    if args.strategy == "multi-worker":
        if args.replicas is not None:
            raise _UsageError(
                "--strategy multi-worker takes its replicas from TF_CONFIG (workers x local "
                "GPUs, or one CPU per worker); drop --replicas."
            )
        workers = _tf_config_workers()
        return {
            "replicas": workers * max(len(gpus), 1),
            "logical_cpus": 0,
            "devices": None,
            "workers": workers,
        }
    if gpus:
        replicas = args.replicas or len(gpus)
        if replicas > len(gpus):
            raise _UsageError(
                f"--replicas {replicas} but only {len(gpus)} GPUs are visible; use at most "
                f"{len(gpus)}."
            )
        devices = [f"/gpu:{i}" for i in range(replicas)]
        return {"replicas": replicas, "logical_cpus": 0, "devices": devices, "workers": 1}
    replicas = args.replicas or DEFAULT_CPU_REPLICAS
    devices = [f"/cpu:{i}" for i in range(replicas)]
    return {"replicas": replicas, "logical_cpus": replicas, "devices": devices, "workers": 1}


def _tf_config_workers() -> int:
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return 1
    try:
        config = json.loads(raw)
        workers = config.get("cluster", {}).get("worker", [])
        config.get("task", {})["index"]
    except (ValueError, AttributeError, KeyError, TypeError):
        raise _UsageError(
            "TF_CONFIG is not valid: it must be JSON like "
            '{"cluster": {"worker": ["host1:port", "host2:port"]}, '
            '"task": {"type": "worker", "index": 0}}.'
        ) from None
    chief = config.get("cluster", {}).get("chief", [])
    return max(len(workers) + len(chief), 1)


def _check_replicas(args: argparse.Namespace, replicas: int) -> None:
    if args.batch_size < replicas:
        raise _UsageError(
            f"--batch-size {args.batch_size} is smaller than the {replicas} replicas; each "
            f"replica needs at least one image. Use --batch-size {replicas} or more, or fewer "
            "replicas."
        )
    group = args.sync_group_size
    if group is not None and replicas % group:
        raise _UsageError(
            f"--sync-group-size {group} does not divide the {replicas} replicas; use a "
            f"divisor of {replicas}."
        )


def _run(args: argparse.Namespace, plan: dict[str, Any], data: Any, output: Path) -> int:
    import tensorflow as tf

    from tensorflow_similarity import architectures, augmenters
    from tensorflow_similarity.callbacks import KNNAccuracy
    from tensorflow_similarity.distribute import GroupSyncBatchNorm
    from tensorflow_similarity.models import create_contrastive_model

    keras.utils.set_random_seed(args.seed)
    strategy = _make_strategy(tf, args.strategy, plan["devices"])
    is_chief = _is_chief(strategy)
    worker_dir = output if is_chief else output / f"worker-{_task_index()}"
    worker_dir.mkdir(parents=True, exist_ok=True)
    backup_dir = worker_dir / "backup"
    if not args.resume and backup_dir.exists():
        import shutil

        shutil.rmtree(backup_dir)

    if args.sync_bn:
        sync_bn = GroupSyncBatchNorm(args.sync_group_size) if args.sync_group_size else True
    else:
        sync_bn = False
    builders = {
        "resnet18": architectures.ResNet18Sim,
        "resnet50": architectures.ResNet50Sim,
        "efficientnet": architectures.EfficientNetSim,
        "convnext": architectures.ConvNeXtSim,
    }
    size = args.image_size
    steps_per_epoch = len(data.y_train) // args.batch_size
    try:
        with strategy.scope():
            backbone = builders[args.backbone](
                (size, size, 3), include_top=False, pooling="avg", sync_bn=sync_bn
            )
            model = create_contrastive_model(
                backbone,
                args.algorithm,
                projector_hidden_dim=args.projector_dim,
                projector_output_dim=args.projector_dim,
                predictor_hidden_dim=max(args.projector_dim // 4, 1),
                sync_bn=sync_bn,
            )
            schedule = keras.optimizers.schedules.CosineDecay(
                args.learning_rate, decay_steps=max(args.epochs * steps_per_epoch, 1)
            )
            model.compile(optimizer=keras.optimizers.SGD(schedule, momentum=0.9, weight_decay=5e-4))
            # BackupAndRestore restores into a built model.
            model(tf.zeros((1, size, size, 3)))
    except ValueError as error:
        raise _UsageError(str(error)) from None

    augmenter = {
        "simsiam": augmenters.simsiam_augmenter,
        "simclr": augmenters.simclr_augmenter,
        "barlow": augmenters.barlow_augmenter,
        # VICReg trains on Barlow Twins' views (Bardes et al., 2022, appendix C).
        "vicreg": augmenters.barlow_augmenter,
    }[args.algorithm](size, seed=args.seed)
    dataset = (
        tf.data.Dataset.from_tensor_slices(data.x_train)
        .shuffle(len(data.x_train), seed=args.seed, reshuffle_each_iteration=True)
        .batch(args.batch_size, drop_remainder=True)
        .map(augmenter, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )
    if args.strategy == "multi-worker":
        # `predict` under MultiWorkerMirroredStrategy shards the images over the workers and
        # returns each worker only its own part; every worker needs all the embeddings.
        embed = tf.function(lambda images: model.backbone(images, training=False))
    else:
        embed = model.backbone
    knn = KNNAccuracy(
        (data.x_train, data.y_train),
        (data.x_test, data.y_test),
        k=min(20, len(data.y_train)),
        embedding_fn=embed,
    )
    history_file = output / "history.json"
    records: list[dict[str, Any]] = []
    knn_before = None
    if args.resume and history_file.is_file():
        saved = json.loads(history_file.read_text())
        records, knn_before = saved.get("epochs", []), saved.get("knn_accuracy_before")
    if knn_before is None:
        knn_before = knn.evaluate()
    if is_chief:
        _write_json(
            output / "run.json",
            {"options": {key: getattr(args, key) for key in _RUN_OPTIONS}, "devices": plan},
        )

    timer = _EpochTimer(steps_per_epoch * args.batch_size)
    recorder = _HistoryWriter(history_file if is_chief else None, records, knn_before, timer)
    callbacks: list[keras.callbacks.Callback] = [
        timer,
        knn,
        recorder,
        _ScalarLogger(worker_dir / "logs" / "train"),
        keras.callbacks.BackupAndRestore(backup_dir=str(backup_dir)),
    ]
    if args.interrupt_after_epoch is not None:
        callbacks.append(_InterruptAfterEpoch(args.interrupt_after_epoch))

    batch_norm = _describe_batch_norm(args, plan["replicas"])
    if is_chief:
        print(
            f"tfsim: {args.algorithm} with {args.backbone} on {data.source}: "
            f"{len(data.y_train)} train / {len(data.y_test)} test images at {size}x{size}; "
            f"{plan['replicas']} replicas ({args.strategy}), batch norm {batch_norm}; "
            f"kNN accuracy before training {knn_before:.3f}",
            flush=True,
        )
    verbose = (1 if sys.stdout.isatty() else 2) if is_chief else 0
    try:
        model.fit(dataset, epochs=args.epochs, callbacks=callbacks, verbose=verbose, shuffle=False)
    except KeyboardInterrupt:
        done = len(recorder.records)
        print(
            f"\ntfsim: interrupted after {done} completed epoch{'s' * (done != 1)}; what was "
            f"written is kept in {str(output)!r}. Continue with: "
            f"tfsim train --output {output} --resume",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_INTERRUPTED

    if not recorder.records:
        raise _UsageError("training ran no epoch; nothing to report.")
    embeddings = _embed_all(embed, data.x_test)
    if not is_chief:
        return 0
    model.save(output / "model.keras")
    summary = _summary(args, plan, recorder.records, knn_before, batch_norm)
    _write_json(output / "summary.json", summary)
    _plot(output, recorder.records, knn_before, embeddings, data.y_test, data.class_names)
    print(_table(summary))
    print(f"tfsim: wrote model.keras, history.json, logs/ and plots to {output}")
    return 0


def _embed_all(embed: Any, images: Any, batch_size: int = 256) -> Any:
    import numpy as np

    if isinstance(embed, keras.Model):
        return embed.predict(images, batch_size=batch_size, verbose=0)
    return np.concatenate(
        [np.asarray(embed(images[i : i + batch_size])) for i in range(0, len(images), batch_size)]
    )


def _make_strategy(tf: Any, name: str, devices: list[str] | None) -> Any:
    if name == "one-device":
        return tf.distribute.OneDeviceStrategy(devices[0])
    if name == "multi-worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.MirroredStrategy(devices)


def _is_chief(strategy: Any) -> bool:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    return task_type == "chief" or (
        task_type == "worker" and task_id == 0 and "chief" not in resolver.cluster_spec().jobs
    )


def _task_index() -> int:
    try:
        return int(json.loads(os.environ.get("TF_CONFIG", "{}"))["task"]["index"])
    except (ValueError, KeyError, TypeError):
        return 0


def _describe_batch_norm(args: argparse.Namespace, replicas: int) -> str:
    if not args.sync_bn:
        return "per replica (not synchronised)"
    if args.sync_group_size and args.sync_group_size < replicas:
        return f"synchronised in groups of {args.sync_group_size} replicas"
    return f"synchronised over all {replicas} replicas"


def _steady(values: list[float]) -> float:
    # The first epoch also builds the graph; leave it out when there are others.
    values = values[1:] if len(values) > 1 else values
    return sum(values) / len(values)


def _summary(
    args: argparse.Namespace,
    plan: dict[str, Any],
    records: list[dict[str, Any]],
    knn_before: float,
    batch_norm: str,
) -> dict[str, Any]:
    return {
        "knn_accuracy_before": knn_before,
        "knn_accuracy_after": records[-1].get("knn_accuracy"),
        "images_per_second": _steady([r["images_per_second"] for r in records]),
        "seconds_per_epoch": _steady([r["seconds"] for r in records]),
        "epochs": len(records),
        "replicas": plan["replicas"],
        "strategy": args.strategy,
        "batch_norm": batch_norm,
        "sync_bn": bool(args.sync_bn),
    }


def _table(summary: dict[str, Any]) -> str:
    rows = [
        ("kNN accuracy before training", f"{summary['knn_accuracy_before']:.3f}"),
        ("kNN accuracy after training", f"{summary['knn_accuracy_after']:.3f}"),
        ("images per second (training)", f"{summary['images_per_second']:.1f}"),
        ("seconds per epoch (training)", f"{summary['seconds_per_epoch']:.1f}"),
        ("epochs", str(summary["epochs"])),
        ("replicas", f"{summary['replicas']} ({summary['strategy']})"),
        ("batch norm", summary["batch_norm"]),
    ]
    width = max(len(name) for name, _ in rows)
    value_width = max(len(value) for _, value in rows)
    rule = f"+-{'-' * width}-+-{'-' * value_width}-+"
    lines = [rule] + [f"| {n.ljust(width)} | {v.ljust(value_width)} |" for n, v in rows] + [rule]
    return "\n".join(lines)


def _write_json(path: Path, value: Any) -> None:
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(value, indent=2, default=_plain))
    temporary.replace(path)


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def _plot(
    output: Path,
    records: list[dict[str, Any]],
    knn_before: float,
    embeddings: Any,
    labels: Any,
    class_names: list[str],
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    epochs = [r["epoch"] for r in records]
    figure, axis = plt.subplots(figsize=(5, 3.5))
    axis.plot(epochs, [r["loss"] for r in records], marker="o")
    axis.set(xlabel="epoch", ylabel="loss", title="Training loss")
    figure.tight_layout()
    figure.savefig(output / "loss.png", dpi=100)
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(5, 3.5))
    axis.plot([0, *epochs], [knn_before] + [r.get("knn_accuracy") for r in records], marker="o")
    axis.set(xlabel="epoch (0: before training)", ylabel="kNN accuracy", title="kNN accuracy")
    figure.tight_layout()
    figure.savefig(output / "knn_accuracy.png", dpi=100)
    plt.close(figure)

    embeddings = np.asarray(embeddings, np.float64).reshape(len(embeddings), -1)
    centred = embeddings - embeddings.mean(axis=0)
    # PCA by SVD: deterministic and fast, and needs no scikit-learn.
    _, _, components = np.linalg.svd(centred, full_matrices=False)
    points = centred @ components[:2].T
    figure, axis = plt.subplots(figsize=(5.5, 4.5))
    scatter = axis.scatter(points[:, 0], points[:, 1], c=labels, cmap="tab10", s=8)
    handles, _ = scatter.legend_elements(num=None)
    present = sorted(set(np.asarray(labels).tolist()))
    if len(present) <= 20:
        axis.legend(
            handles, [class_names[i] for i in present], fontsize=7, loc="best", markerscale=0.8
        )
    axis.set(title="Test embeddings (PCA)", xlabel="PC 1", ylabel="PC 2")
    figure.tight_layout()
    figure.savefig(output / "embeddings.png", dpi=100)
    plt.close(figure)


class _EpochTimer(keras.callbacks.Callback):
    """Times each epoch's training (before the kNN evaluation that follows it)."""

    def __init__(self, images_per_epoch: int) -> None:
        super().__init__()
        self.images_per_epoch = images_per_epoch
        self.seconds: dict[int, float] = {}
        self._start = 0.0

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.seconds[epoch] = time.perf_counter() - self._start


class _HistoryWriter(keras.callbacks.Callback):
    """Keeps one record per completed epoch and rewrites `history.json` after each."""

    def __init__(
        self,
        path: Path | None,
        records: list[dict[str, Any]],
        knn_before: float,
        timer: _EpochTimer,
    ) -> None:
        super().__init__()
        self.path = path
        self.records = list(records)
        self.knn_before = knn_before
        self.timer = timer

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        seconds = self.timer.seconds.get(epoch, float("nan"))
        record = {"epoch": epoch + 1}
        record.update({key: float(value) for key, value in (logs or {}).items()})
        record["seconds"] = seconds
        record["images_per_second"] = self.timer.images_per_epoch / seconds
        # A resumed run restarts at the backup's epoch: later records are replaced.
        self.records = self.records[:epoch] + [record]
        if self.path is not None:
            _write_json(self.path, {"knn_accuracy_before": self.knn_before, "epochs": self.records})


class _ScalarLogger(keras.callbacks.Callback):
    """Writes each epoch's logs as TensorBoard scalars.

    `keras.callbacks.TensorBoard` needs the `tensorboard` package for
    `tf.summary.scalar`; `tf.summary.write` with the scalars plugin's metadata
    is core TensorFlow and gives TensorBoard the same curves.
    """

    def __init__(self, log_dir: Path) -> None:
        super().__init__()
        self.log_dir = log_dir
        self._writer = None

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        import tensorflow as tf

        if self._writer is None:
            self._writer = tf.summary.create_file_writer(str(self.log_dir))
        metadata = tf.compat.v1.SummaryMetadata()
        metadata.plugin_data.plugin_name = "scalars"
        with self._writer.as_default():
            for name, value in (logs or {}).items():
                tf.summary.write(
                    f"epoch_{name}", tf.constant(float(value)), step=epoch, metadata=metadata
                )
        self._writer.flush()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self._writer is not None:
            self._writer.close()


class _InterruptAfterEpoch(keras.callbacks.Callback):
    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if epoch + 1 == self.epoch:
            # This hook stands in for a user's Ctrl-C. A process started in the background
            # by a non-interactive shell inherits SIGINT ignored (then Python installs no
            # handler), so restore Python's handler first or the signal would be dropped.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.kill(os.getpid(), signal.SIGINT)
            # The handler raises KeyboardInterrupt at the next bytecode; make it certain.
            time.sleep(1.0)
