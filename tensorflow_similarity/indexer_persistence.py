"""The persistence half of the `Indexer`: save it to a directory, read it back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Self

import numpy as np

from tensorflow_similarity.classification_metrics import make_classification_metric
from tensorflow_similarity.distances import Distance, distance_canonicalizer
from tensorflow_similarity.search import SEARCH_NAMES, Search
from tensorflow_similarity.stores import STORE_CLASSES, MemmapStore, Store
from tensorflow_similarity.stores.memmap_store import META_NAME as MEMMAP_META_NAME

METADATA_FILE = "index_metadata.json"
# 2: the store is saved as its class and config (1 saved "memory" or nothing).
FORMAT_VERSION = 2


class IndexerPersistence:
    """`save`, `read_metadata` and `load` of an `Indexer` (mixed into it).

    `load` is a class method: `Indexer.load(path)` rebuilds an `Indexer`.

    The store keeps its kind. A `MemoryStore` is written into the folder and
    read back into memory. A `MemmapStore`'s files are copied into the
    folder (unless it already lives there), and `load` memory-maps them
    where they are, in the saved folder, copying nothing, which is what a
    larger-than-memory index needs: records added to the loaded index are
    appended to those files (save it into the same folder again to keep
    the saved index whole; a `reset()` empties them). To copy the records
    elsewhere instead, pass `kv_store=MemmapStore(other_folder)` to `load`.
    Another `Store` subclass is saved as its class name and config; `load`
    needs an instance of it (`kv_store=...`) to read the records into.
    """

    def save(self, path: str | Path, compression: bool = True) -> None:
        """Writes the index (metadata, store, search, calibration) to directory `path`.

        Args:
            path: The directory (created if needed).
            compression: Whether the store compresses its data. Defaults to
                `True`.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        metadata = {
            "format_version": FORMAT_VERSION,
            "size": self.size(),
            "distance": self.distance.name,
            "embedding_size": self.embedding_size,
            "embedding_output": self.embedding_output,
            "search": _search_name(self.search),
            "search_config": self.search.get_config(),
            "kv_store": {
                "class_name": type(self.kv_store).__name__,
                # A memmap store is reopened where it was saved, not where it lived.
                "config": {k: v for k, v in self.kv_store.get_config().items() if k != "path"},
            },
            "evaluator": self.evaluator_type if isinstance(self.evaluator_type, str) else None,
            "stat_buffer_size": self.stat_buffer_size,
            "is_calibrated": self.is_calibrated,
            "calibration_metric": self.calibration_metric.get_config(),
            "cutpoints": self.cutpoints,
            "calibration_thresholds": {
                k: np.asarray(v).tolist() for k, v in self.calibration_thresholds.items()
            },
        }
        self.kv_store.save(path, compression=compression)
        self.search.save(path)
        (path / METADATA_FILE).write_text(json.dumps(metadata))

    @staticmethod
    def read_metadata(path: str | Path) -> dict[str, Any]:
        """Returns the metadata of the index saved in directory `path`.

        Raises:
            FileNotFoundError: If `path` holds no saved index.
            ValueError: If the metadata is corrupt or of another format
                version.
        """
        file = Path(path) / METADATA_FILE
        if not file.is_file():
            raise FileNotFoundError(
                f"No saved index in {str(path)!r} (no {METADATA_FILE}). Pass the directory "
                "Indexer.save (or SimilarityModel.save_index) wrote."
            )
        try:
            metadata = json.loads(file.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"{file} is corrupt ({error}); save the index again.") from None
        version = metadata.get("format_version") if isinstance(metadata, dict) else None
        if version != FORMAT_VERSION:
            raise ValueError(
                f"{file} is of index format version {version!r}; this version reads "
                f"{FORMAT_VERSION}. Re-create the index with this version."
            )
        return metadata

    @classmethod
    def load(
        cls,
        path: str | Path,
        verbose: int = 1,
        *,
        distance: Distance | str | None = None,
        embedding_size: int | None = None,
        kv_store: Store | None = None,
        safe_mode: bool = True,
    ) -> Self:
        """Reads an index `save` wrote.

        Args:
            path: The directory `save` wrote.
            verbose: Print progress if 1. Defaults to 1.
            distance: If given, the distance the saved index must use.
            embedding_size: If given, the dimension the saved index must have.
            kv_store: A store of the saved store's class to read the records
                into, replacing its own. Defaults to a new one: a `MemoryStore`,
                or a `MemmapStore` on the files in `path` (see the class).
            safe_mode: If `True` (the default), a store whose records' data
                were saved as pickled Python objects is refused, since
                unpickling runs code the file names. `False` loads it, as
                `keras.saving.load_model(safe_mode=False)` does: only for an
                index you trust.

        Returns:
            A new `Indexer` with the saved embeddings, labels, data and
            calibration.

        Raises:
            FileNotFoundError: If `path` holds no saved index.
            ValueError: If the saved index is corrupt, of another format
                version, or of another distance or dimension than expected,
                or `kv_store` is not of the saved store's class, or (in safe
                mode) holds pickled data; nothing is loaded then.
        """
        metadata = cls.read_metadata(path)
        saved_distance = distance_canonicalizer(metadata["distance"])
        if distance is not None and distance_canonicalizer(distance).name != saved_distance.name:
            raise ValueError(
                f"The index in {str(path)!r} was saved with distance "
                f"{saved_distance.name!r}, not {distance_canonicalizer(distance).name!r}. "
                "Create the index (compile or create_index) with the saved distance, or "
                "re-index the examples."
            )
        if embedding_size is not None and metadata["embedding_size"] != embedding_size:
            raise ValueError(
                f"The index in {str(path)!r} holds embeddings of size "
                f"{metadata['embedding_size']}, not {embedding_size}: it was saved from "
                "another model. Load it into a model of that output size, or re-index."
            )
        if metadata["search"] not in SEARCH_NAMES:
            raise ValueError(
                f"The index in {str(path)!r} was saved with a search of type "
                f"{metadata['search_config'].get('name', '?')!r}, which Indexer.load cannot "
                f"rebuild (it rebuilds {tuple(SEARCH_NAMES)}). Re-index with one of those."
            )
        search = SEARCH_NAMES[metadata["search"]].from_config(metadata["search_config"])
        store = _saved_store(Path(path), metadata["kv_store"], kv_store)
        index = cls(
            embedding_size=metadata["embedding_size"],
            distance=saved_distance,
            search=search,
            evaluator=metadata["evaluator"] or "memory",
            embedding_output=metadata["embedding_output"],
            stat_buffer_size=metadata["stat_buffer_size"],
        )
        if verbose:
            print(f"Loading an index of {metadata['size']} embeddings from {path}")
        index.search.load(path)
        store.load(path, safe_mode=safe_mode)
        # Set after construction, which empties a given store: the one opened in place
        # holds the saved records.
        index.kv_store_type = index.kv_store = store
        if index.size() != metadata["size"]:
            raise ValueError(
                f"The index in {str(path)!r} is corrupt: its metadata says "
                f"{metadata['size']} embeddings, its store holds {index.size()}. Save it again."
            )
        index.is_calibrated = bool(metadata["is_calibrated"])
        if index.is_calibrated:
            config = metadata["calibration_metric"]
            index.calibration_metric = make_classification_metric(
                config.get("canonical_name", config.get("name")), name=config.get("name", "")
            )
            index.cutpoints = metadata["cutpoints"]
            index.calibration_thresholds = {
                k: np.asarray(v) for k, v in metadata["calibration_thresholds"].items()
            }
        return index


def _saved_store(path: Path, saved: dict[str, Any], given: Store | None) -> Store:
    """The store to read the saved records into: `given`, or a new one of the saved class."""
    class_name, config = saved["class_name"], saved["config"]
    if given is not None:
        if type(given).__name__ != class_name:
            raise ValueError(
                f"The index in {str(path)!r} was saved with a {class_name}, so its records can "
                f"only be read into a {class_name}, not a {type(given).__name__}. Pass "
                f"kv_store={class_name}(...) or none."
            )
        return given
    if class_name not in STORE_CLASSES:
        raise ValueError(
            f"The index in {str(path)!r} was saved with a store of class {class_name!r}, which "
            f"Indexer.load cannot create by itself (it creates {sorted(STORE_CLASSES)}). Pass "
            f"kv_store={class_name}(...) to read the records into."
        )
    if STORE_CLASSES[class_name] is MemmapStore:
        if not (path / MEMMAP_META_NAME).is_file():
            raise FileNotFoundError(
                f"The index in {str(path)!r} was saved with a MemmapStore but its files "
                f"({MEMMAP_META_NAME}, *.bin) are missing. Save the index again."
            )
        return MemmapStore(path, **config)
    return STORE_CLASSES[class_name](**config)


def _search_name(search: Search) -> str | None:
    return next((name for name, cls in SEARCH_NAMES.items() if type(search) is cls), None)
