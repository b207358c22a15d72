"""How high the digits let the supervised job's unseen-class recall@1 go, and where it ends.

`tfsim train --algorithm multisimilarity` trains on digits 0-5 and reports
recall@1 of the unseen digits 6-9 before and after training. Before training
that figure is already high: the untrained ResNet-18, whose batch norm still
holds its initial statistics, behaves much like the raw pixels. This script
puts the job's own figures, for several seeds, beside references that need
no network:

* `pixels`: the raw 8x8 pixels searched by cosine, as the job's index does;
* `NCA`: a linear metric learnt on the same seen-class training images
  (scikit-learn's `NeighborhoodComponentsAnalysis`, 64 components, Euclidean
  search): a classical metric learner, independent of this package;
* `untrained` and `trained`: the job's network before and after its default
  run (`tfsim train --algorithm multisimilarity --seed S`, one fresh process
  per seed).

Two protocols, each with seen and unseen classes apart:

* `job`: the job's own (queries: the held-out test images; index: the
  training images of all 10 classes; 143 unseen queries, one is 0.007);
* `loo`: leave-one-out over all 1,797 images (each image's nearest other
  image), 5 times the queries and so less noise. NCA is learnt on the
  seen-class training images only, as the network is.

Results go to `<out>/unseen_digits.json` and `.md`: `benchmark/results` for a
full run, a new temporary folder (printed) for a `--quick` one.

Usage:

    python benchmark/unseen_digits.py           # seeds 0-2, default runs; ~5 min on 2 cores
    python benchmark/unseen_digits.py --quick   # seed 0, 1 epoch (smoke run)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from benchmark_common import markdown_table, output_folder  # noqa: E402
from sklearn.neighbors import NeighborhoodComponentsAnalysis  # noqa: E402

from tensorflow_similarity.cli import main as tfsim_main  # noqa: E402
from tensorflow_similarity.cli.fitting import inference_function  # noqa: E402
from tensorflow_similarity.data import ImageData, load_data  # noqa: E402

SCRIPT = "unseen_digits"
TRAIN_CLASSES = 6
IMAGE_SIZE = 8
NCA_ITERATIONS = 100
REFERENCES = ("pixels", "nca")
NETWORKS = ("untrained", "trained")
COLUMNS = {
    "pixels": "pixels",
    "nca": "NCA (seen classes)",
    "untrained": "network, untrained",
    "trained": "network, trained",
}
PROTOCOLS = {
    "job": "the job's (test queries, index of training images)",
    "loo": "leave-one-out over all images",
}
GROUPS = ("unseen", "seen")


def nearest_recall(
    index: np.ndarray,
    index_labels: np.ndarray,
    queries: np.ndarray,
    query_labels: np.ndarray,
    metric: str = "cosine",
    leave_one_out: bool = False,
) -> np.ndarray:
    """Whether each query's nearest indexed vector has its label (recall@1 per query).

    Args:
        index: `[n, d]` indexed vectors.
        index_labels: Their labels.
        queries: `[m, d]` query vectors (`index` itself with `leave_one_out`).
        query_labels: Their labels.
        metric: `"cosine"` (largest cosine similarity) or `"euclidean"`.
        leave_one_out: Whether query `i` is index row `i` and must not find itself.

    Returns:
        `[m]` booleans.
    """
    index = np.asarray(index, np.float64)
    queries = np.asarray(queries, np.float64)
    if metric == "cosine":
        index = index / np.linalg.norm(index, axis=1, keepdims=True)
        queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
        distance = -queries @ index.T
    else:
        distance = (queries**2).sum(1)[:, None] - 2 * queries @ index.T + (index**2).sum(1)[None, :]
    if leave_one_out:
        np.fill_diagonal(distance, np.inf)
    return np.asarray(index_labels)[distance.argmin(axis=1)] == np.asarray(query_labels)


def group_recall(hits: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """recall@1 of the unseen (`label >= TRAIN_CLASSES`) and seen queries apart."""
    unseen = np.asarray(labels) >= TRAIN_CLASSES
    return {"unseen": float(hits[unseen].mean()), "seen": float(hits[~unseen].mean())}


def protocols(
    embed: Callable[[np.ndarray], np.ndarray], data: ImageData, metric: str = "cosine"
) -> dict[str, dict[str, float]]:
    """recall@1 of `embed`'s vectors under both protocols, seen and unseen apart.

    Args:
        embed: Maps `[n, 8, 8, 3]` images to `[n, d]` vectors.
        data: The job's `ImageData` (its split of the seed).
        metric: `"cosine"` or `"euclidean"`.

    Returns:
        `{"job": {"unseen": r, "seen": r}, "loo": {...}}`.
    """
    train, test = embed(data.x_train), embed(data.x_test)
    every = np.concatenate([train, test])
    labels = np.concatenate([data.y_train, data.y_test])
    job = nearest_recall(train, data.y_train, test, data.y_test, metric)
    loo = nearest_recall(every, labels, every, labels, metric, leave_one_out=True)
    return {"job": group_recall(job, data.y_test), "loo": group_recall(loo, labels)}


def references(seed: int) -> dict[str, dict[str, dict[str, float]]]:
    """The `pixels` and `nca` figures of the job's split of `seed`."""
    data = load_data("digits", IMAGE_SIZE, seed=seed)

    def pixels(images: np.ndarray) -> np.ndarray:
        return images[..., 0].reshape(len(images), -1)  # the three channels are equal

    seen = data.y_train < TRAIN_CLASSES
    nca = NeighborhoodComponentsAnalysis(random_state=seed, max_iter=NCA_ITERATIONS)
    nca.fit(pixels(data.x_train[seen]), data.y_train[seen])
    return {
        "pixels": protocols(pixels, data),
        "nca": protocols(lambda images: nca.transform(pixels(images)), data, "euclidean"),
    }


def run_job(seed: int, quick: bool, folder: Path) -> dict[str, Any]:
    """Runs the supervised job for `seed` in a fresh process; returns its figures."""
    command = [sys.executable, __file__, "--job-seed", str(seed), "--job-folder", str(folder)]
    if quick:
        command.append("--quick")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if result.returncode:
        raise RuntimeError(
            f"{' '.join(command)} failed:\n{(result.stdout + result.stderr)[-3000:]}"
        )
    figures = json.loads((folder / "networks.json").read_text())
    summary = json.loads((folder / "summary.json").read_text())
    # The job's own table, for the run's record and the tests' cross-check.
    figures["summary"] = {
        "before": summary["before"]["recall_at_1_unseen"],
        "after": summary["after"]["recall_at_1_unseen"],
    }
    return figures


def job_options(seed: int, quick: bool, folder: Path) -> list[str]:
    """The `tfsim train` options of a seed's run (the defaults; 1 epoch when quick)."""
    options = ["train", "--algorithm", "multisimilarity", "--seed", str(seed)]
    options += ["--output", str(folder)]
    return options + (["--epochs", "1"] if quick else [])


def job_worker(seed: int, quick: bool, folder: Path) -> None:
    """In a fresh process: runs the job and scores its network before and after training."""
    figures: dict[str, Any] = {}

    class Score(keras.callbacks.Callback):
        """Scores the trained model when `fit` starts (untrained) and ends (trained)."""

        def on_train_begin(self, logs: dict | None = None) -> None:
            # Loaded once the job has set up its devices: nothing here may start TensorFlow first.
            self.data = load_data("digits", IMAGE_SIZE, seed=seed)
            figures["untrained"] = protocols(inference_function(self.model), self.data)

        def on_train_end(self, logs: dict | None = None) -> None:
            figures["trained"] = protocols(inference_function(self.model), self.data)

    status = tfsim_main(job_options(seed, quick, folder), callbacks=[Score()])
    if status:
        raise SystemExit(status)
    (folder / "networks.json").write_text(json.dumps(figures))


def render_markdown(report: dict[str, Any]) -> str:
    """The markdown report of a results payload."""
    seeds = report["seeds"]
    parts = [
        "# Unseen-class recall@1 on the digits: the supervised job and its references",
        f"{report['machine']}; {report['versions']}; {report['date']}; wall time "
        f"{report['wall_minutes']:.1f} min; command `{report['command']}`.",
        f"`tfsim train --algorithm multisimilarity` ({report['job']}), trained on digits "
        f"0-{TRAIN_CLASSES - 1}; recall@1 (nearest neighbour's class). `job`: "
        f"{PROTOCOLS['job']}; `loo`: {PROTOCOLS['loo']}. Pixels and the network by "
        "cosine, NCA by Euclidean distance.",
    ]
    header = ["protocol", "classes", "seed", *(COLUMNS[name] for name in (*REFERENCES, *NETWORKS))]
    rows = []
    for protocol in PROTOCOLS:
        for group in GROUPS:
            for seed in seeds:
                figures = report["figures"][str(seed)]
                rows.append(
                    [protocol, group, seed]
                    + [f"{figures[name][protocol][group]:.3f}" for name in (*REFERENCES, *NETWORKS)]
                )
    parts.append(markdown_table(header, rows))
    parts.append(findings(report))
    return "\n\n".join(parts)


# (figure, baseline, what the comparison shows)
COMPARISONS = (
    ("trained", "untrained", "what training does to the network (the issue's figure)"),
    ("nca", "pixels", "what a linear metric learnt on the seen classes does to the pixels"),
    ("pixels", "untrained", "how far the untrained network is from the raw pixels"),
)


def findings(report: dict[str, Any]) -> str:
    """Per comparison and protocol: the unseen-class difference of each seed, and its signs."""
    seeds = report["seeds"]
    lines = [
        "## Findings",
        "",
        "Unseen classes, recall@1 differences per seed (one query of the job's 143 is 0.007):",
        "",
    ]
    for name, baseline, meaning in COMPARISONS:
        for protocol in PROTOCOLS:
            differences = [
                report["figures"][str(seed)][name][protocol]["unseen"]
                - report["figures"][str(seed)][baseline][protocol]["unseen"]
                for seed in seeds
            ]
            above = sum(d > 0 for d in differences)
            lines.append(
                f"- {COLUMNS[name]} - {COLUMNS[baseline]}, `{protocol}`: "
                + ", ".join(f"{d:+.3f}" for d in differences)
                + f" (above on {above} of {len(seeds)} seeds): {meaning}."
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: seed 0, 1 epoch")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0 1 2")
    parser.add_argument("--out", type=Path, default=None, help="folder for the results")
    parser.add_argument("--job-seed", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--job-folder", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.job_seed is not None:
        job_worker(args.job_seed, args.quick, args.job_folder)
        return
    seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    out = output_folder(args.out, args.quick, SCRIPT)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tfsim-unseen-digits-") as scratch:
        for seed in seeds:
            figures[str(seed)] = {
                **references(seed),
                **run_job(seed, args.quick, Path(scratch) / f"seed-{seed}"),
            }
            job = {name: figures[str(seed)][name]["job"]["unseen"] for name in COLUMNS}
            print(
                f"seed {seed}: unseen recall@1 (job) untrained {job['untrained']:.3f}, "
                f"trained {job['trained']:.3f}, pixels {job['pixels']:.3f}",
                flush=True,
            )
    report = {
        "seeds": seeds,
        "quick": args.quick,
        "job": "1 epoch" if args.quick else "default options",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "versions": f"TF {tf.__version__}, Keras {keras.__version__}",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "wall_minutes": (time.time() - start) / 60,
        "command": "python benchmark/unseen_digits.py" + (" --quick" if args.quick else ""),
        "figures": figures,
    }
    (out / f"{SCRIPT}.json").write_text(json.dumps(report, indent=2))
    markdown = render_markdown(report)
    (out / f"{SCRIPT}.md").write_text(markdown + "\n")
    print(markdown)
    print(f"\nwrote {SCRIPT}.json and {SCRIPT}.md to {out}")


if __name__ == "__main__":
    main()
