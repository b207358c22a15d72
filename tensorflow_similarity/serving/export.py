"""`export_model`: a model and its index as one SavedModel that needs only TensorFlow."""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tensorflow as tf

from tensorflow_similarity._validation import check_bool, check_int
from tensorflow_similarity.distances import Distance, distance_canonicalizer
from tensorflow_similarity.serving.destination import (
    MANIFEST,
    check_destination,
    manifest_entry,
    staging_dir,
    switch_in,
)
from tensorflow_similarity.serving.index_snapshot import (
    MAX_INDEX_BYTES,
    index_bytes,
    snapshot_index,
)
from tensorflow_similarity.serving.similarity_serving import SimilarityServing
from tensorflow_similarity.serving.tflite import convert_to_tflite

# Where an export may put its index: chosen by size, in the graph, or saved beside it.
INDEX_LOCATIONS = ("auto", "graph", "external")
# The folder, inside the export, of an index saved beside the SavedModel (`Indexer.save`).
INDEX_FOLDER = "index"


@dataclasses.dataclass(frozen=True)
class ServingExport:
    """What `export_model` wrote.

    Attributes:
        path: The SavedModel folder.
        signatures: The serving signatures: `("embed",)` or `("embed", "lookup")`.
        k: Neighbours `lookup` returns (`None` without `lookup`).
        index_size: Indexed items `lookup` searches (0 without `lookup`).
        distance: The name of the index's distance.
        tflite_files: The TensorFlow Lite files written, one per signature.
        note: Why there is no `lookup`, or `""`.
        index_location: Where the index is: `"graph"` (the `lookup`
            signature), `"external"` (saved in `path / "index"`, served by
            `IndexServer`), or `None` (no index exported).
    """

    path: Path
    signatures: tuple[str, ...]
    k: int | None
    index_size: int
    distance: str
    tflite_files: tuple[Path, ...] = ()
    note: str = ""
    index_location: str | None = None


def export_model(
    model: Any,
    path: str | Path,
    k: int = 5,
    *,
    include_index: bool = True,
    uint8_input: bool = False,
    class_names: Sequence[str] | None = None,
    overwrite: bool = False,
    tflite: bool = False,
    max_index_bytes: int = MAX_INDEX_BYTES,
    verbose: int = 1,
    index_location: str = "auto",
) -> ServingExport:
    """Writes `model` and its index as a SavedModel with `embed` and `lookup` signatures.

    The SavedModel (see `SimilarityServing`) loads with `tf.saved_model.load`
    and serves under TensorFlow Serving with TensorFlow alone:

    * `embed`: `images` (`[batch, *input_shape]` float32, or uint8 0-255
      with `uint8_input`) to `embeddings` (`[batch, dim]` float32), the
      embeddings the index holds: L2-normalised when its distance is cosine;
    * `lookup`, when the model has a non-empty index and `include_index`:
      `images` to the `k` nearest indexed items, `ids` (int64), `distances`
      (float32), `labels` (int64, -1 for none) and `label_names` (string),
      each `[batch, k]`: what `model.lookup(images, k)` returns, in its
      order. A `k` above the index's size returns the whole index, as
      `lookup` does, with its warning.

    Where the index goes is `index_location`'s choice. `"graph"` holds it in
    the `lookup` signature, as above, up to `max_index_bytes`. `"external"`
    writes `embed` alone and saves the index beside it, in `path / "index"`,
    with `Indexer.save` (its own search and store: a `FaissOnDiskSearch`'s
    lists, a `MilvusSearch`'s URI and collection, which stay in the
    database); `serving.IndexServer(path)` loads both and answers
    `lookup(images)` with the outputs of the `lookup` signature.
    `"auto"` (the default) is `"graph"` for an index within
    `max_index_bytes` and `"external"`, with a warning, above it.

    Both signatures refuse, in the graph, images of another shape than
    `[batch, *input_shape]` and NaN or infinite pixels, with an error that
    names the expected shape; an empty batch returns empty outputs.

    The folder is written into a private staging folder beside `path` and
    switched in whole by renames, under a lock on `path` (see
    `serving.destination`): a failed or killed export leaves `path` as it
    was (a kill between the renames is undone by the next export), and two
    exports to one `path` each land whole, or the later one is refused.
    Beside `saved_model.pb` it holds `serving.json` (what was exported, and
    the files the export wrote; for an external index its folder, the class
    names and the `embedding_fingerprint` of its embeddings), with `tflite`
    `embed.tflite` (and `lookup.tflite`), and the external index's folder.

    Args:
        model: A `SimilarityModel` or `ContrastiveModel` (a model mixing in
            `IndexMixin`) with a known input shape.
        path: The folder to write.
        k: Neighbours `lookup` returns. Defaults to 5.
        include_index: Export `lookup` when the model has an index. Defaults
            to `True`; `False` exports `embed` alone.
        uint8_input: The signatures take uint8 images in 0-255, divided by
            255 in the graph (the `[0, 1]` floats `tfsim` trains on).
            Defaults to `False`: float32 images as the model takes them.
        class_names: The class names `label_names` holds, by label.
            Defaults to none: each label's digits.
        overwrite: Replace an earlier export at `path` (one this package
            wrote, with nothing beside it). Defaults to `False`.
        tflite: Also convert each signature to TensorFlow Lite. Defaults to
            `False`.
        max_index_bytes: The largest index (embeddings, ids, labels, names)
            `lookup` may hold. Defaults to `MAX_INDEX_BYTES` (1 GiB).
        verbose: Print what was written if 1. Defaults to 1.
        index_location: `"auto"` (the default), `"graph"` or `"external"`:
            see above.

    Returns:
        A `ServingExport`: the signatures written (`note` says why there is
        no `lookup`), `k`, the index's size, the TFLite files.

    Raises:
        FileExistsError: If `path` exists and `overwrite` is `False`; or
            is a symbolic link; or, with `overwrite`, is not an export this
            package wrote or holds files beside it (never deleted). Checked
            before anything is traced, and again before the switch.
        ValueError: For a bad argument, a model without a known input shape,
            or, with `index_location="graph"`, an index larger than
            `max_index_bytes` (the message names the limit and how to serve
            such an index).

    Example:

    >>> import keras, numpy as np, tempfile, tensorflow as tf
    >>> from tensorflow_similarity.models import SimilarityModel
    >>> from tensorflow_similarity.serving import export_model
    >>> inputs = keras.Input((4,))
    >>> model = SimilarityModel(inputs, keras.layers.Dense(3)(inputs))
    >>> model.compile("adam", distance="cosine")
    >>> model.index(np.eye(4, dtype="float32"), np.arange(4), verbose=0)
    >>> folder = tempfile.mkdtemp() + "/served"
    >>> export_model(model, folder, k=2, verbose=0).signatures
    ('embed', 'lookup')
    >>> served = tf.saved_model.load(folder)
    >>> served.signatures["lookup"](images=tf.eye(4))["ids"][:, 0].numpy().tolist()
    [0, 1, 2, 3]
    """
    owner = "export_model"
    k = check_int("k", k, minimum=1, owner=owner)
    for name, value in (
        ("include_index", include_index),
        ("uint8_input", uint8_input),
        ("overwrite", overwrite),
        ("tflite", tflite),
    ):
        check_bool(name, value, owner=owner)
    max_index_bytes = check_int("max_index_bytes", max_index_bytes, minimum=1, owner=owner)
    if index_location not in INDEX_LOCATIONS:
        raise ValueError(
            f"{owner}: index_location must be one of {INDEX_LOCATIONS}; got "
            f"{index_location!r}. 'external' saves the index beside the SavedModel, for "
            "serving.IndexServer."
        )
    path = Path(path)
    check_destination(path, overwrite)
    input_shape = model._index_input_shape()
    if input_shape is None:
        raise ValueError(
            f"{type(model).__name__} {model.name!r} has no single input of a known shape, so "
            "its serving signatures have no input spec. Export a Functional model (or one "
            "built with model.build(input_shape))."
        )
    index = getattr(model, "_ix", None)
    distance = _distance(model, index)
    snapshot, note, location = None, "", None
    if not include_index:
        note = "include_index=False"
    elif index is None or index.size() == 0:
        note = "the model's index is empty"
    else:
        location = _index_location(index, index_location, max_index_bytes)
        if location == "graph":
            snapshot = snapshot_index(index, class_names, max_bytes=max_index_bytes)
        else:
            note = f"the index is saved beside the SavedModel ({INDEX_FOLDER}/)"
        if k > index.size():
            warnings.warn(
                f"export_model: k={k} neighbours were asked for but the index holds "
                f"{index.size()} embeddings; lookup returns {index.size()}, as "
                "model.lookup does.",
                stacklevel=2,
            )
            k = index.size()
    module = SimilarityServing(
        model._serving_embeddings,
        input_shape,
        distance,
        index=snapshot,
        k=k,
        uint8_input=uint8_input,
    )
    signatures = module.signatures()
    result = ServingExport(
        path=path,
        signatures=tuple(signatures),
        k=k if location is not None else None,
        index_size=0 if location is None else index.size(),
        distance=distance.name,
        tflite_files=tuple(path / f"{name}.tflite" for name in signatures) if tflite else (),
        note=note,
        index_location=location,
    )
    external = index if location == "external" else None
    _write(
        module, signatures, path, result, uint8_input, input_shape, overwrite, external, class_names
    )
    if verbose:
        what = " and ".join(result.signatures)
        if location == "graph":
            extra = f" (k={result.k}, {result.index_size} indexed items, {result.distance})"
        elif location == "external":
            extra = (
                f" and the index beside it ({path / INDEX_FOLDER}: k={result.k}, "
                f"{result.index_size} indexed items, {result.distance}; serve lookup with "
                "serving.IndexServer)"
            )
        else:
            extra = f" only ({note}: no lookup)"
        print(f"Exported {what}{extra} to {path}")
    return result


def _index_location(index: Any, asked: str, max_index_bytes: int) -> str:
    """Where the index goes: `asked`, or for `"auto"` the graph if it fits, else beside it."""
    if asked != "auto":
        return asked
    needed = index_bytes(index.size(), index.embedding_size)
    if needed <= max_index_bytes:
        return "graph"
    warnings.warn(
        f"export_model: the index ({index.size()} embeddings of size {index.embedding_size}, "
        f"{needed / 2**20:.1f} MiB) is over max_index_bytes ({max_index_bytes / 2**20:.1f} "
        f"MiB), so it is saved beside the SavedModel ({INDEX_FOLDER}/) and the export has no "
        "lookup signature: serve lookups with tensorflow_similarity.serving.IndexServer, or "
        "pass index_location='graph' with a larger max_index_bytes.",
        stacklevel=3,
    )
    return "external"


def _distance(model: Any, index: Any) -> Distance:
    """The index's distance, or the one `compile` recorded for it (cosine by default)."""
    if index is not None:
        return index.distance
    settings = getattr(model, "_index_settings", None) or {}
    return distance_canonicalizer(settings.get("distance") or "cosine")


def _write(
    module: SimilarityServing,
    signatures: dict[str, Any],
    path: Path,
    result: ServingExport,
    uint8_input: bool,
    input_shape: Sequence[int | None],
    overwrite: bool,
    index: Any = None,
    class_names: Sequence[str] | None = None,
) -> None:
    """Saves `module` (its TFLite files, an external `index`) privately, then switches it in."""
    staged = staging_dir(path)
    try:
        tf.saved_model.save(module, str(staged), signatures=signatures)
        for file in result.tflite_files:
            (staged / file.name).write_bytes(convert_to_tflite(staged, file.stem))
        external = {}
        if index is not None:
            index.save(staged / INDEX_FOLDER)
            external = {
                "index_folder": INDEX_FOLDER,
                "embedding_size": index.embedding_size,
                "embedding_fingerprint": index.embedding_fingerprint,
                "class_names": None if class_names is None else [str(n) for n in class_names],
            }
        manifest = {
            "signatures": list(result.signatures),
            "input": {
                "name": "images",
                "shape": [None, *input_shape],
                "dtype": "uint8" if uint8_input else "float32",
            },
            "k": result.k,
            "index_size": result.index_size,
            "distance": result.distance,
            "note": result.note,
            "index_location": result.index_location,
            **external,
            **manifest_entry([entry.name for entry in staged.iterdir()] + [MANIFEST]),
        }
        (staged / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        switch_in(staged, path, overwrite)
    except BaseException:
        if staged.exists():
            shutil.rmtree(staged)
        raise
