"""A run's folder (`--output`): what it holds, and the rules that keep it to one run.

* A new run starts in a folder that holds none of a run's files
  (`RUN_FILES`): a new or empty folder, or one of other files only. A
  folder holding a run is refused unless `--resume` continues that run or
  `--overwrite` deletes its files first, and only its files: what tfsim did
  not write stays, as `keras.Model.save(overwrite=True)` replaces its own
  file only. A folder holding some of those names but no run.json was not
  written by tfsim, and is refused either way.
* run.json is the first file a run writes (before its first epoch) and the
  last `--overwrite` deletes (model.keras goes first), so a folder with any
  of a run's files says which run they are, even after a kill.
* A finished run records in run.json (`"finished"`) the SHA-256 of its
  model.keras and of each file of its index, just before it deletes its
  backup; `tfsim lookup` and `tfsim export` refuse a model or an index that
  does not match (`read_run`, `check_run_files`).
* A run that diverged (`errors.TrainingDiverged`) records when in run.json
  (`"diverged"`); `--resume` would repeat it and refuses.

The chief writes the run's files; another worker of `--strategy
multi-worker` writes only `worker-N/`, and leaves the checks to the chief.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from tensorflow_similarity.cli import run_lock
from tensorflow_similarity.cli.errors import EXIT_DIVERGED, TrainingDiverged, UsageError
from tensorflow_similarity.models.index_mixin import index_path

RUN_FILE = "run.json"
MODEL_FILE = "model.keras"
INDEX_DIR = index_path(MODEL_FILE).name
# Everything a run writes into its folder, in the order `clear` deletes it (see the module).
RUN_FILES = (
    MODEL_FILE,
    INDEX_DIR,
    "summary.json",
    "history.json",
    "loss.png",
    "knn_accuracy.png",
    "retrieval.png",
    "neighbours.png",
    "embeddings.png",
    "logs",
    "backup",
    RUN_FILE,
)
# Also a run's: the other workers' folders and `report.write_json`'s partial files.
_WORKER_DIR = "worker-*"
_PARTIAL = "*.json.tmp"


def run_files(output: Path) -> list[Path]:
    """Returns the run's files and folders present in `output`, in `RUN_FILES` order.

    Empty folders are left out (a worker makes its folder before run.json
    is written), and so are files named `worker-N` (another program's).
    """
    found = [output / name for name in RUN_FILES[:-1]]
    found += sorted(p for p in output.glob(_WORKER_DIR) if p.is_dir())
    found += sorted(output.glob(_PARTIAL))
    found.append(output / RUN_FILE)
    return [p for p in found if p.is_file() or (p.is_dir() and any(p.iterdir()))]


def _names(paths: list[Path], limit: int = 4) -> str:
    names = [p.name + "/" * p.is_dir() for p in paths]
    more = len(names) - limit
    return ", ".join(names[:limit]) + (f" and {more} more" if more > 0 else "")


def _read_run(output: Path) -> dict[str, Any] | None:
    try:
        run = json.loads((output / RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
    return run if isinstance(run, dict) else None


def describe(output: Path) -> tuple[str, str]:
    """Says what `output` holds: `(state, words)`.

    States: `"none"` (no run.json), `"unreadable"`, `"finished"`, `"diverged"`,
    `"interrupted"` (a backup of a completed epoch, resumable),
    `"no epoch"` (stopped before completing one: `--resume` starts it again),
    `"incomplete"` (run.json says finished, but its model is gone), and
    `"unrecorded"` (a model.keras run.json does not record, and no backup).
    `words` completes "its run ...", or for `"none"` says what is there.
    """
    run = _read_run(output)
    if run is None:
        if (output / RUN_FILE).exists():
            return "unreadable", "left an unreadable run.json"
        return "none", "no run was started there (no run.json)"
    if run.get("diverged"):
        return "diverged", f"diverged ({run['diverged']})"
    finished = run.get("finished")
    has_model = (output / MODEL_FILE).is_file()
    if finished:
        if not has_model:
            return "incomplete", "finished, but its model.keras was deleted or moved since"
        return "finished", "finished (model.keras written)"
    if (output / "backup" / "latest.weights.h5").is_file():
        return "interrupted", "was interrupted (backup/ holds its last completed epoch)"
    if has_model:
        # Neither finished nor resumable: an earlier tfsim's run (which recorded nothing), or
        # the files of two runs (which an earlier tfsim could leave).
        return "unrecorded", (
            "left a model.keras that its run.json does not record (a run of an earlier tfsim, "
            "or the files of two runs)"
        )
    return "no epoch", "stopped before completing an epoch"


def check_new_run(output: Path, resume: bool, overwrite: bool, chief: bool = True) -> None:
    """Raises `UsageError` unless a new run may start in `output` (see the module).

    With `resume`, only the conflict with `overwrite` is checked here
    (`options.resumed_options` checks that there is something to resume).

    Args:
        output: The run's folder.
        resume: `--resume`.
        overwrite: `--overwrite`.
        chief: Whether this process writes the run's files (another worker
            checks nothing but the options). Defaults to `True`.

    Raises:
        UsageError: If the folder holds a run (and neither `resume` nor
            `overwrite` is given), or files tfsim did not write under the
            names of a run's, or both `resume` and `overwrite` are given.
    """
    if resume and overwrite:
        raise UsageError(
            "--resume continues the run in --output and --overwrite deletes it; give one of "
            "the two."
        )
    if resume or not chief or not output.is_dir():
        return
    present = run_files(output)
    if not present:
        return
    if not (output / RUN_FILE).is_file():
        raise UsageError(
            f"--output {str(output)!r} holds {_names(present)} but no run.json: not a tfsim "
            "run's files, which tfsim will neither overwrite nor delete. Give another "
            "--output, or move them away."
        )
    if overwrite:
        return
    state, words = describe(output)
    resume_hint = {
        "interrupted": "--resume to continue it, ",
        "no epoch": "--resume to start it again with its options, ",
    }.get(state, "")
    raise UsageError(
        f"--output {str(output)!r} holds a run ({_names(present)}) that {words}; a new run "
        f"would overwrite it. Give another --output, {resume_hint}or --overwrite to delete "
        "that run's files first."
    )


def check_outside_data(output: Path, data: Path) -> None:
    """Raises `UsageError` if `output` is the `--data` folder or inside it (links resolved).

    The run's files there would become a class of the data the next run
    trains on and indexes.
    """
    resolved_output, resolved_data = output.resolve(), data.resolve()
    if resolved_output == resolved_data or resolved_output.is_relative_to(resolved_data):
        shown = (
            f"{str(output)!r}"
            if resolved_output == output.absolute()
            else f"{str(output)!r} (that is {str(resolved_output)!r})"
        )
        raise UsageError(
            f"--output {shown} is inside --data {str(data)!r} ({str(resolved_data)!r}): the "
            "run's files would become images of a class of the data. Give an --output "
            "outside the data folder."
        )


def recorded(output: Path, key: str) -> Any:
    """The entry `key` of the run.json in `output`, `None` if there is none."""
    return (_read_run(output) or {}).get(key)


def check_same_replicas(output: Path, replicas: int) -> None:
    """Raises `UsageError` if a resumed run would run on other replicas than it started on.

    A default `--replicas` resolves again on resume, on whatever devices the
    machine has now; the backup's schedule and batch norm assume the old ones.
    """
    saved = (recorded(output, "devices") or {}).get("replicas")
    if saved is not None and saved != replicas:
        raise UsageError(
            f"the interrupted run in {str(output)!r} trained on {saved} replicas, and would "
            f"resume on {replicas} (the devices visible now). Resume where {saved} are "
            "visible, or start a new run with --overwrite (or in another --output)."
        )


def clear(output: Path) -> None:
    """Deletes the run's files from `output` (`--overwrite`), run.json last; keeps the rest.

    A worker that is not the chief passes its own `worker-N/` folder.
    """
    if not output.is_dir():
        return
    for path in run_files(output):
        # A link (to a folder kept elsewhere, say) goes itself: what it points to is not the run's.
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def check_resumable(output: Path) -> None:
    """Raises `UsageError` unless `output` holds a run `--resume` can continue.

    A run that stopped before completing an epoch can: it starts again from
    the first epoch with the options in its run.json.
    """
    state, words = describe(output)
    if state in ("interrupted", "no epoch"):
        return
    if state == "none":
        remedy = "Run without --resume to start a new run."
    elif state == "diverged":
        remedy = (
            "Resuming would repeat it: start again with a lower --learning-rate and "
            "--overwrite (or in another --output)."
        )
    else:
        remedy = "Start a new run with --overwrite (replacing it) or in another --output."
    subject = "" if state == "none" else "its run "
    raise UsageError(f"nothing to resume in {str(output)!r}: {subject}{words}. {remedy}")


def _fingerprints(output: Path) -> dict[str, str]:
    """SHA-256 of model.keras and of each file of its index, by path relative to `output`."""
    files = [output / MODEL_FILE]
    if (output / INDEX_DIR).is_dir():
        files += sorted(p for p in (output / INDEX_DIR).rglob("*") if p.is_file())
    fingerprints = {}
    for path in files:
        if path.is_file():
            digest = hashlib.sha256()
            with path.open("rb") as file:
                for block in iter(lambda: file.read(1 << 20), b""):
                    digest.update(block)
            fingerprints[path.relative_to(output).as_posix()] = digest.hexdigest()
    return fingerprints


def _update_run(output: Path, **entries: Any) -> None:
    run = _read_run(output)
    if run is None:
        return
    run.update(entries)
    partial = output / (RUN_FILE + ".tmp")
    partial.write_text(json.dumps(run, indent=2))
    partial.replace(output / RUN_FILE)


def finish(output: Path) -> None:
    """Records in run.json the fingerprints of the model and index just written (chief only)."""
    _update_run(output, finished={"sha256": _fingerprints(output)})


def read_run(output: Path, shown: str, train_it: str) -> dict[str, Any]:
    """Returns the run.json of the run in `output`, or raises `UsageError` saying why not.

    Args:
        output: The run's folder.
        shown: How the message names the folder (`--output 'DIR'`).
        train_it: The command that trains a run there, for the messages.

    Raises:
        UsageError: If `output` is not a folder, a run in progress holds it
            (`run_lock`), or it holds no run.json, or an unreadable one.
    """
    if not output.is_dir():
        raise UsageError(f"{shown} is not a folder; {train_it}.")
    holder = run_lock.holder_of(output)
    if holder is not None:
        # Its files say "interrupted" or "stopped before an epoch" while it trains.
        raise UsageError(
            f"{str(output)!r} holds a run still in progress ({run_lock.holder_words(holder)}), "
            "not a finished one. Wait for it to end, then try again."
        )
    if not (output / RUN_FILE).is_file():
        raise UsageError(f"{str(output)!r} holds no tfsim run (no run.json); {train_it}.")
    state, words = describe(output)
    if state == "unreadable":
        raise UsageError(f"{str(output)!r}: its run {words}; {train_it} --overwrite.")
    return json.loads((output / RUN_FILE).read_text())


def check_run_files(
    output: Path, run: dict[str, Any], retrain: str, command: str, index: bool = True
) -> None:
    """Raises `UsageError` unless model.keras (and its index) are there and are the run's.

    Args:
        output: The run's folder.
        run: Its run.json (`read_run`).
        retrain: The command that trains the run again, for the messages.
        command: The command that reads them (`"lookup"`), for the messages.
        index: Whether the index is needed too. Defaults to `True`.
    """
    state, words = describe(output)
    if not (output / MODEL_FILE).is_file():
        if state in ("interrupted", "no epoch"):
            remedy = f"Finish it with: tfsim train --output {output} --resume"
        elif state == "diverged":
            remedy = f"Train it again with a lower --learning-rate: {retrain}"
        else:
            remedy = f"Train it again: {retrain}"
        raise UsageError(f"{str(output)!r} has no {MODEL_FILE}: its run {words}. {remedy}")
    if index and not (output / INDEX_DIR).is_dir():
        without = " (or export the model alone: --no-index)" if command == "export" else ""
        raise UsageError(
            f"{str(output)!r} has {MODEL_FILE} but no index ({INDEX_DIR}/); train the run "
            f"again to write it: {retrain}{without}"
        )
    check_model_belongs(output, run, retrain, command=command, index=index)


def check_model_belongs(
    output: Path, run: dict[str, Any], retrain: str, command: str = "lookup", index: bool = True
) -> None:
    """Raises `UsageError` unless model.keras and its index are those run.json recorded.

    Args:
        output: A folder with run.json, model.keras and its index.
        run: Its run.json.
        retrain: The command that trains the run again, for the message.
        command: The command that reads them, for the message. Defaults to
            `"lookup"`.
        index: Whether the index is checked too (else model.keras alone).
            Defaults to `True`.
    """
    recorded = (run.get("finished") or {}).get("sha256")
    if not recorded:
        if describe(output)[0] == "interrupted":
            why = "its run was interrupted while writing them"
            how = f"finish it with: tfsim train --output {output} --resume"
        else:
            why = "a run of an earlier tfsim, or the files of two runs"
            how = f"train it again: {retrain}"
        raise UsageError(
            f"{str(output)!r}: run.json does not record which model.keras and index are its "
            f"run's ({why}); {how}."
        )
    # A file browser's own files (Finder's .DS_Store, say) are not the run's but are no
    # harm: the index reads only the files its metadata names and checksums.
    found = {
        name: digest
        for name, digest in _fingerprints(output).items()
        if name in recorded or not _is_os_metadata(name.rsplit("/", 1)[-1])
    }
    if not index:
        recorded = {n: d for n, d in recorded.items() if n == MODEL_FILE}
        found = {n: d for n, d in found.items() if n == MODEL_FILE}
    # In the order they were recorded: model.keras, then the index's files.
    differing = [n for n in {**recorded, **found} if recorded.get(n) != found.get(n)]
    if differing:
        parts = list(dict.fromkeys(name.split("/")[0] + "/" * ("/" in name) for name in differing))

        def listed(names: list[str], limit: int = 4) -> str:
            more = len(names) - limit
            return ", ".join(names[:limit]) + (f" and {more} more" if more > 0 else "")

        extra = [n for n in differing if n not in recorded]
        details = [
            f"{what}: {listed(names)}"
            for what, names in [
                ("changed", [n for n in differing if n in recorded and n in found]),
                ("missing", [n for n in differing if n not in found]),
                ("not written by the run", extra),
            ]
            if names
        ]
        remedy = f"Train the run again: {retrain}."
        if len(extra) == len(differing):
            remedy = f"Remove {listed(extra)} if it is not the run's, or train it again: {retrain}."
        raise UsageError(
            f"{str(output)!r}: {', '.join(parts)} {'is' if len(parts) == 1 else 'are'} not "
            f"what its run wrote ({'; '.join(details)}, since run.json recorded them: changed, "
            f"or copied from another run); {command} will not mix two runs. {remedy}"
        )


def _is_os_metadata(name: str) -> bool:
    """Whether `name` is a file an operating system's file browser leaves in folders it shows."""
    return name in (".DS_Store", "Thumbs.db", "desktop.ini") or name.startswith("._")


def print_interrupted(output: Path, epochs_done: int) -> None:
    """Tells on stderr what an interrupted run kept and how to continue it."""
    if epochs_done:
        kept = (
            f"after {epochs_done} completed epoch{'s' * (epochs_done != 1)}; what was "
            f"written is kept in {str(output)!r}. Continue with"
        )
    else:
        kept = (
            f"before completing an epoch: {str(output)!r} keeps the run's options (run.json) "
            "and nothing to continue from. Start it again from its first epoch with"
        )
    print(
        f"\ntfsim: interrupted {kept}: tfsim train --output {output} --resume",
        file=sys.stderr,
        flush=True,
    )


def report_divergence(output: Path, error: TrainingDiverged, chief: bool = True) -> int:
    """Prints what diverged and what to do; the chief records it in run.json.

    Returns:
        `EXIT_DIVERGED`.
    """
    if chief:
        _update_run(output, diverged=str(error))
    kept = (
        f"backup/ keeps epoch {error.epochs_done}, the last good one"
        if error.epochs_done
        else "no epoch was completed"
    )
    print(
        f"tfsim: error: training diverged: {error}. The learning rate is most likely too "
        f"high (--learning-rate {error.learning_rate:g}): start again with a lower one, e.g. "
        f"--learning-rate {error.learning_rate / 10:g}, and --overwrite (or another --output). "
        f"No model.keras was written; {kept}.",
        file=sys.stderr,
        flush=True,
    )
    return EXIT_DIVERGED
