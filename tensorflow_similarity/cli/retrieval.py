"""How well a supervised run's embeddings retrieve: recall@1 and mAP@R, seen and unseen classes.

The index holds the training images of every class (the unseen classes'
too, so that their queries can find them); the queries are the held-out test
images, scored apart for the classes trained on ("seen") and the others
("unseen", which show how the embedding generalises). Optionally, the same
figures for augmented queries (the run's own augmentations of the test
images, keys ending `_augmented`): clean digits sit near their ceiling
before training, augmented ones show the invariance training learnt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np

from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.retrieval_metrics import MapAtR, RecallAtK

GROUPS = ("seen", "unseen")
FIGURES = ("recall_at_1", "map_at_r")


AUGMENTED = "_augmented"


def figure_name(figure: str, group: str, augmented: bool = False) -> str:
    """The log key of a figure for a group of classes, e.g. `recall_at_1_unseen`.

    With `augmented`, that of the augmented queries, e.g. `recall_at_1_unseen_augmented`.
    """
    return f"{figure}_{group}{AUGMENTED if augmented else ''}"


def build_index(
    embeddings: np.ndarray, labels: np.ndarray, data: Sequence[Any] | None = None
) -> Indexer:
    """Returns a cosine, exact-search `Indexer` of `embeddings` (the model's compile settings)."""
    index = Indexer(embedding_size=embeddings.shape[1], distance="cosine", search="linear")
    index.batch_add(embeddings, labels=labels, data=data, verbose=0)
    return index


def retrieval_figures(
    index: Indexer,
    index_labels: np.ndarray,
    queries: np.ndarray,
    query_labels: np.ndarray,
    seen_classes: Sequence[int],
) -> dict[str, float]:
    """Returns recall@1 and mAP@R of `queries` in `index`, for seen and unseen classes apart.

    mAP@R's `R` for a query is the number of indexed images of its class. A
    group without queries (no unseen class, or a tiny `--limit`) has no
    figures.

    Args:
        index: The index of the training images.
        index_labels: Their classes.
        queries: The `[n, dim]` embeddings of the test images.
        query_labels: Their classes.
        seen_classes: The classes trained on.

    Returns:
        `figure_name(figure, group)` to its value.
    """
    counts = {
        int(c): int(n) for c, n in zip(*np.unique(index_labels, return_counts=True), strict=True)
    }
    seen = np.isin(query_labels, list(seen_classes))
    figures = {}
    for group, mask in zip(GROUPS, (seen, ~seen), strict=True):
        if not mask.any():
            continue
        classes = set(np.unique(query_labels[mask]).tolist())
        metrics = [RecallAtK(k=1), MapAtR(r={c: n for c, n in counts.items() if c in classes})]
        results = index.evaluate_retrieval(
            queries[mask], query_labels[mask].tolist(), metrics, verbose=0
        )
        for figure, value in zip(FIGURES, results.values(), strict=True):
            figures[figure_name(figure, group)] = float(value)
    return figures


class RetrievalEvaluation(keras.callbacks.Callback):
    """Adds the retrieval figures of the model's current embeddings to each epoch's logs.

    Args:
        embed: Embeds a batch of images (`[n, dim]` NumPy array).
        index_images: The images to index (training images of all classes).
        index_labels: Their classes.
        query_images: The held-out images.
        query_labels: Their classes.
        seen_classes: The classes trained on.
        augmented_query_images: `None`, or augmented versions of `query_images`
            (the same labels), scored as well (keys ending `_augmented`).
    """

    def __init__(
        self,
        embed: Callable[[np.ndarray], np.ndarray],
        index_images: np.ndarray,
        index_labels: np.ndarray,
        query_images: np.ndarray,
        query_labels: np.ndarray,
        seen_classes: Sequence[int],
        augmented_query_images: np.ndarray | None = None,
    ) -> None:
        super().__init__()
        self.embed = embed
        self.index_images = index_images
        self.index_labels = np.asarray(index_labels)
        self.query_images = query_images
        self.query_labels = np.asarray(query_labels)
        self.seen_classes = list(seen_classes)
        self.augmented_query_images = augmented_query_images

    def evaluate(self) -> dict[str, float]:
        """Returns the figures of the model as it is now."""
        index = build_index(self.embed(self.index_images), self.index_labels)
        figures = {}
        for suffix, queries in (("", self.query_images), (AUGMENTED, self.augmented_query_images)):
            if queries is None:
                continue
            found = retrieval_figures(
                index, self.index_labels, self.embed(queries), self.query_labels, self.seen_classes
            )
            figures.update({key + suffix: value for key, value in found.items()})
        return figures

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if logs is not None:
            logs.update(self.evaluate())
