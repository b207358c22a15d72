"""`tfsim lookup`: the nearest indexed images of images, with a supervised run's model.

The images are read as the training job read its data folder (RGB, resized
to the run's `--image-size` from run.json, scaled to `[0, 1]`), so any size
and PNG/JPEG/GIF/BMP file is accepted. Everything that can be checked
without the model (the run's folder, that its model.keras and index are the
ones its run.json recorded, its index's size against `--k`, every image) is
checked before the model is loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import keras
import numpy as np

from tensorflow_similarity.cli import run_folder
from tensorflow_similarity.cli.errors import UsageError
from tensorflow_similarity.cli.metric_options import SUPERVISED_ALGORITHMS
from tensorflow_similarity.datasets import IMAGE_EXTENSIONS, read_image
from tensorflow_similarity.datasets.folders import not_a_file
from tensorflow_similarity.datasets.image_header import MAX_IMAGE_PIXELS, check_image_pixels
from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.models.index_mixin import index_path


def add_lookup_command(commands: Any) -> None:
    """Adds the `lookup` sub-command to the sub-parsers `commands`."""
    lookup = commands.add_parser(
        "lookup",
        help="find the nearest indexed images of images, with a supervised run's model",
        description=(
            "Embed images with the model of a supervised run (OUTPUT/model.keras) and print "
            "the nearest images of its index (the training images of every class): rank, "
            "class and distance. Images are read as training read them: converted to RGB, "
            "resized to the run's --image-size and scaled to [0, 1]."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    lookup.add_argument(
        "images",
        nargs="+",
        metavar="IMAGE_OR_FOLDER",
        help="image files (" + ", ".join(IMAGE_EXTENSIONS) + "), or folders: their images, "
        "sub-folders included, in name order",
    )
    lookup.add_argument(
        "--output",
        default="tfsim-output",
        metavar="DIR",
        help="the folder of a finished `tfsim train-metric` run (or of `tfsim train` with "
        "a metric loss)",
    )
    lookup.add_argument("--k", type=int, default=5, help="neighbours per image")
    lookup.add_argument(
        "--json", action="store_true", help="print JSON instead of a table, for programs"
    )
    lookup.add_argument(
        "--no-safe-mode",
        dest="safe_mode",
        action="store_false",
        help="load a run whose index or model holds pickled Python objects or code (Keras' "
        "safe_mode=False): loading it runs that code, so only for a run you trust",
    )
    lookup.add_argument(
        "--max-image-pixels",
        type=int,
        default=MAX_IMAGE_PIXELS,
        metavar="N",
        help="refuse an image whose header declares more pixels (width times height) than "
        "this, before decoding it: a small file can decode to gigabytes (Pillow's default "
        "decompression-bomb limit)",
    )


def image_paths(arguments: list[str]) -> list[Path]:
    """Returns the image files named by `arguments`: files, and folders' images in name order.

    Raises:
        UsageError: For a path that does not exist, a folder without images,
            or an entry named as an image that is not a file (a FIFO, a link
            to a missing file), named.
    """
    paths: list[Path] = []
    for argument in arguments:
        path = Path(argument).expanduser()
        if path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.suffix.lower() in IMAGE_EXTENSIONS
                and not p.is_dir()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            for image in found:
                _check_a_file(image)
            if not found:
                raise UsageError(
                    f"folder {argument!r} holds no images ({', '.join(IMAGE_EXTENSIONS)} "
                    "files); give image files or folders of them."
                )
            paths.extend(found)
        elif os.path.lexists(path):
            _check_a_file(path)
            paths.append(path)
        else:
            raise UsageError(f"image {argument!r} does not exist; give image files or folders.")
    return paths


def _check_a_file(path: Path) -> None:
    # Checked without opening it: opening a FIFO would wait for a writer.
    what = not_a_file(path)
    if what is not None:
        raise UsageError(
            f"image {str(path)!r} is {what}, not an image file; give image files or folders."
        )


def _run_settings(output: Path) -> dict[str, Any]:
    """Returns the run.json of a finished supervised run in `output`, or raises `UsageError`.

    The run's model.keras and index must be those its run.json recorded
    when it finished (`run_folder.check_run_files`).
    """
    train_it = f"train one with: tfsim train --algorithm multisimilarity --output {output}"
    run = run_folder.read_run(output, f"--output {str(output)!r}", train_it)
    algorithm = run.get("options", {}).get("algorithm")
    if algorithm not in SUPERVISED_ALGORITHMS:
        raise UsageError(
            f"{str(output)!r} holds a self-supervised run ({algorithm}): its ContrastiveModel "
            f"has no index to look images up in. Lookup needs a supervised run; {train_it}-sup."
        )
    retrain = f"tfsim train --algorithm {algorithm} --output {output} --overwrite"
    run_folder.check_run_files(output, run, retrain, "lookup")
    return run


def neighbours(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Returns, per image, its `args.k` nearest indexed images (rank, label, class, distance).

    Raises:
        UsageError: For a folder without a finished supervised run, a bad
            `--k`, or an image that cannot be read.
    """
    output = Path(args.output).expanduser()
    if args.k < 1:
        raise UsageError(f"--k must be at least 1; got {args.k}.")
    run = _run_settings(output)
    index_size = int(Indexer.read_metadata(index_path(output / "model.keras"))["size"])
    if args.k > index_size:
        raise UsageError(f"--k {args.k} is larger than the {index_size} indexed images.")
    if args.max_image_pixels < 1:
        raise UsageError(f"--max-image-pixels must be at least 1; got {args.max_image_pixels}.")
    size = int(run["options"]["image_size"])
    paths = image_paths(args.images)
    try:
        # Every header first: a bomb among the images is refused before any is decoded.
        for path in paths:
            check_image_pixels(path, args.max_image_pixels, option="--max-image-pixels N")
        images = np.stack([read_image(path, size, max_pixels=None) for path in paths])
    except ValueError as error:
        raise UsageError(str(error)) from None
    model = load_run_model(output / "model.keras", args.safe_mode)
    try:
        model.load_index(output / "model.keras", safe_mode=args.safe_mode)
    except ValueError as error:
        raise UsageError(str(error).replace("safe_mode=False", "--no-safe-mode")) from None
    names = run.get("class_names") or []
    results = []
    for path, found in zip(paths, model.lookup(images, k=args.k, verbose=0), strict=True):
        results.append(
            {
                "image": str(path),
                "neighbours": [
                    {
                        "rank": rank,
                        "label": int(n.label),
                        "class": names[n.label] if n.label < len(names) else str(n.label),
                        "distance": float(n.distance),
                    }
                    for rank, n in enumerate(found, start=1)
                ],
            }
        )
    return results


def load_run_model(file: Path, safe_mode: bool) -> keras.Model:
    """Loads the run's `file`, or raises `UsageError` if it is cut short or safe mode refuses it."""
    # Keras says "File not found" of a .keras file that exists but is not a whole zip.
    if file.is_file() and not zipfile.is_zipfile(file):
        raise UsageError(
            f"{str(file)!r} is truncated or corrupt: it is not a whole .keras (zip) file "
            f"({file.stat().st_size} bytes). Train the run again, or restore the file from a copy."
        )
    try:
        return keras.saving.load_model(file, safe_mode=safe_mode)
    except ValueError as error:
        # Keras' refusal of a Lambda layer's (or other) Python code names its own remedy.
        if not safe_mode or "safe_mode=False" not in str(error):
            raise
        raise UsageError(
            f"{str(file)!r} holds Python code (a Lambda layer, say) that Keras' safe mode "
            "will not load, since loading it runs that code. If you trust the run, pass "
            f"--no-safe-mode. (Keras: {str(error).split('. ')[0]}.)"
        ) from None


def run(args: argparse.Namespace) -> int:
    """Prints the neighbours of `args.images` as text, or JSON with `--json`; returns 0."""
    results = neighbours(args)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for result in results:
        print(result["image"])
        print("  rank  label  class                 distance")
        for n in result["neighbours"]:
            print(f"  {n['rank']:>4}  {n['label']:>5}  {n['class']:<20}  {n['distance']:.6f}")
    return 0
