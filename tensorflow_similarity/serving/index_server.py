"""`IndexServer`: the `lookup` of an export whose index is saved beside its SavedModel."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.serving.destination import MANIFEST, WRITTEN_BY
from tensorflow_similarity.serving.export import INDEX_FOLDER


class IndexServer:
    """Answers `lookup(images)` from an export's `embed` signature and the index saved beside it.

    An export with `index_location="external"` (`tfsim export
    --index-location external`, or `"auto"` for an index over
    `max_index_bytes`) holds the `embed` signature and, in `path / "index"`,
    the index as `Indexer.save` wrote it. `IndexServer(path)` loads the
    signature with `tf.saved_model.load` (no model code of this package) and
    the index with `Indexer.load` (a `FaissOnDiskSearch`'s lists are
    memory-mapped where they are; a `MilvusSearch` reconnects to its
    collection), and `lookup` answers as the exported `lookup` signature
    would: `ids` (int64), `distances` (float32), `labels` (int64, -1 for an
    item without one) and `label_names` (string: the export's class names,
    or the label's digits), each `[batch, k]` as `tf.Tensor`s, nearest
    first: the neighbours and distances `model.lookup(images, k)` returns.
    A `k` above the index's size returns the whole index, with
    `Indexer`'s warning. Where an approximate search finds fewer than `k`
    neighbours, the row is padded with id -1, distance `inf`, label -1 and
    name `""`. An empty batch returns `[0, k]` outputs.

    Images are checked before the network runs: their shape must be the
    export's `[batch, *input_shape]` and their pixels finite; a uint8
    export (`uint8_input`) takes uint8 images only. The index is checked at
    load before any record is read: it must exist, have the export's
    distance and embedding size, and hold embeddings of the weights the
    export's `embed` carries (its `embedding_fingerprint`, recorded at
    export; an index re-made by other weights is stale). Items added to it
    later (`server.index.upsert(ids, server.embed(images)["embeddings"])`,
    then `server.index.save(path / "index")`) keep it fresh.

    Args:
        path: The export's folder.
        safe_mode: Refuse an index whose records' data were pickled, as
            `Indexer.load` does. Defaults to `True`.
        search_options: What `Indexer.load` takes that a save does not
            record, such as a Milvus server's token
            (`{"token": "user:password"}`). Defaults to none.

    Raises:
        FileNotFoundError: If `path` holds no export of this package, or its
            index folder is missing.
        ValueError: If the export holds its index in the graph (use its
            `lookup` signature) or none, or the index is of another
            distance or embedding size, or stale, or corrupt.

    Example:

    >>> import keras, numpy as np, tempfile
    >>> from tensorflow_similarity.models import SimilarityModel
    >>> from tensorflow_similarity.serving import IndexServer, export_model
    >>> inputs = keras.Input((4,))
    >>> model = SimilarityModel(inputs, keras.layers.Dense(3)(inputs))
    >>> model.compile("adam", distance="cosine")
    >>> model.index(np.eye(4, dtype="float32"), np.arange(4), verbose=0)
    >>> folder = tempfile.mkdtemp() + "/served"
    >>> export_model(model, folder, k=2, index_location="external", verbose=0).signatures
    ('embed',)
    >>> server = IndexServer(folder)
    >>> server.lookup(np.eye(4, dtype="float32"))["ids"][:, 0].numpy().tolist()
    [0, 1, 2, 3]
    """

    def __init__(
        self,
        path: str | Path,
        *,
        safe_mode: bool = True,
        search_options: dict[str, Any] | None = None,
    ) -> None:
        self.path = Path(path)
        manifest = _read_manifest(self.path)
        folder = self.path / str(manifest.get("index_folder") or INDEX_FOLDER)
        if not folder.is_dir():
            raise FileNotFoundError(
                f"IndexServer: the export in {str(self.path)!r} keeps its index in "
                f"{str(folder)!r}, which is missing. Copy the export's folder whole (with "
                f"{INDEX_FOLDER}/), or export the model again."
            )
        metadata = Indexer.read_metadata(folder)
        self._check_index(folder, metadata, manifest)
        self.k: int = int(manifest["k"])
        self.input_shape: tuple[int | None, ...] = tuple(manifest["input"]["shape"][1:])
        self.input_dtype: str = manifest["input"]["dtype"]
        self.class_names: list[str] = list(manifest.get("class_names") or [])
        # Passed only when given: it is for a search that needs it (MilvusSearch's token).
        options = {} if search_options is None else {"search_options": search_options}
        self.index: Indexer = Indexer.load(folder, verbose=0, safe_mode=safe_mode, **options)
        self._embed = tf.saved_model.load(str(self.path)).signatures["embed"]

    @staticmethod
    def _check_index(folder: Path, metadata: dict[str, Any], manifest: dict[str, Any]) -> None:
        """Refuses an index that is not the export's: another distance, size or weights."""
        where = f"IndexServer: the index in {str(folder)!r}"
        if metadata["distance"] != manifest["distance"]:
            raise ValueError(
                f"{where} uses the distance {metadata['distance']!r}, but the export's embed "
                f"was exported for {manifest['distance']!r}. Export the model again."
            )
        if metadata["embedding_size"] != manifest.get("embedding_size"):
            raise ValueError(
                f"{where} holds embeddings of size {metadata['embedding_size']}, but the "
                f"export's embed makes {manifest.get('embedding_size')}. Export the model again."
            )
        recorded = manifest.get("embedding_fingerprint")
        saved = metadata.get("embedding_fingerprint")
        if recorded is not None and saved != recorded:
            raise ValueError(
                f"{where} is stale: its embeddings were made by other weights (fingerprint "
                f"{saved!r}) than those of the export's embed ({recorded!r}), so lookups "
                "would compare embeddings of two models. Export the model with its current "
                "index again, or re-index with this export's embed."
            )

    def embed(self, images: Any) -> dict[str, tf.Tensor]:
        """The `embed` signature's outputs for `images`, checked first: `{"embeddings": ...}`.

        Args:
            images: `[batch, *input_shape]` images (see the class).

        Returns:
            `{"embeddings": [batch, dim] float32}`: what the index holds.

        Raises:
            ValueError: If the images are of another shape or dtype, or not finite.
        """
        return {"embeddings": self._embeddings(self._checked(images))}

    def lookup(self, images: Any, k: int | None = None) -> dict[str, tf.Tensor]:
        """The `k` nearest indexed items of each image, as the exported `lookup` returns them.

        Args:
            images: `[batch, *input_shape]` images (see the class).
            k: Neighbours per image. Defaults to the export's `k`.

        Returns:
            `ids` (int64), `distances` (float32), `labels` (int64) and
            `label_names` (string), each `[batch, k]`, nearest first.

        Raises:
            ValueError: If the images are of another shape or dtype, or not
                finite, or `k` is below 1 (checked before the network runs).
        """
        k = self.k if k is None else check_int("k", k, minimum=1, owner="IndexServer.lookup")
        images = self._checked(images)
        width = min(k, self.index.size())
        rows = self.index.batch_lookup(self._embeddings(images).numpy(), k=k, verbose=0)
        count = len(rows)
        ids = np.full((count, width), -1, np.int64)
        distances = np.full((count, width), np.inf, np.float32)
        labels = np.full((count, width), -1, np.int64)
        names = np.full((count, width), b"", object)
        for row, found in enumerate(rows):
            for column, neighbour in enumerate(found):
                ids[row, column] = neighbour.id
                distances[row, column] = neighbour.distance
                if neighbour.label is not None:
                    labels[row, column] = neighbour.label
                    names[row, column] = self._label_name(int(neighbour.label))
        return {
            "ids": tf.constant(ids),
            "distances": tf.constant(distances),
            "labels": tf.constant(labels),
            "label_names": tf.constant(names, tf.string),
        }

    def _label_name(self, label: int) -> bytes:
        names = self.class_names
        return (names[label] if 0 <= label < len(names) else str(label)).encode()

    def _embeddings(self, images: np.ndarray) -> tf.Tensor:
        return self._embed(images=tf.constant(images))["embeddings"]

    def _checked(self, images: Any) -> np.ndarray:
        """`images` as the signature's dtype, or a `ValueError` that says what was expected."""
        shape = ", ".join("any" if size is None else str(size) for size in self.input_shape)
        wanted = f"images of shape [batch, {shape}] ({self.input_dtype})"
        array = np.asarray(images.numpy() if isinstance(images, tf.Tensor) else images)
        same = array.ndim == len(self.input_shape) + 1 and all(
            size is None or size == given
            for size, given in zip(self.input_shape, array.shape[1:], strict=True)
        )
        if not same:
            raise ValueError(
                f"IndexServer takes {wanted}; resize them to that size first. Got a batch of "
                f"shape {list(array.shape)}."
            )
        if self.input_dtype == "uint8":
            if array.dtype != np.uint8:
                raise ValueError(
                    f"IndexServer takes {wanted}: 0-255 pixels as uint8. Got {array.dtype}; "
                    "convert them with np.asarray(images, np.uint8) if they are 0-255."
                )
            return array
        if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
            raise ValueError(f"IndexServer takes {wanted}; got images of dtype {array.dtype}.")
        array = array.astype(np.float32, copy=False)
        if not np.isfinite(array).all():
            raise ValueError("IndexServer: images hold NaN or infinite pixels; give finite pixels.")
        return array


def _read_manifest(path: Path) -> dict[str, Any]:
    """The export's `serving.json`, refused unless it is an export with an external index."""
    file = path / MANIFEST
    if not file.is_file():
        raise FileNotFoundError(
            f"IndexServer: {str(path)!r} holds no export of tensorflow_similarity (no "
            f"{MANIFEST}). Give the folder export_model (tfsim export) wrote."
        )
    try:
        manifest = json.loads(file.read_text("utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"IndexServer: {str(file)!r} is not readable JSON ({error}).") from None
    if not isinstance(manifest, dict) or manifest.get("written_by") != WRITTEN_BY:
        raise ValueError(
            f"IndexServer: {str(file)!r} was not written by export_model; give the folder "
            "export_model (tfsim export) wrote."
        )
    location = manifest.get("index_location")
    if location != "external":
        how = (
            "its index is in the graph: call tf.saved_model.load(path).signatures['lookup']"
            if location == "graph" or "lookup" in (manifest.get("signatures") or [])
            else "it holds no index (embed alone)"
        )
        raise ValueError(
            f"IndexServer: the export in {str(path)!r} has no index saved beside it: {how}. "
            "Export with index_location='external' (tfsim export --index-location external) "
            "to serve it with IndexServer."
        )
    return manifest
