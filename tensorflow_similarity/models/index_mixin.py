"""The index API a model gains by mixing in `IndexMixin`: index, look up, calibrate, match."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np

from tensorflow_similarity import _atomic
from tensorflow_similarity.classification_metrics import (
    ClassificationMetric,
    make_classification_metric,
)
from tensorflow_similarity.distances import Distance
from tensorflow_similarity.evaluators import Evaluator
from tensorflow_similarity.indexer import persistence
from tensorflow_similarity.indexer.text_table import format_table
from tensorflow_similarity.matchers import ClassificationMatch
from tensorflow_similarity.models.index_lookup_mixin import (
    IndexLookupMixin,
    canonical_distance,
    check_length,
    index_path,
    recover_pair,
)
from tensorflow_similarity.retrieval_metrics import RetrievalMetric
from tensorflow_similarity.search import Search
from tensorflow_similarity.stores import Store
from tensorflow_similarity.types import CalibrationResults

__all__ = ["IndexMixin", "canonical_distance", "index_path"]


class IndexMixin(IndexLookupMixin):
    """0.17's index API for a Keras model whose predictions are embeddings.

    The model embeds (with `predict`, so under the strategy the model was
    built in, on all its replicas) and its `Indexer` searches on the host.
    Arguments are checked before anything is predicted or changed: a bad
    call leaves the index as it was. A model gets its index from `compile`
    or `create_index`; one used before either gets the default index
    (cosine distance, exact linear search, memory store).

    Indexing, lookups, the index's bookkeeping and persistence come from
    `IndexLookupMixin`; this class adds what uses the neighbours' labels:
    `evaluate_retrieval`, `calibrate`, `match`, `evaluate_classification`,
    and `save`, which writes the model and, beside it, its index. The
    model's `compile` calls `_compile_index`, and its compile config holds
    the index settings, so `keras.saving.load_model` recreates the index.

    A class mixing this in provides `_index_embeddings(x)` (the embeddings
    of a batch, as the indexer takes them), `_index_embedding_size(output)`
    and `_index_input_shape()`.

    Attributes:
        index_batch_size: The batch size of the predictions the index API
            makes (Keras' default of 32 makes many small distributed steps).
            Defaults to 256.
    """

    # Compiling with an index.

    def _compile_index(
        self,
        can_index: bool,
        distance: Distance | str,
        search: Search | str,
        kv_store: Store | str,
        evaluator: Evaluator | str,
        stat_buffer_size: int,
        **settings: Any,
    ) -> None:
        """What `compile` does for the index: `create_index` if `can_index`, settings recorded.

        `can_index` is whether the embedding output is `[batch, dim]`; a
        model whose output is not (or not known yet) still compiles and
        trains, and its index API says why it cannot index, or makes the
        recorded index once it can. `settings` are other `create_index`
        arguments (`embedding_output`); an `evaluator` instance is recorded
        as `"memory"`.
        """
        given = {"search": search, "kv_store": kv_store, "evaluator": evaluator}
        if can_index:
            self.create_index(
                distance=distance, **given, stat_buffer_size=stat_buffer_size, **settings
            )
        else:
            self._ix = None
        self._index_settings = {
            "distance": self._ix.distance if self._ix is not None else distance,
            **given,
            "evaluator": evaluator if isinstance(evaluator, str) else "memory",
            **settings,
            "stat_buffer_size": stat_buffer_size,
        }

    def get_compile_config(self) -> dict[str, Any] | None:
        """Keras' compile config plus the index settings, so loading recreates the index."""
        config = super().get_compile_config()
        if config is not None and self._index_settings is not None:
            config = dict(config)
            config["index"] = {
                key: value
                if isinstance(value, (str, int, type(None)))
                else keras.saving.serialize_keras_object(value)
                for key, value in self._index_settings.items()
            }
        return config

    def compile_from_config(self, config: dict[str, Any]) -> None:
        """Compiles from `get_compile_config()`'s output, as `keras.saving.load_model` does."""
        config = keras.saving.deserialize_keras_object(config)
        index_settings = config.pop("index", None) or {}
        self.compile(**config, **index_settings)
        if self.built:
            # As Keras does: the optimizer's variables exist before the weights are loaded.
            self.optimizer.build(self.trainable_variables)

    # Saving the model with its index.

    def save(
        self,
        filepath: str | Path,
        save_index: bool = True,
        compression: bool = True,
        overwrite: bool = True,
        include_optimizer: bool = True,
        save_format: str | None = None,
        signatures: Any = None,
        options: Any = None,
        save_traces: bool = True,
        **kwargs: Any,
    ) -> None:
        """`keras.Model.save`, and the index beside the file (see `index_path`), all or nothing.

        The model file and the index are written to hidden siblings
        (`.model.partial.keras`, `.model.index.partial/`), flushed to disk,
        and switched in by renames, the index first: after a kill or a full
        disk at any moment the model file and its index are the old pair or
        the new one, and `load_index` reads the pair. The index records the
        identity of the model (the SHA-256 of the file and of the weights),
        so an index is refused for another model or file.

        The arguments are 0.17's, in its order. Keras 3 writes `.keras` files
        (configs and weights, optimizer state included); the SavedModel-only
        arguments of 0.17 are accepted at their defaults, and `model.export`
        writes a SavedModel.

        Args:
            filepath: A `.keras` file.
            save_index: Also save the index, if the model has one (from
                `compile` or `create_index`). Defaults to `True`.
            compression: Compress the index's data. Defaults to `True`.
            overwrite: As for `keras.Model.save`. Defaults to `True`.
            include_optimizer: As for `keras.Model.save` (Keras 3 reads it
                for `.h5` files; a `.keras` file always holds the optimizer).
                Defaults to `True`.
            save_format: As for `keras.Model.save` (deprecated in Keras 3).
                Defaults to `None`.
            signatures: SavedModel only: must be `None` (see `model.export`).
            options: SavedModel only: must be `None` (see `model.export`).
            save_traces: Accepted for 0.17's signature: a `.keras` file holds
                configs, never traced functions. Defaults to `True`.
            **kwargs: Other `keras.Model.save` arguments (`zipped`).

        Raises:
            ValueError: If `signatures` or `options` is given (before anything
                is written), or what `keras.Model.save` raises.
            OSError: If a file cannot be written (a full disk, say): it names
                the file (and the space left), and the previous save is kept.
        """
        del save_traces
        for name, value in (("signatures", signatures), ("options", options)):
            if value is not None:
                raise ValueError(
                    f"{type(self).__name__}.save: {name}= configures a TensorFlow SavedModel, "
                    "which Keras 3's save does not write. Save a .keras file without it, "
                    "or write a SavedModel with model.export(path)."
                )
        if save_format is not None:
            kwargs["save_format"] = save_format
        model_file = Path(filepath)
        with_index = save_index and self._ix is not None
        if (
            model_file.suffix not in (".keras", ".h5")
            or not kwargs.get("zipped", True)
            or (not overwrite and model_file.exists())
        ):
            # Keras' own checks and prompts (an unzipped folder, "overwrite?") apply.
            super().save(
                filepath, overwrite=overwrite, include_optimizer=include_optimizer, **kwargs
            )
            if with_index:
                self.save_index(filepath, compression=compression)
            return
        folder = index_path(model_file)
        recover_pair(model_file, folder)
        staged_model = _atomic.staging_path(model_file)
        what = f"{type(self).__name__}.save"
        try:
            super().save(
                staged_model, overwrite=True, include_optimizer=include_optimizer, **kwargs
            )
            _atomic.fsync_file(staged_model)
            if not with_index:
                _atomic.replace_file(staged_model, model_file)
                return
            identity = {
                "sha256": _atomic.sha256_file(staged_model),
                "weights_sha256": self._weights_sha256(),
            }
            staged_index = persistence.stage_index(
                self._index, folder, compression=compression, model=identity
            )
        except BaseException as error:
            staged_model.unlink(missing_ok=True)
            if isinstance(error, OSError):
                raise persistence.save_failed(error, what, model_file) from error
            raise
        # The index first, then the model file: until the model file is switched its old
        # index stays as the folder's backup, which load_index reads for the old file.
        try:
            old_index = _atomic.switch_dir(staged_index, folder)
        except OSError as error:
            _atomic.discard_dir(staged_index)
            staged_model.unlink(missing_ok=True)
            _atomic.recover_dir(folder)
            raise persistence.save_failed(error, what, folder) from error
        try:
            _atomic.replace_file(staged_model, model_file)
        except OSError as error:
            _atomic.discard_dir(folder)
            staged_model.unlink(missing_ok=True)
            _atomic.recover_dir(folder)
            raise persistence.save_failed(error, what, model_file) from error
        _atomic.discard_dir(old_index)

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
            ValueError: If the index is empty, holds fewer examples than a
                metric's `k`, or `y` does not have one label per example.
        """
        x = self._index_batch(x)
        check_length("y", y, len(x), required=True)
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
            ValueError: If the index is empty, `k` is below 1, or `y` does
                not have one label per example (a `k` above the index size
                uses the whole index, with a warning).
        """
        x = self._index_batch(x)
        check_length("y", y, len(x), required=True)
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
        check_length("y", y, len(x), required=True)
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
