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

from tensorflow_similarity.cli import devices
from tensorflow_similarity.cli.parser import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    UsageError,
    build_parser,
    check_numbers,
    check_output,
    resumed_options,
)
from tensorflow_similarity.cli.training import train
from tensorflow_similarity.data import check_data_spec, load_data


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
        The exit status: 0 on success, 2 for bad input, 130 when interrupted.

    Example:

    >>> main(["train", "--epochs", "1", "--limit", "200", "--output", "run"])
    0
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    explicit = vars(build_parser(suppress_defaults=True).parse_args(argv))
    with _sigterm_interrupts():
        try:
            return _run(args, explicit, callbacks)
        except UsageError as error:
            print(f"tfsim: error: {error}", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            # Interrupted before training started (training handles its own interruption).
            print("\ntfsim: interrupted before training started.", file=sys.stderr)
            return EXIT_INTERRUPTED


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """Raises `KeyboardInterrupt` on SIGTERM, as on SIGINT, until the block ends."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # Python lets only the main thread install signal handlers.
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(
    args: argparse.Namespace,
    explicit: dict[str, Any],
    callbacks: Sequence[keras.callbacks.Callback],
) -> int:
    output = Path(args.output).expanduser()
    if args.resume:
        args = resumed_options(args, explicit, output)
    check_numbers(args)
    check_output(output)
    try:
        check_data_spec(args.data)
    except ValueError as error:
        raise UsageError(str(error)) from None
    plan = devices.plan_devices(args.strategy, args.replicas)
    devices.check_replicas(args, plan.replicas)
    devices.create_logical_cpus(plan)
    try:
        data = load_data(args.data, args.image_size, seed=args.seed, limit=args.limit)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if len(data.y_train) < args.batch_size:
        raise UsageError(
            f"--batch-size {args.batch_size} is larger than the {len(data.y_train)} training "
            "images; use a smaller batch or more data."
        )
    return train(args, plan, data, output, callbacks)
