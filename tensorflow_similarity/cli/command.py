"""`main`: the `tfsim` command from its arguments to its exit status."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import keras

from tensorflow_similarity.cli import devices, export, lookup, run_folder, run_lock
from tensorflow_similarity.cli.data_fingerprint import check_unchanged, data_fingerprint
from tensorflow_similarity.cli.errors import (
    EXIT_CLUSTER,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    ClusterError,
    UsageError,
)
from tensorflow_similarity.cli.metric import MetricJob
from tensorflow_similarity.cli.options import (
    check_numbers,
    check_output,
    job_of,
    resolve_batch_norm_mode,
    resolve_defaults,
    resumed_options,
)
from tensorflow_similarity.cli.parser import build_parser
from tensorflow_similarity.cli.pretrain import PretrainJob
from tensorflow_similarity.cli.run import Job, start
from tensorflow_similarity.datasets import check_data_spec, load_data

# The job of each key of `options.job_of`.
JOBS: dict[str, type[Job]] = {"ssl": PretrainJob, "supervised": MetricJob}


def main(
    argv: Sequence[str] | None = None,
    *,
    callbacks: Sequence[keras.callbacks.Callback] = (),
) -> int:
    """Runs the `tfsim` command.

    SIGTERM (what a job scheduler sends before it preempts a job) stops a run
    as Ctrl-C does: the last completed epoch stays in `--output`'s backup and
    `--resume` continues from it.

    Args:
        argv: Command-line arguments without the program name. Defaults to
            `sys.argv[1:]`.
        callbacks: Keras callbacks added to training after tfsim's own, for
            Python callers (an epoch's backup is written before they see its
            end). Defaults to none.

    Returns:
        The exit status: 0 on success, 2 for bad input, 3 when training
        diverged (a non-finite loss or weight), 130 when interrupted.

    Example:

    Each call trains or reads a run folder, so the example is not a doctest:

    ```python
    from tensorflow_similarity.cli.command import main

    status = main(["pretrain", "--epochs", "1", "--limit", "200", "--output", "run"])
    status = main(["train-metric", "--algorithm", "multisimilarity", "--output", "sup"])
    status = main(["train", "--algorithm", "simclr", "--output", "run2"])  # either job
    status = main(["lookup", "--output", "sup", "--k", "3", "digit.png"])
    status = main(["export", "sup", "served", "--k", "5", "--tflite"])
    ```
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    explicit = vars(build_parser(suppress_defaults=True).parse_args(argv))
    with _sigterm_interrupts() as interrupted:
        try:
            return _run(args, explicit, (*callbacks, _StopWhenInterrupted(interrupted)))
        except UsageError as error:
            print(f"tfsim: error: {error}", file=sys.stderr)
            return EXIT_USAGE
        except ClusterError as error:
            print(f"tfsim: error: {error}", file=sys.stderr)
            return EXIT_CLUSTER
        except KeyboardInterrupt:
            # Interrupted before training started (training handles its own interruption).
            print("\ntfsim: interrupted before training started.", file=sys.stderr)
            return EXIT_INTERRUPTED


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[threading.Event]:
    """Raises `KeyboardInterrupt` on SIGTERM, as on SIGINT, until the block ends.

    Yields the event a signal sets. A signal handler's exception surfaces in
    whatever Python code runs when the signal arrives; during training that
    can be a finalizer (TensorFlow's function `__del__`), where Python ignores
    exceptions, so `_StopWhenInterrupted` raises it again at the next step.
    """
    interrupted = threading.Event()

    def interrupt(signum: int, frame: Any) -> None:
        interrupted.set()
        raise KeyboardInterrupt

    # Python lets only the main thread install signal handlers.
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return
    # A process started in the background inherits SIGINT ignored: it stays ignored.
    numbers = [n for n in _SIGNALS if signal.getsignal(n) is not signal.SIG_IGN]
    previous = {number: signal.signal(number, interrupt) for number in numbers}
    try:
        yield interrupted
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


# Ctrl-C and a job scheduler's preemption notice.
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _StopWhenInterrupted(keras.callbacks.Callback):
    """Raises `KeyboardInterrupt` after a step or an epoch if a signal came meanwhile."""

    def __init__(self, interrupted: threading.Event) -> None:
        super().__init__()
        self.interrupted = interrupted

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.interrupted.is_set():
            raise KeyboardInterrupt

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.on_train_batch_end(0)


def _run(
    args: argparse.Namespace,
    explicit: dict[str, Any],
    callbacks: Sequence[keras.callbacks.Callback],
) -> int:
    if args.command == "lookup":
        return lookup.run(args)
    if args.command == "export":
        return export.run(args)
    output = Path(args.output).expanduser()
    chief = devices.is_chief_process(args.strategy)
    if chief:
        run_lock.check_not_in_use(output)
    run_folder.check_new_run(output, args.resume, args.overwrite, chief)
    if args.resume:
        args = resumed_options(args, explicit, output)
    args = resolve_defaults(args, explicit)
    resolve_batch_norm_mode(args, explicit)
    check_numbers(args)
    try:
        files = check_data_spec(args.data)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if files is not None:
        run_folder.check_outside_data(output, Path(args.data))
    check_output(output)
    lock = run_lock.RunLock(output)
    if chief:
        lock.acquire()
    try:
        if chief:
            # Again under the lock: another run may have started since the first check.
            run_folder.check_new_run(output, args.resume, args.overwrite, chief)
        return _run_locked(args, output, files, callbacks, chief)
    finally:
        lock.release()


def _run_locked(
    args: argparse.Namespace,
    output: Path,
    files: list[Path] | None,
    callbacks: Sequence[keras.callbacks.Callback],
    chief: bool,
) -> int:
    plan = devices.plan_devices(args.strategy, args.replicas)
    devices.check_replicas(args, plan.replicas)
    # Only the chief records it (run.json) and compares it: the other workers skip the hashing.
    fingerprint = data_fingerprint(args.data, files, args.image_size) if chief else None
    if args.resume and chief:
        run_folder.check_same_replicas(output, plan.replicas)
        warning = check_unchanged(run_folder.recorded(output, "data"), fingerprint)
        if warning:
            print(f"tfsim: warning: {warning}", file=sys.stderr, flush=True)
    devices.create_logical_cpus(plan)
    try:
        data = load_data(args.data, args.image_size, seed=args.seed, limit=args.limit)
    except ValueError as error:
        raise UsageError(str(error)) from None
    job = JOBS[job_of(args)]
    job.check_data(args, data)
    return start(job(args, plan, data), output, callbacks, data_fingerprint=fingerprint)
