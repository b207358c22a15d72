"""The base class of nearest-neighbour search indexes."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.distances import (
    Distance,
    InnerProductSimilarity,
    distance_canonicalizer,
)


@keras.saving.register_keras_serializable(package="Similarity")
class Search(abc.ABC):
    """A k-nearest-neighbour index over embeddings, each kept with an integer id.

    The base checks every argument, before any work and with the index left
    as it was, and leaves subclasses four methods on checked input:
    `_add(embeddings, idxs)`, `_lookup(queries, k)`, `_save(path)`,
    `_load(path)`, plus `size()` and `reset()`; a search that can remove
    rows also implements `_remove(idxs)` and, if it keeps tombstones,
    `_compact()` (the lifecycle verbs `remove`, `upsert` and `compact`). Lookups return, per query,
    the ids of its `k` nearest embeddings and their distances, nearest
    first (ascending distance). For `InnerProductSimilarity`, a similarity,
    the distance returned is the negated inner product `-q.k`, so that
    "ascending" still means "nearest first" for every distance.

    Args:
        distance: A `Distance` or its name (see `distance_canonicalizer`).
        dim: The size of the embeddings.
        verbose: Verbosity, 0 or 1: the default of `add` and `batch_add`'s
            own `verbose`. Defaults to 0.
        name: The index's name. Defaults to the subclass's.

    The positional order is 0.17's: `(distance, dim, verbose, name)`;
    subclasses put their own arguments between `dim` and `verbose`, as 0.17's
    `NMSLibSearch` did.

    Raises:
        ValueError: If `distance` is unknown or `dim` is not a positive
            integer.
    """

    default_name = "search"

    def __init__(
        self,
        distance: Distance | str = "cosine",
        dim: int = 0,
        verbose: int = 0,
        name: str | None = None,
    ) -> None:
        owner = type(self).__name__
        self.distance: Distance = distance_canonicalizer(distance)
        self.dim = check_int(
            "dim", dim, minimum=1, owner=owner, hint="Pass the size of the embeddings to index."
        )
        self.name = self.default_name if name is None else str(name)
        self.verbose = check_int("verbose", verbose, minimum=0, owner=owner)

    # Verbs, checked here.

    def add(self, embedding: Any, idx: int, verbose: int | None = None, **kwargs: Any) -> None:
        """Adds one embedding under the id `idx`.

        Args:
            embedding: A `[dim]` embedding.
            idx: Its id (the store's record id), returned by lookups.
            verbose: Print a line naming the index and what was added if 1
                (0.17 printed its index build's progress). `None` (default)
                takes the index's `verbose`, 0 unless set at construction.
            **kwargs: Ignored: accepted for 0.17's `build=` (of its
                `NMSLibSearch`; every search here answers right after an add).

        Raises:
            ValueError: If `embedding` is not of shape `[dim]` and finite,
                `idx` is not an integer, or `verbose` not a non-negative one.
        """
        embedding = self._embeddings(embedding, single=True, what="embedding")
        self.batch_add(embedding, [idx], verbose=verbose)

    def batch_add(
        self, embeddings: Any, idxs: Sequence[int], verbose: int | None = None, **kwargs: Any
    ) -> None:
        """Adds `embeddings[i]` under the id `idxs[i]`, for every `i`.

        Args:
            embeddings: `[n, dim]` embeddings.
            idxs: `n` integer ids.
            verbose: Print a line naming the index, how many embeddings were
                added and its size if 1. `None` (default) takes the index's
                `verbose`, 0 unless set at construction.
            **kwargs: Ignored (see `add`).

        Raises:
            ValueError: If `embeddings` is not of shape `[n, dim]` and finite,
                `idxs` is not `n` integers, or `verbose` not a non-negative
                integer.
        """
        owner = type(self).__name__
        verbose = (
            self.verbose
            if verbose is None
            else check_int("verbose", verbose, minimum=0, owner=owner)
        )
        embeddings = self._embeddings(embeddings, what="embeddings")
        idxs = self._idxs(idxs, len(embeddings))
        if len(embeddings):
            self._add(embeddings, idxs)
        if verbose:
            plural = "" if len(embeddings) == 1 else "s"
            print(
                f"{owner} {self.name!r}: added {len(embeddings)} embedding{plural}, "
                f"{self.size()} indexed."
            )

    def lookup(self, embedding: Any, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
        """Returns the ids and distances of the `k` embeddings nearest `embedding`.

        Args:
            embedding: A `[dim]` query.
            k: How many neighbours. Defaults to 5.

        Returns:
            `(idxs, distances)`, each of shape `[k]` (int64 and float32),
            nearest first.

        Raises:
            ValueError: If the query is not of shape `[dim]` and finite, the
                index is empty, or `k` is not in `[1, size()]`.
        """
        embedding = self._embeddings(embedding, single=True, what="embedding")
        idxs, distances = self.batch_lookup(embedding, k=k)
        return idxs[0], distances[0]

    def batch_lookup(self, embeddings: Any, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
        """Returns the ids and distances of the `k` nearest neighbours of each query.

        Args:
            embeddings: `[n, dim]` queries.
            k: How many neighbours per query. Defaults to 5.

        Returns:
            `(idxs, distances)`, each of shape `[n, k]` (int64 and float32),
            each row sorted by ascending distance.

        Raises:
            ValueError: If the queries are not of shape `[n, dim]` and finite,
                the index is empty, or `k` is not in `[1, size()]`.
        """
        embeddings = self._embeddings(embeddings, what="queries")
        k = self._k(k)
        if not len(embeddings):
            return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
        return self._lookup(embeddings, k)

    def remove(self, idxs: Sequence[int]) -> None:
        """Removes the embeddings added under the ids `idxs`: no lookup returns them again.

        A search that cannot delete in place (HNSW) marks them removed
        (tombstones, left out of every lookup) until `compact`.

        Args:
            idxs: Distinct ids of embeddings in the index.

        Raises:
            ValueError: If `idxs` are not distinct integers, or one is not in
                the index (nothing is removed then).
        """
        idxs = self._idxs(idxs, len(np.asarray(idxs).reshape(-1)))
        self._check_distinct(idxs)
        missing = idxs[~self._present(idxs)]
        if len(missing):
            raise ValueError(
                f"{type(self).__name__}: no embedding has the id {int(missing[0])} "
                f"({len(missing)} of the {len(idxs)} ids are not in the index); nothing was "
                "removed. Pass ids of indexed embeddings."
            )
        if len(idxs):
            self._remove(idxs)

    def upsert(self, embeddings: Any, idxs: Sequence[int]) -> None:
        """Puts `embeddings[i]` under the id `idxs[i]`, replacing what the id held, if anything.

        Args:
            embeddings: `[n, dim]` embeddings.
            idxs: `n` distinct integer ids, indexed or new.

        Raises:
            ValueError: As `batch_add`, or if `idxs` are not distinct.
        """
        embeddings = self._embeddings(embeddings, what="embeddings")
        idxs = self._idxs(idxs, len(embeddings))
        self._check_distinct(idxs)
        if not len(idxs):
            return
        present = idxs[self._present(idxs)]
        if len(present):
            self._remove(present)
        self._add(embeddings, idxs)

    def compact(self) -> None:
        """Drops what removed embeddings still hold (tombstones), rebuilding if needed.

        Lookups are the same before and after; only memory and speed
        change. A no-op for a search that deletes in place.
        """
        self._compact()

    def save(self, path: Path | str) -> None:
        """Writes the index into the folder `path` (created if needed).

        Args:
            path: A folder; a store may be saved into the same one.
        """
        self._save(Path(path))

    def load(self, path: Path | str) -> None:
        """Replaces the content of the index by the one saved in the folder `path`.

        The saved file is read and checked completely first: on any error the
        index is left as it was.

        Args:
            path: The folder given to `save`.

        Raises:
            FileNotFoundError: If nothing was saved there.
            ValueError: If the file is corrupt, of another format version, or
                was saved by an index of another class, distance or `dim`.
        """
        self._load(Path(path))

    def saved_files(self) -> list[str]:
        """The names of the files `save` writes into its folder.

        `Indexer.save` records a checksum of each and `Indexer.load` verifies
        them before reading anything. Defaults to none; a subclass that
        saves files names them.
        """
        return []

    def __len__(self) -> int:
        return self.size()

    def is_built(self) -> bool:
        """Whether the index can answer lookups once it holds embeddings."""
        return True

    def get_config(self) -> dict[str, Any]:
        return {
            "distance": self.distance.name,
            "dim": self.dim,
            "name": self.name,
            "verbose": self.verbose,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Search:
        return cls(**config)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(distance={self.distance.name!r}, dim={self.dim}, "
            f"size={self.size()})"
        )

    # For subclasses.

    @abc.abstractmethod
    def size(self) -> int:
        """The number of embeddings in the index."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Removes every embedding, as if the index were just created."""

    @abc.abstractmethod
    def _add(self, embeddings: np.ndarray, idxs: np.ndarray) -> None:
        """Adds checked float32 `[n, dim]` embeddings (n >= 1) and int64 `[n]` ids."""

    @abc.abstractmethod
    def _lookup(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Looks up checked float32 `[n, dim]` queries (n >= 1), `1 <= k <= size()`."""

    @abc.abstractmethod
    def _save(self, path: Path) -> None:
        """Saves into the folder `path`."""

    @abc.abstractmethod
    def _load(self, path: Path) -> None:
        """Loads from the folder `path`, reading and checking everything before any change."""

    def _remove(self, idxs: np.ndarray) -> None:
        """Removes checked, distinct, present int64 ids."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot remove embeddings; implement _remove(idxs)."
        )

    def _compact(self) -> None:  # noqa: B027 - a hook whose default is to do nothing
        """Drops tombstones; nothing to do for a search that deletes in place."""

    def _present(self, idxs: np.ndarray) -> np.ndarray:
        """Whether each of `idxs` is the id of an indexed embedding."""
        ids = getattr(self, "ids", None)
        if ids is None:
            raise NotImplementedError(f"{type(self).__name__} does not list its ids.")
        return np.isin(idxs, ids())

    def _check_distinct(self, idxs: np.ndarray) -> None:
        unique, counts = np.unique(idxs, return_counts=True)
        if (counts > 1).any():
            raise ValueError(
                f"{type(self).__name__}: the id {int(unique[counts > 1][0])} is given "
                f"{int(counts.max())} times; pass each id once."
            )

    @property
    def is_similarity(self) -> bool:
        """Whether the distance is a similarity (larger is nearer), reported negated."""
        return isinstance(self.distance, InnerProductSimilarity)

    def _embeddings(self, embeddings: Any, *, what: str, single: bool = False) -> np.ndarray:
        """Returns `embeddings` as a float32 `[n, dim]` array (`[1, dim]` when `single`)."""
        owner = type(self).__name__
        try:
            array = np.asarray(embeddings, dtype=np.float32)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"{owner}: {what} must be numbers, got {type(embeddings).__name__} ({err})."
            ) from err
        wanted = f"[{self.dim}]" if single else f"[n, {self.dim}]"
        if (single and array.shape != (self.dim,)) or (
            not single and (array.ndim != 2 or array.shape[1] != self.dim)
        ):
            raise ValueError(
                f"{owner}: {what} must have shape {wanted} (the index's dim={self.dim}); got "
                f"shape {list(array.shape)}. Pass embeddings of the model's output size, or "
                "create the index with that dim."
            )
        if not np.isfinite(array).all():
            raise ValueError(
                f"{owner}: {what} contain NaN or infinite values; an index only holds finite "
                "embeddings. Check the model's outputs."
            )
        return array[np.newaxis] if single else array

    def _idxs(self, idxs: Any, count: int) -> np.ndarray:
        owner = type(self).__name__
        array = np.asarray(idxs)
        if array.ndim != 1 or len(array) != count:
            raise ValueError(
                f"{owner}: idxs must hold one id per embedding: {count} embeddings but idxs of "
                f"shape {list(array.shape)}. Pass as many ids as embeddings."
            )
        if count and not np.issubdtype(array.dtype, np.integer):
            raise ValueError(
                f"{owner}: idxs must be integers, got dtype {array.dtype}. Pass the store's "
                "record ids."
            )
        return array.astype(np.int64)

    def _k(self, k: Any) -> int:
        owner = type(self).__name__
        size = self.size()
        if size == 0:
            raise ValueError(
                f"{owner}: the index is empty, there is nothing to look up. Add embeddings "
                "(batch_add, or the model's index()) first."
            )
        k = check_int("k", k, minimum=1, owner=owner)
        if k > size:
            raise ValueError(
                f"{owner}: k={k} is larger than the index, which holds {size} embeddings. "
                f"Pass k <= {size}, or index more embeddings."
            )
        return k

    def _check_saved_config(self, config: dict[str, Any], path: Path) -> None:
        """Raises if a saved index's distance or dim differ from this index's."""
        owner = type(self).__name__
        for key, mine in (("distance", self.distance.name), ("dim", self.dim)):
            if config.get(key) != mine:
                raise ValueError(
                    f"{owner}: the index saved in {str(path)!r} has {key}={config.get(key)!r} "
                    f"but this index has {key}={mine!r}. Create the index with "
                    f"{key}={config.get(key)!r} to load it."
                )
