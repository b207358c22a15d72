"""The index API a model gains by mixing in `IndexMixin`: index, look up, calibrate, match."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.classification_metrics import (
    ClassificationMetric,
    make_classification_metric,
)
from tensorflow_similarity.distances import Distance, distance_canonicalizer
from tensorflow_similarity.evaluators import Evaluator
from tensorflow_similarity.indexer import Indexer, format_table
from tensorflow_similarity.matchers import ClassificationMatch
from tensorflow_similarity.retrieval_metrics import RetrievalMetric
from tensorflow_similarity.search import Search
from tensorflow_similarity.stores import Store
from tensorflow_similarity.types import CalibrationResults, Lookup


def index_path(filepath: str | Path) -> Path:
    """Returns the folder `save_index(filepath)` writes: beside a `.keras` file, else inside.

    `model.keras` -> `model.index/`; any other path -> `path/index/` (0.17's
    layout, when `path` was a SavedModel folder).
    """
    filepath = Path(filepath)
    if filepath.suffix in (".keras", ".h5"):
        return filepath.with_suffix(".index")
    return filepath / "index"


class IndexMixin:
    """0.17's index API for a Keras model whose predictions are embeddings.

    The model embeds (with `predict`, so under the strategy the model was
    built in, on all its replicas) and its `Indexer` searches on the host.
    Arguments are checked before anything is predicted or changed: a bad
    call leaves the index as it was. A model gets its index from `compile`
    or `create_index`; one used before either gets the default index
    (cosine distance, exact linear search, memory store).

    A class mixing this in provides `_index_embeddings(x)` (the embeddings
    of a batch, as the indexer takes them), `_index_embedding_size(output)`
    and `_index_input_shape()`.

    Attributes:
        index_batch_size: The batch size of the predictions the index API
            makes (Keras' default of 32 makes many small distributed steps).
            Defaults to 256.
    """

    _ix: Indexer | None = None
    index_batch_size: int = 256

    # Hooks.

    def _index_embeddings(self, x: Any) -> Any:
        return self.predict(x, batch_size=self.index_batch_size, verbose=0)

    def _index_embedding_size(self, embedding_output: int | None) -> int:
        raise NotImplementedError

    def _index_input_shape(self) -> tuple[int | None, ...] | None:
        return None

    # The index itself.

    @property
    def _index(self) -> Indexer:
        if self._ix is None:
            self.create_index()
        return self._ix

    @_index.setter
    def _index(self, index: Indexer) -> None:
        self._ix = index

    def create_index(
        self,
        distance: Distance | str = "cosine",
        search: Search | str = "linear",
        kv_store: Store | str = "memory",
        evaluator: Evaluator | str = "memory",
        embedding_output: int | None = None,
        stat_buffer_size: int = 1000,
    ) -> None:
        """Creates the model's (empty) index, replacing any previous one.

        `compile` calls it; call it yourself to change the index without
        recompiling.

        Args:
            distance: A `Distance` or its name. Defaults to `"cosine"`.
            search: `"linear"` or a `Search` instance. Defaults to
                `"linear"`.
            kv_store: `"memory"` or a `Store` instance. Defaults to
                `"memory"`.
            evaluator: `"memory"` or an `Evaluator`. Defaults to `"memory"`.
            embedding_output: Which output holds the embeddings, for a
                multi-output model; `None` (default) means output 0.
            stat_buffer_size: Lookup timings kept for `index_summary`.

        Raises:
            ValueError: For an unknown component, or an `embedding_output`
                the model does not have.
        """
        size = self._index_embedding_size(embedding_output)
        self._ix = Indexer(
            embedding_size=size,
            distance=distance,
            search=search,
            kv_store=kv_store,
            evaluator=evaluator,
            embedding_output=embedding_output,
            stat_buffer_size=stat_buffer_size,
        )

    # Indexing.

    def index(
        self,
        x: Any,
        y: Any = None,
        data: Any = None,
        build: bool = True,
        verbose: int = 1,
    ) -> None:
        """Embeds `x` and adds the embeddings, with `y` and `data`, to the index.

        Args:
            x: A batch of examples.
            y: Their integer classes, or `None`.
            data: Items kept with them (returned by lookups), or `None`.
            build: Kept for 0.17's signature.
            verbose: Print progress if 1. Defaults to 1.

        Raises:
            ValueError: If `x` does not fit the model's input, or `y` or
                `data` does not have one item per example.
        """
        x = self._index_batch(x)
        _check_length("y", y, len(x))
        _check_length("data", data, len(x))
        if verbose:
            print(f"[Indexing {len(x)} examples]")
        self._index.batch_add(
            self._index_embeddings(x), labels=y, data=data, build=build, verbose=verbose
        )

    def index_single(
        self,
        x: Any,
        y: int | None = None,
        data: Any = None,
        build: bool = True,
        verbose: int = 1,
    ) -> None:
        """Embeds one example and adds it, with `y` and `data`, to the index.

        Args:
            x: One example (without batch axis).
            y: Its class, or `None`.
            data: An item kept with it, or `None`.
            build: Kept for 0.17's signature.
            verbose: Print progress if 1. Defaults to 1.
        """
        x = self._index_batch(np.asarray(x)[None])
        if verbose:
            print("[Indexing 1 example]")
        self._index.add(self._index_embeddings(x), label=y, data=data, build=build)

    # Looking up.

    def lookup(self, x: Any, k: int = 5, verbose: int = 1) -> list[list[Lookup]]:
        """Returns, per example of `x`, its `k` nearest indexed examples, nearest first.

        Args:
            x: A batch of examples.
            k: Neighbours per example. Defaults to 5.
            verbose: Unused; kept for 0.17's signature.

        Returns:
            Per example, `k` `Lookup`s by increasing distance.

        Raises:
            ValueError: If the index is empty, `k` is not in `[1, index_size()]`
                or `x` does not fit the model's input.
        """
        x = self._index_batch(x)
        self._check_lookup(k)
        return self._index.batch_lookup(self._index_embeddings(x), k=k, verbose=verbose)

    def single_lookup(self, x: Any, k: int = 5) -> list[Lookup]:
        """Returns the `k` nearest indexed examples of one example, nearest first.

        Args:
            x: One example (without batch axis).
            k: Neighbours. Defaults to 5.
        """
        x = self._index_batch(np.asarray(x)[None])
        self._check_lookup(k)
        return self._index.single_lookup(self._index_embeddings(x), k=k)

    # Evaluation, calibration and matching.

    def evaluate_retrieval(
        self,
        x: Any,
        y: Any,
        retrieval_metrics: Sequence[RetrievalMetric],
        verbose: int = 1,
    ) -> dict[str, Any]:
        """Computes retrieval metrics of the examples' neighbours in the index.

        Args:
            x: Query examples.
            y: Their classes.
            retrieval_metrics: `RetrievalMetric` instances, e.g.
                `[RecallAtK(k=1), PrecisionAtK(k=5)]`.
            verbose: Print the results if 1. Defaults to 1.

        Returns:
            Metric name (e.g. `"recall@1"`) to its value.

        Raises:
            ValueError: If the index is empty, a metric's `k` is larger than
                it, or `y` does not have one label per example.
        """
        x = self._index_batch(x)
        _check_length("y", y, len(x), required=True)
        self._check_lookup(max([getattr(m, "k", 1) for m in retrieval_metrics] or [1]))
        results = self._index.evaluate_retrieval(
            self._index_embeddings(x), y, retrieval_metrics, verbose=verbose
        )
        if verbose:
            print(format_table(list(results.items()), ["metric", "value"]))
        return results

    def calibrate(
        self,
        x: Any,
        y: Any,
        thresholds_targets: Mapping[str, float] | None = None,
        k: int = 1,
        calibration_metric: str | ClassificationMetric = "f1",
        matcher: str | ClassificationMatch = "match_nearest",
        extra_metrics: Sequence[str | ClassificationMetric] = ("precision", "recall"),
        rounding: int = 2,
        verbose: int = 1,
    ) -> CalibrationResults:
        """Chooses the distance thresholds `match` uses, from labelled examples.

        Args:
            x: Calibration examples (not indexed ones: their nearest
                neighbour would be themselves).
            y: Their classes.
            thresholds_targets: Cutpoint name to a target value of the
                calibration metric, e.g. `{"0.9": 0.9}`. Defaults to none:
                only the `"optimal"` cutpoint.
            k: Neighbours the matcher uses. Defaults to 1.
            calibration_metric: The metric (or its name) calibrated.
                Defaults to `"f1"`.
            matcher: `"match_nearest"`, `"match_majority_vote"` or a
                `ClassificationMatch`. Defaults to `"match_nearest"`.
            extra_metrics: Metrics also reported. Defaults to precision and
                recall.
            rounding: Decimals of the metric values. Defaults to 2.
            verbose: Print the cutpoints if 1. Defaults to 1.

        Returns:
            `CalibrationResults(cutpoints, thresholds)`, with an `"optimal"`
            cutpoint.

        Raises:
            ValueError: If the index is empty, `k` is larger than it, or `y`
                does not have one label per example.
        """
        x = self._index_batch(x)
        _check_length("y", y, len(x), required=True)
        self._check_lookup(k)
        return self._index.calibrate(
            self._index_embeddings(x),
            y,
            thresholds_targets=dict(thresholds_targets or {}),
            k=k,
            calibration_metric=calibration_metric,
            matcher=matcher,
            extra_metrics=extra_metrics,
            rounding=rounding,
            verbose=verbose,
        )

    def match(
        self,
        x: Any,
        cutpoint: str = "optimal",
        no_match_label: int = -1,
        k: int = 1,
        matcher: str | ClassificationMatch = "match_nearest",
        verbose: int = 0,
    ) -> list[int] | dict[str, list[int]]:
        """Matches each example to a class, or to `no_match_label` beyond the cutpoint.

        Args:
            x: Examples to match.
            cutpoint: The name of a calibrated cutpoint, or `"all"` for every
                one. Defaults to `"optimal"`.
            no_match_label: The label of an example whose match is farther
                than the cutpoint's distance. Defaults to -1.
            k: Neighbours the matcher uses. Defaults to 1.
            matcher: See `calibrate`.
            verbose: Unused; kept for 0.17's signature.

        Returns:
            The matched labels, or with `cutpoint="all"` a dict of cutpoint
            name to labels.

        Raises:
            ValueError: If the index is not calibrated or has no such
                cutpoint, or a lookup error (see `lookup`).
        """
        x = self._index_batch(x)
        index = self._index
        if not index.is_calibrated:
            raise ValueError(
                "The index is not calibrated: call model.calibrate(x, y) before match()."
            )
        if cutpoint != "all" and cutpoint not in index.cutpoints:
            raise ValueError(
                f"No cutpoint {cutpoint!r}; the calibration made {sorted(index.cutpoints)}. "
                "Pass one of them or 'all'."
            )
        self._check_lookup(k)
        matches = index.match(
            self._index_embeddings(x),
            no_match_label=no_match_label,
            k=k,
            matcher=matcher,
            verbose=verbose,
        )
        return matches if cutpoint == "all" else matches[cutpoint]

    def evaluate_classification(
        self,
        x: Any,
        y: Any,
        k: int = 1,
        extra_metrics: Sequence[str | ClassificationMetric] = ("precision", "recall"),
        matcher: str | ClassificationMatch = "match_nearest",
        verbose: int = 1,
    ) -> dict[str, dict[str, Any]]:
        """Computes classification metrics of the matches at each calibrated cutpoint.

        Args:
            x: Examples to match.
            y: Their classes.
            k: Neighbours the matcher uses. Defaults to 1.
            extra_metrics: Metrics computed besides the calibration metric.
            matcher: See `calibrate`.
            verbose: Print the results if 1. Defaults to 1.

        Returns:
            Cutpoint name to a dict of `"name"`, `"distance"` and each
            metric's value there.

        Raises:
            ValueError: If the index is not calibrated, or a lookup error.
        """
        x = self._index_batch(x)
        _check_length("y", y, len(x), required=True)
        index = self._index
        if not index.is_calibrated:
            raise ValueError(
                "The index is not calibrated: call model.calibrate(x, y) before "
                "evaluate_classification()."
            )
        self._check_lookup(k)
        embeddings = self._index_embeddings(x)
        calibrated = index.get_calibration_metric()
        results: dict[str, dict[str, Any]] = {}
        for name, cutpoint in index.cutpoints.items():
            threshold = float(cutpoint["distance"])
            metrics = [make_classification_metric(m) for m in extra_metrics]
            metrics.append(make_classification_metric(copy.copy(calibrated)))
            values = index.evaluate_classification(
                embeddings, y, [threshold], metrics=metrics, matcher=matcher, k=k, verbose=0
            )
            row: dict[str, Any] = {"name": name, "distance": threshold}
            row.update({m.name: float(np.asarray(values[m.name])[0]) for m in metrics})
            results[name] = row
        if verbose:
            headers = list(next(iter(results.values())))
            print(format_table([[r[h] for h in headers] for r in results.values()], headers))
        return results

    # Bookkeeping.

    def reset_index(self) -> None:
        """Empties the index (and forgets its calibration)."""
        self._index.reset()

    def index_size(self) -> int:
        """Returns the number of indexed examples."""
        return self._index.size()

    def index_summary(self) -> None:
        """Prints the index's configuration and statistics."""
        self._index.print_stats()

    def to_data_frame(self, num_items: int = 0) -> Any:
        """Returns the indexed records as a pandas `DataFrame` (needs pandas)."""
        return self._index.to_data_frame(num_items=num_items)

    def save_index(self, filepath: str | Path, compression: bool = True) -> None:
        """Writes the index to `index_path(filepath)` (beside a `.keras` file).

        Args:
            filepath: The model's file (`model.keras`) or a folder.
            compression: Compress the stored data. Defaults to `True`.
        """
        self._index.save(index_path(filepath), compression=compression)

    def load_index(self, filepath: str | Path) -> None:
        """Replaces the index by the one `save_index(filepath)` (or `save`) wrote.

        The saved index must have the model's embedding size and, if the
        model already has an index (from `compile` or `create_index`), its
        distance; on any error the model keeps its index.

        Args:
            filepath: What was given to `save_index` or `save`.

        Raises:
            FileNotFoundError: If nothing was saved there.
            ValueError: If the saved index has another distance or size, or
                is corrupt.
        """
        current = self._ix
        embedding_output = None if current is None else current.embedding_output
        self._ix = Indexer.load(
            index_path(filepath),
            verbose=0,
            distance=None if current is None else current.distance,
            embedding_size=self._index_embedding_size(embedding_output),
        )

    # Checks made before any prediction.

    def _index_batch(self, x: Any) -> Any:
        if isinstance(x, tf.data.Dataset):
            raise ValueError(
                "The index API takes arrays of examples, not a tf.data.Dataset: pass "
                "np.concatenate of its batches, or index it batch by batch."
            )
        if isinstance(x, (tf.Tensor, tf.Variable)):
            x = x.numpy()
        x = np.asarray(x)
        expected = self._index_input_shape()
        if expected is not None:
            shape = x.shape[1:]
            fits = len(shape) == len(expected) and all(
                e is None or e == s for e, s in zip(expected, shape, strict=True)
            )
            if x.ndim == 0 or not fits:
                raise ValueError(
                    f"Expected a batch of examples of shape {tuple(expected)}; got an array of "
                    f"shape {x.shape}. Pass x of shape (n, *{tuple(expected)}) (for one "
                    "example, index_single/single_lookup)."
                )
        return x

    def _check_lookup(self, k: int) -> None:
        size = self._index.size()
        if size == 0:
            raise ValueError(
                "The index is empty: call model.index(x, y) (or load_index) before looking "
                "up, evaluating, calibrating or matching."
            )
        k = check_int("k", k, minimum=1, owner=type(self).__name__)
        if k > size:
            raise ValueError(
                f"k={k} neighbours were asked for but the index holds {size} examples. Use "
                f"k <= {size}, or index more examples."
            )


def _check_length(name: str, values: Any, num: int, required: bool = False) -> None:
    if values is None:
        if required:
            raise ValueError(f"{name} is required: pass one label per example.")
        return
    length = len(values) if hasattr(values, "__len__") else None
    if length != num:
        raise ValueError(f"Got {length} items in {name} for {num} examples. Pass one per example.")


def canonical_distance(distance: Distance | str, loss: Any) -> Distance:
    """Returns `distance` as a `Distance`; `"auto"` takes the loss's (0.17's default).

    Raises:
        ValueError: For `"auto"` with a loss that has no `distance`.
    """
    if isinstance(distance, str) and distance == "auto":
        first = loss[0] if isinstance(loss, (list, tuple)) and loss else loss
        found = getattr(first, "distance", None)
        if found is None:
            raise ValueError(
                "distance='auto' takes the distance of the loss, but the loss "
                f"{first!r} has none. Pass distance='cosine' (or another name)."
            )
        return distance_canonicalizer(found)
    return distance_canonicalizer(distance)
