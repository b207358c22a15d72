"""The persistence half of the `Indexer`: save it to a directory, read it back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Self

import numpy as np

from tensorflow_similarity.classification_metrics import make_classification_metric
from tensorflow_similarity.distances import Distance, distance_canonicalizer
from tensorflow_similarity.search import SEARCH_NAMES, Search

METADATA_FILE = "index_metadata.json"
FORMAT_VERSION = 1


class IndexerPersistence:
    """`save`, `read_metadata` and `load` of an `Indexer` (mixed into it).

    `load` is a class method: `Indexer.load(path)` rebuilds an `Indexer`.
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
            "kv_store": self.kv_store_type if isinstance(self.kv_store_type, str) else None,
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
    ) -> Self:
        """Reads an index `save` wrote.

        Args:
            path: The directory `save` wrote.
            verbose: Print progress if 1. Defaults to 1.
            distance: If given, the distance the saved index must use.
            embedding_size: If given, the dimension the saved index must have.

        Returns:
            A new `Indexer` with the saved embeddings, labels, data and
            calibration.

        Raises:
            FileNotFoundError: If `path` holds no saved index.
            ValueError: If the saved index is corrupt, of another format
                version, or of another distance or dimension than expected;
                nothing is loaded then.
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
        index = cls(
            embedding_size=metadata["embedding_size"],
            distance=saved_distance,
            search=search,
            kv_store=metadata["kv_store"] or "memory",
            evaluator=metadata["evaluator"] or "memory",
            embedding_output=metadata["embedding_output"],
            stat_buffer_size=metadata["stat_buffer_size"],
        )
        if verbose:
            print(f"Loading an index of {metadata['size']} embeddings from {path}")
        index.kv_store.load(path)
        index.search.load(path)
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


def _search_name(search: Search) -> str | None:
    return next((name for name, cls in SEARCH_NAMES.items() if type(search) is cls), None)
