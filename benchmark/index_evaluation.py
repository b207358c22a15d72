"""Benchmark of the index's evaluation path against the same metrics computed directly.

On `--size` clustered `--dim`-d embeddings of `--classes` classes (random
Gaussian centres, each embedding a centre plus unit Gaussian noise, cosine
distance), indexed once:

1. `Indexer.evaluate_retrieval` of the indexed embeddings themselves with
   `recall@1`, `precision@10`, `r_precision` and `map@r` (each dropping the
   closest lookup, the query itself, as pytorch-metric-learning's
   `AccuracyCalculator` does), against the direct computation: one
   `search.batch_lookup` of the same `k`, the neighbour labels taken from
   the labels array by id, and each metric's `compute` on that matrix.
2. `Indexer.calibrate` (k=1, `match_nearest`, F1) of as many held-out
   embeddings drawn alike, against one `search.batch_lookup` and
   `MemoryEvaluator.evaluate_classification` at every distinct distance.
3. The same two verbs of a `SimilarityModel` (an identity network) holding
   that index, against `model.predict` and the direct computations.

Target: each verb within 1.5x of its direct computation, with the same values
(the largest absolute difference is reported; 0 is bit-identical). Times
are medians of `--repeats` calls after one warm-up, each pair timed in
alternation (which goes first swaps every repeat) so that load from other
processes hits both alike. Results go to `<out>/index_evaluation.json` and
`<out>/index_evaluation.md`.

Usage (from the repository root):

    python -m benchmark.index_evaluation           # full run, about 2 minutes on 2 cores
    python -m benchmark.index_evaluation --quick   # smoke run (1,000 embeddings), temporary folder
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmark.common import (  # noqa: E402
    machine_record,
    markdown_table,
    output_folder,
    paired_medians,
)
from tensorflow_similarity.classification_metrics import F1Score  # noqa: E402
from tensorflow_similarity.evaluators import MemoryEvaluator  # noqa: E402
from tensorflow_similarity.indexer import Indexer  # noqa: E402
from tensorflow_similarity.models import SimilarityModel  # noqa: E402
from tensorflow_similarity.retrieval_metrics import (  # noqa: E402
    MapAtR,
    PrecisionAtK,
    RecallAtK,
    RetrievalMetric,
    RPrecision,
)

TARGET_RATIO = 1.5
# The decimals `MemoryEvaluator` rounds distances and calibration metrics to.
DISTANCE_ROUNDING = 8
METRIC_ROUNDING = 6


def make_data(
    size: int, dim: int, classes: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`size` indexed and `size` held-out float32 embeddings of `classes` classes, with labels."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim)) * 0.5
    labels = rng.integers(0, classes, size=(2, size))
    embeddings = (centres[labels] + rng.normal(size=(2, size, dim))).astype(np.float32)
    return embeddings[0], labels[0], embeddings[1], labels[1]


def make_metrics(labels: np.ndarray) -> list[RetrievalMetric]:
    """pytorch-metric-learning's defaults on a set queried against itself."""
    r = {int(c): int(n) for c, n in zip(*np.unique(labels, return_counts=True), strict=True)}
    return [
        RecallAtK(k=1, drop_closest_lookup=True),
        PrecisionAtK(k=10, drop_closest_lookup=True),
        RPrecision(r=r, drop_closest_lookup=True),
        MapAtR(r=r, drop_closest_lookup=True),
    ]


def _search(index: Indexer, embeddings: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    idxs, distances = index.search.batch_lookup(embeddings, k=k)
    distances = np.round(np.asarray(distances, np.float64), DISTANCE_ROUNDING)
    return np.asarray(idxs), distances.astype(np.float32)


def direct_retrieval(
    index: Indexer,
    index_labels: np.ndarray,
    embeddings: np.ndarray,
    labels: np.ndarray,
    metrics: list[RetrievalMetric],
) -> dict[str, float]:
    """The retrieval metrics from one batched search and the label matrix, no `Indexer` verb."""
    k = min(max(metric.k for metric in metrics) + 1, len(index_labels))
    idxs, distances = _search(index, embeddings, k)
    lookup_labels = index_labels[idxs]
    match_mask = lookup_labels == labels[:, np.newaxis]
    return {
        metric.name: metric.compute(
            query_labels=labels,
            lookup_labels=lookup_labels,
            lookup_distances=distances,
            match_mask=match_mask,
        )
        for metric in metrics
    }


def direct_calibration(
    index: Indexer, index_labels: np.ndarray, embeddings: np.ndarray, labels: np.ndarray
) -> dict[str, np.ndarray]:
    """F1 of the nearest neighbour at every distinct distance: one search, one evaluation."""
    idxs, distances = _search(index, embeddings, 1)
    curve = MemoryEvaluator().evaluate_classification(
        labels, index_labels[idxs], distances, np.unique(distances), [F1Score()], "match_nearest"
    )
    curve["f1"] = np.round(curve["f1"], METRIC_ROUNDING)
    return curve


def _calibrate(verb: Callable, embeddings: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    results = verb(
        embeddings,
        labels,
        thresholds_targets={"0.9": 0.9},
        calibration_metric="f1",
        extra_metrics=(),
        rounding=METRIC_ROUNDING,
        verbose=0,
    )
    return {"distance": results.thresholds["distance"], "f1": results.thresholds["f1"]}


def max_difference(got: dict[str, Any], want: dict[str, Any]) -> float:
    """The largest absolute difference between two results' values (`inf` if keys differ)."""
    if set(got) != set(want):
        return float("inf")
    return max(
        float(np.max(np.abs(np.asarray(got[key], np.float64) - np.asarray(want[key], np.float64))))
        if np.size(got[key]) == np.size(want[key])
        else float("inf")
        for key in want
    )


def identity_model(dim: int) -> SimilarityModel:
    """A `SimilarityModel` whose embeddings are its inputs: only the index verbs cost."""
    inputs = keras.Input((dim,))
    return SimilarityModel(inputs, keras.layers.Identity()(inputs))


def measure(size: int, dim: int, classes: int, repeats: int, seed: int) -> list[dict[str, Any]]:
    """One row per verb and owner: both times, their ratio and the values' largest difference."""
    x, y, x_cal, y_cal = make_data(size, dim, classes, seed)
    metrics = make_metrics(y)
    index = Indexer(embedding_size=dim, distance="cosine")
    index.batch_add(x, y, verbose=0)
    model = identity_model(dim)
    model.index(x, y, verbose=0)

    def predict(inputs: np.ndarray) -> np.ndarray:
        return model.predict(inputs, verbose=0)

    cases = {
        ("Indexer", "evaluate_retrieval"): (
            lambda: index.evaluate_retrieval(x, y, metrics, verbose=0),
            lambda: direct_retrieval(index, y, x, y, metrics),
        ),
        ("Indexer", "calibrate"): (
            lambda: _calibrate(index.calibrate, x_cal, y_cal),
            lambda: direct_calibration(index, y, x_cal, y_cal),
        ),
        ("SimilarityModel", "evaluate_retrieval"): (
            lambda: model.evaluate_retrieval(x, y, metrics, verbose=0),
            lambda: direct_retrieval(model._index, y, predict(x), y, metrics),
        ),
        ("SimilarityModel", "calibrate"): (
            lambda: _calibrate(model.calibrate, x_cal, y_cal),
            lambda: direct_calibration(model._index, y, predict(x_cal), y_cal),
        ),
    }
    rows = []
    for (owner, verb), (ours, direct) in cases.items():
        difference = max_difference(ours(), direct())
        ours_s, direct_s = paired_medians(ours, direct, repeats)
        rows.append(
            {
                "owner": owner,
                "verb": verb,
                "size": size,
                "seconds": ours_s,
                "direct_seconds": direct_s,
                "ratio": ours_s / direct_s,
                "max_difference": difference,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """One line per row: within the target ratio, and with the same values, or not."""
    lines = []
    for row in rows:
        met = row["ratio"] <= TARGET_RATIO and row["max_difference"] == 0.0
        lines.append(
            f"- {row['owner']}.{row['verb']}: {row['ratio']:.2f}x the direct computation "
            f"(target <= {TARGET_RATIO}x), largest value difference {row['max_difference']:.3g}: "
            f"{'met' if met else 'NOT met'}."
        )
    return lines


def render_markdown(payload: dict[str, Any]) -> str:
    """The results as markdown: the verdicts, then the table of times."""
    rows = payload["rows"]
    lines = [
        "# Index evaluation path",
        "",
        f"{payload['date']}, {payload['machine']}, load average {payload['load_average']:.2f}, "
        f"TensorFlow {payload['tensorflow']}. {payload['size']:,} indexed {payload['dim']}-d "
        f"embeddings of {payload['classes']} classes (cosine); evaluate_retrieval queries the "
        "indexed embeddings (recall@1, precision@10, r_precision, map@r, dropping the query "
        f"itself), calibrate {payload['size']:,} held-out ones (k=1, F1). Medians of "
        f"{payload['repeats']} calls, each pair timed alternating which goes first; the direct "
        "computation is one batched search and the metrics on the label matrix.",
        "",
        "## Targets",
        "",
        *verdicts(rows),
        "",
        "## Times",
        "",
        markdown_table(
            ["owner", "verb", "ours (s)", "direct (s)", "ratio", "largest value difference"],
            [
                [
                    row["owner"],
                    row["verb"],
                    f"{row['seconds']:.3f}",
                    f"{row['direct_seconds']:.3f}",
                    f"{row['ratio']:.2f}",
                    f"{row['max_difference']:.3g}",
                ]
                for row in rows
            ],
        ),
        "",
    ]
    return "\n".join(lines)


def run(
    size: int, dim: int, classes: int, repeats: int, seed: int, quick: bool, out: Path
) -> dict[str, Any]:
    """Measures, writes `index_evaluation.json` and `.md` into `out`, returns the payload."""
    payload = {
        **machine_record(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "size": size,
        "dim": dim,
        "classes": classes,
        "repeats": repeats,
        "quick": quick,
        "rows": measure(size, dim, classes, repeats, seed),
    }
    payload["verdicts"] = verdicts(payload["rows"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "index_evaluation.json").write_text(json.dumps(payload, indent=2) + "\n")
    (out / "index_evaluation.md").write_text(render_markdown(payload))
    return payload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run, into a temporary folder")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7, help="timed calls (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="defaults to benchmark/results")
    args = parser.parse_args()
    if args.quick:
        args.size, args.classes, args.repeats = 1_000, 10, 1
    out = output_folder(args.out, args.quick, "index_evaluation")
    payload = run(args.size, args.dim, args.classes, args.repeats, args.seed, args.quick, out)
    print(render_markdown(payload))
    print(f"wrote {out / 'index_evaluation.json'} and {out / 'index_evaluation.md'}")


if __name__ == "__main__":
    main()
