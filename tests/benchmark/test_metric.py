"""Tests of `benchmark.metric.losses` and `benchmark.metric.small_batch`.

The per-replica mining wrapper against one-device references, the small-batch
tables against a recomputation from the JSON, and smoke runs of both benchmarks.
"""

from __future__ import annotations

import json
import re
import statistics

import numpy as np
import pytest
import tensorflow as tf

from benchmark import report
from benchmark.common import RESULTS_DIR
from benchmark.metric import losses as metric_losses
from benchmark.metric import small_batch as metric_small_batch
from benchmark.metric import small_batch_tables as tables
from tensorflow_similarity.testing import mirrored_strategy, run_on_replicas
from tests.benchmark.quick_runs import run_quick


def run_per_replica_mining(labels, embeddings):
    """The per-replica loss of each replica's share and its gradients, on 2 replicas."""
    strategy = mirrored_strategy(2)
    with strategy.scope():
        loss = metric_losses.PerReplicaMining(metric_losses.MultiSimilarityLoss())

    def step(y, x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = loss(y, x)
        return value, tape.gradient(value, x)

    sizes = [len(y) for y in labels]
    inputs = (np.concatenate(labels), np.concatenate(embeddings))
    run = run_on_replicas(step, inputs, sizes, strategy=strategy, traced=False)
    return float(run.summed(lambda result: result[0])), [gradient for _, gradient in run.results]


def test_per_replica_mining_is_the_mean_of_one_device_losses_of_each_share():
    rng = np.random.default_rng(0)
    labels = [np.array([0, 0, 1, 1]), np.array([2, 2, 3, 3, 2])]
    embeddings = [rng.normal(size=(len(y), 8)).astype("float32") for y in labels]
    total, _ = run_per_replica_mining(labels, embeddings)
    one_device = [
        float(metric_losses.MultiSimilarityLoss()(y, x))
        for y, x in zip(labels, embeddings, strict=True)
    ]
    # Keras sums the replicas' losses; each is its share's mean divided by 2.
    assert total == pytest.approx(statistics.fmean(one_device), rel=1e-5)
    assert min(one_device) > 0
    global_loss = float(
        metric_losses.MultiSimilarityLoss()(np.concatenate(labels), np.concatenate(embeddings))
    )
    assert abs(total - global_loss) > 1e-3


def test_per_replica_mining_of_one_class_per_replica_is_zero_without_gradient():
    rng = np.random.default_rng(1)
    labels = [np.array([0, 0]), np.array([1, 1])]
    embeddings = [rng.normal(size=(2, 8)).astype("float32") for _ in labels]
    total, gradients = run_per_replica_mining(labels, embeddings)
    assert total == 0.0
    for gradient in gradients:
        np.testing.assert_array_equal(gradient, np.zeros_like(gradient))


def fake_small_batch_payload(seeds=(0, 1, 2)):
    rng = np.random.default_rng(2)
    keys = [f"{s}_{m}" for s in tables.SPLITS for m in tables.METRICS]
    runs = [
        {
            "setting": setting,
            "batch_per_replica": batch,
            "global_batch": 4 * batch,
            "seed": seed,
            "losses": [0.0, 0.0] if setting == "per_replica" else [0.8, 0.3],
            "train_s": 1.0,
        }
        | {key: float(rng.uniform()) for key in keys}
        for batch in (2, 4)
        for seed in seeds
        for setting in tables.SETTINGS
    ]
    meta = {
        "date_utc": "2026-12-01T12:00:00+00:00",
        "command": "python -m benchmark.metric.small_batch",
        "machine": "4 logical CPU devices on 2 CPU cores (x86_64)",
        "tensorflow": "2.21.0",
        "keras": "3.15.1",
        "quick": False,
        "batch_sizes": [2, 4],
        "seeds": list(seeds),
        "epochs": 2,
        "steps_per_epoch": 3,
        "learning_rate": 0.05,
        "train_images": 10,
        "seen_images": 5,
        "unseen_images": 6,
        "complete": True,
        "elapsed_s": 60.0,
    }
    untrained = [{"seed": s} | {k: float(rng.uniform()) for k in keys} for s in seeds]
    return {"meta": meta, "untrained": untrained, "runs": runs}


def paired_cells(markdown):
    """`{(batch, retrieval): [cells of the comparisons]}` of the paired-differences table."""
    table = re.split(r"\n#+ ", markdown.split("## Paired differences per seed\n")[1])[0]
    cells = {}
    for line in table.splitlines():
        row = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and row[0].isdigit():
            cells[int(row[0]), row[2]] = row[3:]
    return cells


# The paired table's columns, in order: (b) - (a), (c) - (b), (c) - (a), (c) - (d).
COMPARED = [
    ("per_replica_bn", "per_replica"),
    ("sync", "per_replica_bn"),
    ("sync", "per_replica"),
    ("sync", "single"),
]


def check_paired_table(payload, markdown):
    """The paired table's cells against the per-seed values of the JSON, recomputed here."""
    assert "| (b) - (a) | (c) - (b) | (c) - (a) | (c) - (d) |" in re.sub(
        r"\| [^|(]+: ", "| ", markdown
    )
    value = {(r["setting"], r["batch_per_replica"], r["seed"]): r for r in payload["runs"]}
    cells = paired_cells(markdown)
    labels = {"recall@1": "recall@1", "map@r": "mAP@R"}
    assert len(cells) == 2 * 2 * 2
    for (batch, retrieval), texts in cells.items():
        split, metric = retrieval.split(" ")
        key = f"{split}_{next(k for k, v in labels.items() if v == metric)}"
        for text, (minuend, subtrahend) in zip(texts, COMPARED, strict=True):
            differences = [
                value[minuend, batch, s][key] - value[subtrahend, batch, s][key]
                for s in payload["meta"]["seeds"]
            ]
            mean = sum(differences) / len(differences)
            sd = (
                (sum((d - mean) ** 2 for d in differences) / (len(differences) - 1)) ** 0.5
                if len(differences) > 1
                else 0.0
            )
            positive = sum(d > 0 for d in differences)
            assert text == f"{mean:+.3f} ± {sd:.3f} ({positive}/{len(differences)})"


def test_small_batch_paired_table_is_recomputed_from_the_per_seed_values():
    payload = fake_small_batch_payload()
    markdown = tables.render_markdown(payload)
    check_paired_table(payload, markdown)
    assert "exactly 0 in every epoch of 6 of 6 runs" in markdown


def test_small_batch_findings_judge_each_comparison_against_the_seed_spread():
    payload = fake_small_batch_payload()
    payload["raw_pixels"] = {"seen_recall@1": 0.5, "unseen_recall@1": 0.25}
    text = tables.findings(payload)
    value = {(r["setting"], r["batch_per_replica"], r["seed"]): r for r in payload["runs"]}
    seeds = payload["meta"]["seeds"]
    key = "unseen_map@r"
    for comparison, (minuend, subtrahend) in zip(tables.COMPARISONS, COMPARED, strict=True):
        differences = [value[minuend, 4, s][key] - value[subtrahend, 4, s][key] for s in seeds]
        spread = max(
            statistics.stdev([value[setting, 4, s][key] for s in seeds])
            for setting in (minuend, subtrahend)
        )
        mean = statistics.fmean(differences)
        verdict = "exceeds the seed spread" if abs(mean) > spread else "within the seed spread"
        positive = sum(d > 0 for d in differences)
        expected = (
            f"4/replica unseen mAP@R {mean:+.3f} ± {statistics.stdev(differences):.3f} "
            f"(seed spread {spread:.3f}, {positive}/3 seeds > 0: {verdict})"
        )
        sentence = next(line for line in text.split("\n\n") if line.startswith(comparison))
        assert expected in sentence
    # The references: one device (d) against raw pixels and the untrained model.
    assert "and raw pixels' 0.250" in text and "and raw pixels' 0.500" in text


def test_small_batch_split_keeps_the_unseen_classes_out_of_training():
    from tensorflow_similarity.datasets import ImageData

    images = np.arange(10 * 4, dtype="float32").reshape(10, 2, 2, 1)
    data = ImageData(
        x_train=images[:6],
        y_train=np.array([0, 1, 2, 3, 0, 3], dtype="int32"),
        x_test=images[6:],
        y_test=np.array([1, 2, 3, 0], dtype="int32"),
        class_names=["a", "b", "c", "d"],
        source="fake",
        seen_classes=2,
    )
    x_train, y_train, splits, seen = metric_small_batch.split_data(data, "glyphs")
    assert seen == 2
    np.testing.assert_array_equal(y_train, [0, 1, 0])
    np.testing.assert_array_equal(x_train, images[[0, 1, 4]])
    np.testing.assert_array_equal(splits["seen"][1], [1, 0])
    np.testing.assert_array_equal(splits["seen"][0], images[[6, 9]])
    np.testing.assert_array_equal(splits["unseen"][1], [2, 3, 3, 2, 3])
    np.testing.assert_array_equal(splits["unseen"][0], images[[2, 3, 5, 7, 8]])
    # The digits have no split of their own: 0-5 are seen.
    assert metric_small_batch.split_data(data, "digits")[3] == 6


def test_report_adds_the_metric_small_batch_section_and_its_plot(tmp_path):
    payload = fake_small_batch_payload(seeds=(0, 1))
    (tmp_path / "metric_small_batch.json").write_text(json.dumps(payload))
    text = report.main(["--results", str(tmp_path)]).read_text()
    assert "a metric loss at 2 and 4 images per replica (`metric_small_batch.json`)" in text
    assert "](metric_small_batch.png)" in text
    assert (tmp_path / "metric_small_batch.png").stat().st_size > 0
    check_paired_table(payload, text)


def test_full_run_measures_quality_on_4_replicas_and_older_results_render_as_such():
    assert metric_losses.parse_args([]).quality_replicas == 4
    assert metric_losses.parse_args(["--quick"]).quality_replicas == 2
    payload = json.loads((RESULTS_DIR / "metric_losses.json").read_text())
    payload.pop("quality_replicas", None)
    markdown = metric_losses.render_markdown(payload)
    assert "4 replicas, trained on digits 0-5" in markdown and "batches of 4 classes" in markdown


# Runs the benchmark end to end: out of the fast loop, still in CI.
@pytest.mark.slow
def test_quick_run_measures_both_minings_and_leaves_results_alone(tmp_path):
    # run_quick also asserts that benchmark/results is left untouched.
    folder = run_quick("benchmark.metric.losses", tmp_path)
    payload = json.loads((folder / "metric_losses.json").read_text())
    assert [(r["loss"], r["replicas"]) for r in payload["cost"]] == [("multisimilarity", 2)]
    row = payload["cost"][0]
    assert row["ms_global"] > 0 and row["ms_per_replica"] > 0
    # Each replica gathers the global batch's embeddings (64 float32) and two int64s per image.
    assert row["bytes_gathered"] == row["global_batch"] * (64 * 4 + 16)
    minings = {r["mining"] for r in payload["quality"]}
    assert minings == {"global", "per replica"}
    # A smoke run trains on 2 replicas, one class each, as a full run does on 4.
    assert payload["quality_replicas"] == 2
    for r in payload["quality"]:
        for metric in ("recall@1", "map@r", "recall@1_before", "map@r_before"):
            assert 0.0 <= r[metric] <= 1.0
    markdown = (folder / "metric_losses.md").read_text()
    assert "## Cost" in markdown and "## Quality" in markdown
    assert "2 replicas, trained on digits 0-5" in markdown and "batches of 2 classes" in markdown
    assert "| 4 | 8 | recall@1 |" in markdown  # 4 images per replica, a global batch of 8
    assert metric_losses.render_markdown(payload) == markdown


@pytest.mark.slow
def test_small_batch_quick_run_writes_tables_and_plot_and_leaves_results_alone(tmp_path):
    # run_quick also asserts that benchmark/results is left untouched.
    folder = run_quick("benchmark.metric.small_batch", tmp_path)
    assert re.match(r"metric_small_batch_quick_", folder.name)
    assert {p.name for p in folder.iterdir()} == {
        f"metric_small_batch.{ext}" for ext in ("json", "md", "png")
    }
    payload = json.loads((folder / "metric_small_batch.json").read_text())
    assert payload["meta"]["complete"] and payload["meta"]["quick"]
    runs = {(r["setting"], r["batch_per_replica"], r["seed"]): r for r in payload["runs"]}
    assert set(runs) == {
        (s, b, seed) for s in tables.SETTINGS for b in (2, 4) for seed in payload["meta"]["seeds"]
    }
    for (setting, batch, seed), run in runs.items():
        for key in ("seen_recall@1", "seen_map@r", "unseen_recall@1", "unseen_map@r"):
            assert 0.0 <= run[key] <= 1.0
        if setting == "per_replica":
            # One class per replica: no negative for any anchor, a loss of exactly 0.
            assert run["losses"] == [0.0] * payload["meta"]["epochs"]
        else:
            assert all(loss > 0 for loss in run["losses"])
        if setting == "sync":
            # Sync BN with global mining trains as one device holding the global batch.
            single = runs["single", batch, seed]["losses"]
            np.testing.assert_allclose(run["losses"], single, rtol=1e-3)
    markdown = (folder / "metric_small_batch.md").read_text()
    assert tables.render_markdown(payload) == markdown
    check_paired_table(payload, markdown)
