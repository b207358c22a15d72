"""A callback that indexes targets and scores queries against them after each epoch."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.classification_metrics import (
    ClassificationMetric,
    make_classification_metric,
)
from tensorflow_similarity.distances import Distance, distance_canonicalizer
from tensorflow_similarity.evaluators import MemoryEvaluator
from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.matchers import ClassificationMatch, make_classification_matcher
from tensorflow_similarity.retrieval_metrics import RetrievalMetric
from tensorflow_similarity.types import unpack_lookup_distances, unpack_lookup_labels

_SCALAR = tf.compat.v1.SummaryMetadata(
    plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="scalars")
)


class EvalCallback(keras.callbacks.Callback):
    """Logs matching and retrieval metrics of the model's embeddings after each epoch.

    At each epoch's end the callback embeds `targets` with the model, indexes
    them in an index of its own (the model's index is left alone), looks up
    the `k` nearest targets of each query and computes the classification
    `metrics` (at each of `distance_thresholds`; by default one infinite
    threshold, so every query matches its nearest target) and the
    `retrieval_metrics`. Each value goes into the epoch's `logs` under the
    metric's name, so that `History`, the progress bar and callbacks listed
    after this one (`TensorBoard`, `EarlyStopping`) see it; with
    `tb_logdir` the callback also writes them as TensorBoard scalars in
    `tb_logdir/index`. With `known_classes`, as 0.17, the queries are split
    into those of a class seen in training and the others, and every name
    gets the suffix `_known_classes` or `_unknown_classes`.

    Args:
        queries: Query examples.
        query_labels: Their classes.
        targets: Examples to index.
        target_labels: Their classes.
        distance: The index's `Distance` or its name. Defaults to
            `"cosine"`.
        metrics: `ClassificationMetric`s or names. Defaults to
            `("binary_accuracy",)`.
        tb_logdir: Folder for TensorBoard scalars, or `None`.
        k: Neighbours looked up per query (all the targets, with a warning,
            when there are fewer, as in 0.17). Defaults to 1.
        matcher: `"match_nearest"`, `"match_majority_vote"` or a
            `ClassificationMatch`. Defaults to `"match_nearest"`.
        distance_thresholds: Distances at which the classification metrics
            are computed (one value each is logged: with several, the
            value at the smallest). Defaults to `[inf]`.
        known_classes: The classes seen in training, or `None` (no split).
        retrieval_metrics: `RetrievalMetric`s, e.g. `[RecallAtK(k=1)]`, or
            `None`.

    Raises:
        ValueError: If the labels do not match the examples, a retrieval
            metric's `k` is larger than the number of targets, a split leaves
            no query on a side, or a metric or matcher is unknown.

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from tensorflow_similarity.callbacks import EvalCallback
    >>> from tensorflow_similarity.retrieval_metrics import RecallAtK
    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.normal(size=(32, 4)), np.arange(32) % 4
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8)])
    >>> model.compile("adam", "mse")
    >>> callback = EvalCallback(x[:8], y[:8], x[8:], y[8:],
    ...                         retrieval_metrics=[RecallAtK(k=1)])
    >>> history = model.fit(x, rng.normal(size=(32, 8)), epochs=2, verbose=0,
    ...                     callbacks=[callback])
    >>> sorted(history.history)
    ['binary_accuracy', 'loss', 'recall@1']
    >>> len(history.history["recall@1"])
    2
    """

    def __init__(
        self,
        queries: Any,
        query_labels: Sequence[int],
        targets: Any,
        target_labels: Sequence[int],
        distance: Distance | str = "cosine",
        metrics: Sequence[str | ClassificationMetric] = ("binary_accuracy",),
        tb_logdir: str | None = None,
        k: int = 1,
        matcher: str | ClassificationMatch = "match_nearest",
        distance_thresholds: Sequence[float] | None = None,
        known_classes: Sequence[int] | None = None,
        retrieval_metrics: Sequence[RetrievalMetric] | None = None,
    ) -> None:
        super().__init__()
        owner = "EvalCallback"
        queries, targets = np.asarray(queries), np.asarray(targets)
        query_labels = _labels("query_labels", query_labels, len(queries))
        self.target_labels = _labels("target_labels", target_labels, len(targets))
        self.targets = targets
        self.distance = distance_canonicalizer(distance)
        # A k above the number of targets is 0.17's: the matcher sees them all (with a warning).
        self.k = check_int("k", k, minimum=1, owner=owner)
        self.classification_metrics = [make_classification_metric(m) for m in metrics]
        self.retrieval_metrics = list(retrieval_metrics or [])
        for metric in self.retrieval_metrics:
            if not isinstance(metric, RetrievalMetric):
                raise ValueError(f"EvalCallback: {metric!r} is not a RetrievalMetric instance.")
            if metric.k > len(targets):
                raise ValueError(
                    f"EvalCallback: {metric.name} needs {metric.k} neighbours but there are "
                    f"{len(targets)} targets."
                )
        self.matcher = make_classification_matcher(matcher)
        thresholds = [math.inf] if distance_thresholds is None else distance_thresholds
        self.distance_thresholds = np.sort(np.asarray(thresholds, np.float32).reshape(-1))
        self.evaluator = MemoryEvaluator()
        if known_classes is None:
            self.splits = [("", queries, query_labels)]
        else:
            known = np.isin(query_labels, np.asarray(known_classes).reshape(-1))
            self.splits = [
                ("_known_classes", queries[known], query_labels[known]),
                ("_unknown_classes", queries[~known], query_labels[~known]),
            ]
            for suffix, _, labels in self.splits:
                if len(labels) == 0:
                    raise ValueError(
                        f"EvalCallback: known_classes leaves no query{suffix.replace('_', ' ')}. "
                        "Pass queries of both seen and unseen classes, or known_classes=None."
                    )
        self.tb_writer = None
        if tb_logdir:
            self.tb_writer = tf.summary.create_file_writer(str(Path(tb_logdir) / "index"))

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        logs = {} if logs is None else logs
        results = self.evaluate()
        logs.update(results)
        if self.tb_writer is not None:
            with self.tb_writer.as_default():
                for name, value in results.items():
                    # What tf.summary.scalar writes, without needing TensorBoard installed.
                    tf.summary.write(
                        name, tf.constant(value, tf.float32), step=epoch, metadata=_SCALAR
                    )
            self.tb_writer.flush()

    def evaluate(self) -> dict[str, float]:
        """Returns the metrics of the model as it is now (what `on_epoch_end` logs)."""
        targets = _embed(self.model, self.targets)
        index = Indexer(embedding_size=targets.shape[-1], distance=self.distance)
        index.batch_add(targets, labels=self.target_labels, verbose=0)
        results: dict[str, float] = {}
        for suffix, queries, labels in self.splits:
            k = max([self.k, *[m.k for m in self.retrieval_metrics]])
            lookups = index.batch_lookup(_embed(self.model, queries), k=k, verbose=0)
            if self.classification_metrics:
                values = self.evaluator.evaluate_classification(
                    query_labels=labels,
                    lookup_labels=unpack_lookup_labels(lookups)[:, : self.k],
                    lookup_distances=unpack_lookup_distances(lookups)[:, : self.k],
                    distance_thresholds=self.distance_thresholds,
                    metrics=self.classification_metrics,
                    matcher=self.matcher,
                    verbose=0,
                )
                for metric in self.classification_metrics:
                    results[metric.name + suffix] = float(np.asarray(values[metric.name])[0])
            if self.retrieval_metrics:
                values = self.evaluator.evaluate_retrieval(
                    target_labels=labels, lookups=lookups, retrieval_metrics=self.retrieval_metrics
                )
                for name, value in values.items():
                    results[name + suffix] = float(np.asarray(value).reshape(-1)[0])
        return results


def _embed(model: keras.Model, x: np.ndarray) -> np.ndarray:
    # A model with an index (the models' `IndexMixin`, which sits above the callbacks)
    # embeds what it indexes: its embedding output, or a ContrastiveModel's backbone.
    if not hasattr(model, "_index_embeddings"):
        return np.asarray(model.predict(x, verbose=0))
    embeddings = model._index_embeddings(x)
    if isinstance(embeddings, (list, tuple)):
        embeddings = embeddings[model._index.embedding_output or 0]
    return np.asarray(embeddings)


def _labels(name: str, labels: Any, num: int) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.shape != (num,):
        raise ValueError(
            f"EvalCallback: {name} has shape {labels.shape} for {num} examples. Pass one "
            "integer label per example."
        )
    return labels.astype(np.int64)
