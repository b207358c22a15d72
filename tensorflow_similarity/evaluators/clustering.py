"""NMI and AMI: how well a k-means clustering of the embeddings recovers the classes."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import numpy as np

from tensorflow_similarity._validation import check_int

# k-means restarts: fixed, so that a seed gives one clustering on every version of scikit-learn
# (whose default n_init changed from 10 to "auto").
KMEANS_RESTARTS = 10


def import_sklearn(module: str, owner: str = "clustering_metrics") -> ModuleType:
    """Returns a scikit-learn module, or raises an ImportError naming the install.

    scikit-learn is an optional dependency: the package imports without it.
    """
    try:
        return importlib.import_module(f"sklearn.{module}")
    except ImportError as err:
        raise ImportError(
            f"{owner} needs scikit-learn, which is not installed. Install it with: "
            "pip install 'tensorflow-similarity[cli]' (or pip install scikit-learn)."
        ) from err


def cluster_embeddings(embeddings: Any, num_clusters: int, seed: int = 0) -> np.ndarray:
    """Returns the k-means cluster of each embedding (scikit-learn's `KMeans`, seeded).

    Args:
        embeddings: `[n, d]` finite embeddings.
        num_clusters: Number of clusters `k`, at most `n`.
        seed: The `random_state` of `KMeans`. Defaults to 0.

    Returns:
        The `[n]` cluster ids.
    """
    num_clusters = check_int("num_clusters", num_clusters, minimum=1, owner="cluster_embeddings")
    seed = check_int("seed", seed, minimum=0, owner="cluster_embeddings")
    cluster = import_sklearn("cluster", "cluster_embeddings")
    kmeans = cluster.KMeans(n_clusters=num_clusters, n_init=KMEANS_RESTARTS, random_state=seed)
    return kmeans.fit_predict(np.asarray(embeddings, dtype=np.float64))


def check_clustering_labels(
    labels: Any, seed: int = 0, owner: str = "clustering_metrics"
) -> tuple[np.ndarray, int]:
    """Checks the labels and seed of a clustering evaluation, before any work.

    Args:
        labels: `[n]` or `[n, 1]` integer class labels.
        seed: The k-means seed.
        owner: The function the user called, for the messages.

    Returns:
        `(labels, num_classes)`: the `[n]` labels and their number of
        distinct classes.

    Raises:
        ValueError: On labels that are not `[n]` integers, fewer than two
            classes, or a seed that is not a non-negative integer.
    """
    check_int("seed", seed, minimum=0, owner=owner)
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"{owner} expects [n] integer class labels; received shape {labels.shape} of "
            f"dtype {labels.dtype}. Pass one integer class id per example."
        )
    num_classes = len(np.unique(labels))
    if num_classes < 2:
        raise ValueError(
            f"{owner} needs at least two classes to cluster; the labels hold {num_classes}. "
            "Evaluate on examples of several classes."
        )
    return labels, num_classes


def clustering_metrics(embeddings: Any, labels: Any, seed: int = 0) -> dict[str, float]:
    """Returns the NMI and AMI of a k-means clustering of the embeddings against the labels.

    The embeddings are clustered by scikit-learn's `KMeans` into as many
    clusters as there are distinct labels (`n_init=10` restarts,
    `random_state=seed`, so one seed gives one clustering), and the clusters
    are compared with the labels by scikit-learn's
    `normalized_mutual_info_score` and `adjusted_mutual_info_score`
    (arithmetic normalisation, their default), the two clustering metrics of
    the metric-learning literature (Musgrave, Belongie & Lim, "A Metric
    Learning Reality Check", ECCV 2020). NMI is 1 for a clustering that is
    the classes; AMI corrects NMI for chance, so a random clustering scores
    about 0. Embeddings are clustered as given: normalise them first to
    cluster by cosine.

    Args:
        embeddings: `[n, d]` finite embeddings.
        labels: `[n]` (or `[n, 1]`) integer class labels, at least two
            classes.
        seed: The k-means seed. Defaults to 0.

    Returns:
        `{"nmi": ..., "ami": ...}`, as Python floats.

    Raises:
        ValueError: On embeddings that are not `[n, d]` or not finite, labels
            that are not one integer per embedding, fewer than two classes,
            or a seed that is not a non-negative integer; before clustering.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.evaluators import clustering_metrics
    >>> embeddings = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.0, 5.1]])
    >>> clustering_metrics(embeddings, np.array([0, 0, 1, 1]))
    {'nmi': 1.0, 'ami': 1.0}
    """
    labels, num_classes = check_clustering_labels(labels, seed)
    embeddings = np.asarray(embeddings)
    if embeddings.ndim != 2 or not np.issubdtype(embeddings.dtype, np.number):
        raise ValueError(
            "clustering_metrics expects [n, d] numeric embeddings; received shape "
            f"{embeddings.shape} of dtype {embeddings.dtype}. Flatten or pool them first."
        )
    if len(labels) != len(embeddings):
        raise ValueError(
            f"clustering_metrics expects one label per embedding; received {len(labels)} "
            f"labels for {len(embeddings)} embeddings."
        )
    if not np.all(np.isfinite(embeddings)):
        bad = np.flatnonzero(~np.all(np.isfinite(embeddings), axis=1))
        raise ValueError(
            f"clustering_metrics received {bad.size} embedding(s) with NaN or infinite values "
            f"(rows {bad[:10].tolist()}); k-means needs finite embeddings."
        )
    metrics = import_sklearn("metrics")
    clusters = cluster_embeddings(embeddings, num_classes, seed)
    return {
        "nmi": float(metrics.normalized_mutual_info_score(labels, clusters)),
        "ami": float(metrics.adjusted_mutual_info_score(labels, clusters)),
    }
