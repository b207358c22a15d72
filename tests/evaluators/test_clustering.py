"""NMI and AMI of a seeded k-means clustering, against scikit-learn and a plain-loop NMI."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_mutual_info_score, normalized_mutual_info_score

from tensorflow_similarity.evaluators import clustering, clustering_metrics
from tensorflow_similarity.models import SimilarityModel


def _blobs(seed=0, classes=4, per_class=6, spread=0.8):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(classes, 3))
    labels = np.repeat(np.arange(classes), per_class)
    return centres[labels] + spread * rng.normal(size=(len(labels), 3)), labels


def _nmi_loop(labels, clusters):
    """Mutual information over the arithmetic mean of the entropies, one count at a time."""
    n = len(labels)
    classes, groups = sorted(set(labels)), sorted(set(clusters))

    def entropy(values, keys):
        return -sum((c / n) * math.log(c / n) for c in (list(values).count(k) for k in keys) if c)

    mutual = 0.0
    for a in classes:
        for b in groups:
            joint = sum(1 for i in range(n) if labels[i] == a and clusters[i] == b)
            if joint:
                pa, pb = list(labels).count(a) / n, list(clusters).count(b) / n
                mutual += (joint / n) * math.log((joint / n) / (pa * pb))
    return mutual / ((entropy(labels, classes) + entropy(clusters, groups)) / 2)


@pytest.mark.parametrize("seed", [0, 3])
def test_equal_to_scikit_learn_on_the_same_seeded_clustering(seed):
    # Overlapping blobs: k-means does not recover the classes, so NMI and AMI are not 1.
    x, y = _blobs(seed=1, spread=2.5)
    clusters = KMeans(n_clusters=4, n_init=10, random_state=seed).fit_predict(x)

    got = clustering_metrics(x, y, seed=seed)

    assert got == {
        "nmi": pytest.approx(normalized_mutual_info_score(y, clusters), abs=1e-12),
        "ami": pytest.approx(adjusted_mutual_info_score(y, clusters), abs=1e-12),
    }
    assert 0.05 < got["ami"] < got["nmi"] < 0.99
    assert clustering_metrics(x, y, seed=seed) == got, "one seed, one clustering"


def test_nmi_and_ami_of_fixed_clusterings(monkeypatch):
    x, y = _blobs()
    fixed = np.array([0, 0, 1, 1, 2, 2] * 4)
    calls = []

    def fixed_clustering(embeddings, num_clusters, seed=0):
        calls.append(num_clusters)
        return fixed

    monkeypatch.setattr(clustering, "cluster_embeddings", fixed_clustering)
    got = clustering_metrics(x, y)

    assert calls == [4], "k-means asked for as many clusters as classes"
    np.testing.assert_allclose(got["nmi"], _nmi_loop(y, fixed), rtol=1e-12)
    np.testing.assert_allclose(got["ami"], adjusted_mutual_info_score(y, fixed), rtol=1e-12)
    monkeypatch.setattr(clustering, "cluster_embeddings", lambda e, k, seed=0: y[::-1].copy())
    assert clustering_metrics(x, y) == {"nmi": pytest.approx(1.0), "ami": pytest.approx(1.0)}


@pytest.mark.parametrize(
    ("embeddings", "labels", "message"),
    [
        (np.zeros((4, 2)), np.zeros(4, int), "at least two classes to cluster; the labels hold 1"),
        (np.zeros((4, 2)), np.array([0.0, 1.0, 0.0, 1.0]), "integer class labels"),
        (np.zeros((4, 2)), np.array([0, 1, 0]), "3 labels for 4 embeddings"),
        (np.full((4, 2), np.nan), np.array([0, 1, 0, 1]), "4 embedding\\(s\\) with NaN"),
        (np.zeros(4), np.array([0, 1, 0, 1]), "\\[n, d\\] numeric embeddings"),
    ],
)
def test_bad_input_is_refused_before_clustering(monkeypatch, embeddings, labels, message):
    monkeypatch.setattr(clustering, "cluster_embeddings", pytest.fail)
    with pytest.raises(ValueError, match=message):
        clustering_metrics(embeddings, labels)
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        clustering_metrics(np.zeros((4, 2)), np.array([0, 1, 0, 1]), seed=-1)


def test_similarity_model_clusters_its_embeddings(monkeypatch):
    x, y = _blobs(seed=2, spread=2.0)
    inputs = keras.Input((3,))
    model = SimilarityModel(inputs, keras.layers.Dense(2, name="embedding")(inputs))
    model.compile("sgd", loss="mse")

    got = model.evaluate_clustering(x, y, seed=1, batch_size=5)

    assert got == clustering_metrics(model.predict(x, verbose=0), y, seed=1)
    monkeypatch.setattr(model, "predict", pytest.fail)
    with pytest.raises(ValueError, match="evaluate_clustering needs at least two classes"):
        model.evaluate_clustering(x, np.zeros(len(x), int))
