"""`tfsim export RUN OUT`: a finished run's model and index as a SavedModel for serving.

The SavedModel (`serving.export_model`) has an `embed` signature and, for a
run with a non-empty index (a supervised run's: the training images of
every class), a `lookup` signature whose `label_names` are the run's class
names; it loads and serves with TensorFlow alone. An index over
`serving.MAX_INDEX_BYTES` (or any, with `--index-location external`) is
saved beside the SavedModel instead, in OUT/index/, and
`serving.IndexServer(OUT)` answers its lookups. The run folder is checked
as `tfsim lookup` checks it (its run.json, and that model.keras and its
index are the ones the run recorded) before the model is loaded. OUT may
not be inside the run folder; an existing OUT is refused unless
`--overwrite`, which replaces only an earlier export that this package
wrote (see `serving.destination`).
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

from tensorflow_similarity.cli import run_folder
from tensorflow_similarity.cli.errors import UsageError
from tensorflow_similarity.cli.lookup import load_run_model
from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.models.index_mixin import index_path
from tensorflow_similarity.serving import INDEX_LOCATIONS, check_destination, export_model


def add_export_command(commands: Any) -> None:
    """Adds the `export` sub-command to the sub-parsers `commands`."""
    export = commands.add_parser(
        "export",
        help="write a finished run's model and index as a SavedModel that serves with "
        "TensorFlow alone",
        description=(
            "Write the model of a finished run (RUN/model.keras) and its index as a "
            "TensorFlow SavedModel in OUT: an `embed` signature (images to embeddings) and, "
            "when the index is not empty, a `lookup` signature (images to the --k nearest "
            "indexed images: ids, distances, labels and class names), searched exactly in "
            "the graph. It loads with tf.saved_model.load and serves under TensorFlow "
            "Serving without tensorflow_similarity installed. An index over 1 GiB is saved "
            "beside it in OUT/index/ instead (see --index-location), and "
            "tensorflow_similarity.serving.IndexServer(OUT) answers its lookups. Images are "
            "what training read: "
            "RGB at the run's --image-size, float32 in [0, 1] (uint8 0-255 with --uint8)."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    export.add_argument("run", metavar="RUN", help="the folder of a finished tfsim run")
    export.add_argument("out", metavar="OUT", help="the SavedModel folder to write")
    export.add_argument("--k", type=int, default=5, help="neighbours `lookup` returns")
    export.add_argument(
        "--tflite",
        action="store_true",
        help="also write OUT/embed.tflite (and OUT/lookup.tflite): TensorFlow Lite models of "
        "the signatures, for tf.lite.Interpreter or LiteRT on a device",
    )
    export.add_argument(
        "--uint8",
        action="store_true",
        help="the signatures take uint8 images in 0-255 (scaled to [0, 1] in the graph)",
    )
    export.add_argument(
        "--no-index",
        dest="index",
        action="store_false",
        help="export `embed` alone, for a run without its index (or to leave it out)",
    )
    export.add_argument(
        "--index-location",
        choices=INDEX_LOCATIONS,
        default="auto",
        help="where the index goes: in the `lookup` signature (graph), saved beside the "
        "SavedModel in OUT/index/ for tensorflow_similarity.serving.IndexServer (external), "
        "or the graph up to 1 GiB and beside it above (auto)",
    )
    export.add_argument(
        "--overwrite",
        action="store_true",
        help="replace OUT if it holds an earlier export tfsim wrote (its serving.json says so) "
        "and nothing else; anything else, or a symbolic link, is never deleted",
    )
    export.add_argument(
        "--no-safe-mode",
        dest="safe_mode",
        action="store_false",
        help="load a run whose index or model holds pickled Python objects or code (Keras' "
        "safe_mode=False): loading it runs that code, so only for a run you trust",
    )


def _destination_error(error: FileExistsError) -> UsageError:
    """The refusal of OUT (`check_destination`), in the command line's words."""
    return UsageError(
        str(error).replace("overwrite=True (tfsim export --overwrite)", "--overwrite")
    )


def check_outside_run(source: Path, out: Path) -> None:
    """Raises `UsageError` if `out` is the run folder `source`, inside it, or holds it.

    An export inside a run folder is a file its run did not write: the run
    is then refused as mixed, and `--overwrite` of the run deletes it.
    """
    run, target = source.resolve(), out.resolve()
    if target == run or run in target.parents:
        raise UsageError(
            f"OUT {str(out)!r} is inside the run folder {str(source)!r}: an export there is "
            "a file its run did not write (tfsim would then refuse the run, and train "
            "--overwrite delete it). Give a folder outside the run, e.g. "
            f"{str(source.parent / (source.name + '-served'))!r}."
        )
    if target in run.parents:
        raise UsageError(
            f"OUT {str(out)!r} holds the run folder {str(source)!r}; an export replaces OUT "
            "whole. Give a folder outside the run."
        )


def run(args: argparse.Namespace) -> int:
    """Writes the export and prints what it holds; returns 0.

    Raises:
        UsageError: For a bad `--k`, a folder without a finished run (or with
            files its run did not write), a run without its index (unless
            `--no-index`), an OUT inside the run folder, a symbolic link, or
            an OUT that exists (without `--overwrite`, or holding something
            other than an export tfsim wrote).
    """
    source = Path(args.run).expanduser()
    out = Path(args.out).expanduser()
    if args.k < 1:
        raise UsageError(f"--k must be at least 1; got {args.k}.")
    train_it = f"train one with: tfsim train-metric --output {source} (or tfsim pretrain)"
    recorded = run_folder.read_run(source, f"RUN {str(source)!r}", train_it)
    algorithm = recorded.get("options", {}).get("algorithm")
    retrain = f"tfsim train --algorithm {algorithm} --output {source} --overwrite"
    run_folder.check_run_files(source, recorded, retrain, "export", index=args.index)
    check_outside_run(source, out)
    try:
        check_destination(out, args.overwrite)
    except FileExistsError as error:
        raise _destination_error(error) from None
    model_file = source / run_folder.MODEL_FILE
    k = args.k
    if args.index:
        size = int(Indexer.read_metadata(index_path(model_file))["size"])
        if 0 < size < k:
            print(f"tfsim: --k {k} is larger than the {size} indexed images; lookup returns all.")
            k = size
    model = load_run_model(model_file, args.safe_mode)
    if args.index:
        try:
            model.load_index(model_file, safe_mode=args.safe_mode)
        except ValueError as error:
            raise UsageError(str(error).replace("safe_mode=False", "--no-safe-mode")) from None
    try:
        with warnings.catch_warnings():
            # The command says it in its own words below, not as a Python warning.
            warnings.filterwarnings(
                "ignore", message="export_model: the index .* over max_index_bytes"
            )
            result = export_model(
                model,
                out,
                k,
                include_index=args.index,
                uint8_input=args.uint8,
                class_names=recorded.get("class_names"),
                overwrite=args.overwrite,
                tflite=args.tflite,
                verbose=0,
                index_location=args.index_location,
            )
    except FileExistsError as error:  # OUT written meanwhile, by another export
        raise _destination_error(error) from None
    except ValueError as error:
        message = str(error).replace("include_index=False", "--no-index")
        message = message.replace(
            "index_location='external' (tfsim export --index-location external)",
            "--index-location external",
        )
        raise UsageError(message) from None
    if result.index_location == "external" and args.index_location == "auto":
        print(
            f"tfsim: the index ({result.index_size} images) is over the 1 GiB a lookup "
            "signature holds, so it is saved beside the SavedModel (--index-location graph "
            "refuses it instead)."
        )
    if result.index_location == "external":
        print(
            f"tfsim: wrote {out}: signature embed and, beside it, the index in "
            f"{out / 'index'} (k={result.k}, {result.index_size} indexed images, "
            f"{result.distance} distance); serve lookups with "
            f"tensorflow_similarity.serving.IndexServer({str(out)!r})."
        )
    elif "lookup" in result.signatures:
        print(
            f"tfsim: wrote {out}: signatures embed and lookup (k={result.k}, "
            f"{result.index_size} indexed images, {result.distance} distance)."
        )
    elif not args.index:
        print(f"tfsim: wrote {out}: signature embed only (--no-index).")
    else:
        print(
            f"tfsim: wrote {out}: signature embed only: the run's index is empty (a "
            "self-supervised run indexes nothing), so there is no lookup."
        )
    for file in result.tflite_files:
        print(f"tfsim: wrote {file}.")
    print(
        f"tfsim: serve it with TensorFlow Serving (copy {out} to MODELS/NAME/1/), or load it with "
        f"tf.saved_model.load({str(out)!r}).signatures['embed']."
    )
    return 0
