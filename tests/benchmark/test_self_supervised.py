"""Smoke tests of `benchmark.self_supervised` (`--quick` runs) and of its report sections.

The end-to-end test checks that the quality pipeline runs and writes tables
and JSON of the expected structure (not their values: one epoch on a subset
measures nothing). The report tests feed `benchmark/self_supervised/conclusion.py`
and `benchmark/report.py` hand-made results whose conclusions are known, so a
wrong comparison or a wrong sign fails them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmark import report
from benchmark.self_supervised import conclusion, small_batch
from benchmark.self_supervised import quality as ssl_quality
from benchmark.sync_bn import report as sync_bn_report
from tests.benchmark.quick_runs import quick_output_folder, results_snapshot, run_benchmark


def summary_row(algorithm, batch, setting, values, single_values=None):
    import statistics

    row = {
        "algorithm": algorithm,
        "batch_per_replica": batch,
        "setting": setting,
        "n": len(values),
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values),
        "min": min(values),
        "max": max(values),
    }
    if single_values is not None:
        differences = [v - s for v, s in zip(values, single_values, strict=True)]
        row["diff_vs_single_mean"] = statistics.fmean(differences)
        row["diff_vs_single_std"] = statistics.stdev(differences)
    return row


def fake_ssl_report() -> dict:
    """SimCLR at batch 8: (b) equals (c) exactly, (a) is 10 points lower on every seed."""
    single = [0.80, 0.82, 0.84]
    per_replica = [v - 0.10 for v in single]
    summary = [
        summary_row("simclr", 8, "single", single),
        summary_row("simclr", 8, "sync", single, single),
        summary_row("simclr", 8, "per_replica", per_replica, single),
    ]
    return {
        "meta": {
            "command": "python -m benchmark.self_supervised.quality",
            "date_utc": "2026-01-01T00:00:00+00:00",
            "hardware": "4 logical CPU devices on 2 CPU cores (x86_64)",
            "platform": "Linux",
            "python": "3.11",
            "tensorflow": "2.x",
            "keras": "3.x",
            "elapsed_s": 60.0,
            "data_source": "fake",
            "train_images": 10,
            "test_images": 5,
            "backbone_params": 1000,
            "backbone_batch_norm_layers": 9,
            "complete": True,
            "config": {
                "image_size": 16,
                "width": 16,
                "epochs": 1,
                "batch_sizes": [8],
                "seeds": [0, 1, 2],
                "algorithms": ["simclr"],
                "learning_rate": 0.002,
                "projector_dim": 64,
                "quick": False,
            },
        },
        "baselines": [
            {"name": "raw pixels", "knn_accuracy": 0.9},
            {"name": "untrained backbone", "seed": 0, "knn_accuracy": 0.5},
        ],
        "runs": [],
        "summary": summary,
    }


def test_conclusion_is_computed_from_the_numbers():
    text = conclusion.ssl_conclusion(fake_ssl_report())
    assert "within the seed spread of one device (c) in 1 of 1" in text
    assert "largest difference of means is 0.0 points" in text
    assert "outside the seed spread of (c) in 1 of 1 cells" in text
    assert "largest shortfall is 10.0 points (SimCLR, 8 images per replica" in text
    assert "(a) - (c) is -10.0 points" in text


def test_paired_runs_count_exact_agreement():
    fake = fake_ssl_report()

    def run(setting, seed, accuracy, loss):
        return {
            "algorithm": "simclr",
            "batch_per_replica": 8,
            "setting": setting,
            "seed": seed,
            "knn_accuracy": accuracy,
            "final_loss": loss,
        }

    fake["runs"] = [
        run("single", 0, 0.8, 5.0),
        run("sync", 0, 0.8, 5.001),
        run("per_replica", 0, 0.6, 6.0),
        run("single", 1, 0.8, 5.0),
        run("sync", 1, 0.6, 5.0),
        run("per_replica", 1, 0.8, 6.0),
    ]
    text = conclusion.paired_runs_sentence(fake)
    assert "(b) gives exactly the same kNN accuracy as (c) in 1 of 2 paired runs" in text
    assert "(largest difference 20.0 points), and its last-epoch mean loss" in text
    assert "by at most 0.001" in text
    assert "(a) gives exactly the same kNN accuracy as (c) in 1 of 2 paired runs" in text


def test_overhead_series_reads_both_step_time_sections():
    sync_bn = {
        "step_time": [
            {
                "setting": "latency-bound",
                "replicas": 2,
                "ours_over_plain": 1.2,
                "keras_over_plain": 1.6,
            },
            {
                "setting": "latency-bound",
                "replicas": 4,
                "ours_over_plain": 1.3,
                "keras_over_plain": 1.9,
            },
        ],
        "resnet_step_time": [
            {"model": "ResNet-18", "replicas": 4, "over_plain": {"plain": 1.0, "ours": 1.1}},
        ],
    }
    series = sync_bn_report.overhead_series(sync_bn)
    assert series["latency-bound (small ResNet)"] == {
        "keras": [(2, 1.6), (4, 1.9)],
        "ours": [(2, 1.2), (4, 1.3)],
    }
    assert series["ResNet-18"] == {"ours": [(4, 1.1)]}
    text = sync_bn_report.overhead_conclusion(sync_bn)
    assert "latency-bound (small ResNet), 4 replicas: ours +30% step time" in text
    assert "Keras' synchronised batch norm +90%" in text


def test_report_writes_plots_and_markdown(tmp_path):
    (tmp_path / "ssl_quality.json").write_text(json.dumps(fake_ssl_report()))
    path = report.main(["--results", str(tmp_path)])
    text = path.read_text()
    assert (tmp_path / "ssl_quality.png").stat().st_size > 0
    assert "![kNN accuracy vs per-replica batch](ssl_quality.png)" in text
    assert "| 8 | 32 | 72.0 ± 2.0 (70.0-74.0) | 82.0 ± 2.0 (80.0-84.0) |" in text
    assert "-10.0 ± 0.0" in text


@pytest.mark.slow
def test_quick_run_writes_tables_and_json(tmp_path):
    # Without --out, a quick run writes to a new folder in TMPDIR, never to benchmark/results.
    before = results_snapshot()
    result = run_benchmark(
        "benchmark.self_supervised.quality", "--quick", env={"TMPDIR": str(tmp_path)}
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert results_snapshot() == before
    out = quick_output_folder(result.stdout)
    assert out.parent == tmp_path
    results = json.loads((out / "ssl_quality.json").read_text())
    config = results["meta"]["config"]
    assert config["quick"] and results["meta"]["complete"]
    cells = {
        (r["algorithm"], r["batch_per_replica"], r["setting"], r["seed"]) for r in results["runs"]
    }
    assert cells == {
        (a, b, s, seed)
        for a in config["algorithms"]
        for b in config["batch_sizes"]
        for s in ("per_replica", "sync", "single")
        for seed in config["seeds"]
    }
    for run in results["runs"]:
        assert 0.0 <= run["knn_accuracy"] <= 1.0
        assert run["replicas"] == (1 if run["setting"] == "single" else 4)
        assert run["global_batch"] == 4 * run["batch_per_replica"]
    assert {b["name"] for b in results["baselines"]} == {"raw pixels", "untrained backbone"}
    assert len(results["summary"]) == len(cells) // len(config["seeds"])

    markdown = (out / "ssl_quality.md").read_text()
    assert "| per-replica batch | global batch | (a) per-replica BN |" in markdown
    assert "## SimCLR" in markdown

    built = report.main(["--results", str(out)])
    assert (out / "ssl_quality.png").exists()
    assert "### Conclusion" in built.read_text()


def test_report_adds_the_small_batch_section_and_its_paired_plot(tmp_path):
    small = fake_ssl_report()
    small["meta"]["command"] = "python -m benchmark.self_supervised.small_batch"
    (tmp_path / "ssl_small_batch.json").write_text(json.dumps(small))
    text = report.main(["--results", str(tmp_path)]).read_text()
    assert "## Where sync batch norm should matter: 2 and 4 images per replica" in text
    assert "supervised metric loss" in text and "`metric_small_batch.json`" in text
    for name in ("ssl_small_batch.png", "ssl_small_batch_paired.png"):
        assert (tmp_path / name).stat().st_size > 0
        assert f"]({name})" in text
    # The paired difference (a) - (c) of the fake results: -10 points on every seed.
    assert "-10.0 ± 0.0" in text


def test_small_batch_presets_leave_the_command_line_the_last_word():
    args = ssl_quality.parse_args([*small_batch.presets([]), "--seeds", "5"])
    assert args.batch_sizes == [2, 4] and args.algorithms == ["simsiam", "simclr"]
    assert args.epochs == small_batch.EPOCHS and args.seeds == 5
    args = ssl_quality.parse_args([*small_batch.presets(["--epochs", "1"]), "--epochs", "1"])
    assert args.epochs == 1
    # A quick run keeps quality.py's quick algorithm and epochs.
    quick = ssl_quality.run_config(
        ssl_quality.parse_args([*small_batch.presets(["--quick"]), "--quick"])
    )
    assert quick.batch_sizes == (2, 4) and quick.algorithms == ("simclr",) and quick.epochs == 1


@pytest.mark.slow
def test_small_batch_quick_run_writes_its_own_files(tmp_path):
    before = results_snapshot()
    result = run_benchmark(
        "benchmark.self_supervised.small_batch", "--quick", env={"TMPDIR": str(tmp_path)}
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert results_snapshot() == before
    out = quick_output_folder(result.stdout)
    assert out.parent == tmp_path and out.name.startswith("ssl_small_batch_quick_")
    assert {p.name for p in out.iterdir()} == {"ssl_small_batch.json", "ssl_small_batch.md"}
    results = json.loads((out / "ssl_small_batch.json").read_text())
    assert results["meta"]["command"] == "python -m benchmark.self_supervised.small_batch --quick"
    assert results["meta"]["config"]["batch_sizes"] == [2, 4]
    assert {(r["batch_per_replica"], r["global_batch"]) for r in results["runs"]} == {
        (2, 8),
        (4, 16),
    }
    assert {r["setting"] for r in results["runs"]} == {"per_replica", "sync", "single"}
    built = report.main(["--results", str(out)]).read_text()
    assert "ssl_small_batch_paired.png" in built


def test_trainer_resets_the_optimizer_but_keeps_its_learning_rate():
    # The learning rate is one of the optimizer's variables: zeroing them all stops training.
    config = ssl_quality.run_config(
        ssl_quality.parse_args(["--quick", "--image-size", "8", "--width", "4", "--limit", "32"])
    )
    data = ssl_quality.load_data("digits", image_size=8, seed=0, limit=32)
    trainer = ssl_quality.Trainer("simclr", "single", config, strategy=None)
    reference = ssl_quality.build_model("simclr", config, sync_bn=False)
    initial = [w.copy() for w in reference.backbone.get_weights()]
    trainer.run(2, 0, reference, data)
    optimizer = trainer.model.optimizer
    assert float(optimizer.learning_rate) == pytest.approx(config.learning_rate)
    assert int(optimizer.iterations) > 0
    trained = trainer.model.backbone.get_weights()
    assert any(not np.array_equal(a, b) for a, b in zip(initial, trained, strict=True))
    # A second run starts from the fresh state again.
    trainer.run(2, 0, reference, data)
    assert float(optimizer.learning_rate) == pytest.approx(config.learning_rate)


def fake_runs(report: dict, accuracies: dict) -> list[dict]:
    """Per-seed runs of SimCLR at batch 8 from `{setting: [accuracy of seed 0, 1, 2]}`."""
    return [
        {
            "algorithm": "simclr",
            "batch_per_replica": 8,
            "setting": setting,
            "seed": seed,
            "knn_accuracy": value,
            "final_loss": 1.0,
        }
        for setting, values in accuracies.items()
        for seed, value in enumerate(values)
    ]


def test_each_comparison_says_whether_it_exceeds_the_seed_spread():
    fake = fake_ssl_report()
    single = [0.80, 0.82, 0.84]
    fake["runs"] = fake_runs(
        fake,
        {"single": single, "sync": single, "per_replica": [v - 0.10 for v in single]},
    )
    text = conclusion.comparison_sentence(fake, "simclr", [8])
    # (a) is 10 points below (c) on every seed, and both cells spread by 2 points over seeds.
    assert "(a) - (c) at 8 images per replica -10.0 ± 0.0 (seed spread 2.0, 0/3 seeds > 0): " in (
        text
    )
    assert text.count("exceeds the seed spread") == 1
    assert "(b) - (c) at 8 images per replica +0.0 ± 0.0 (seed spread 2.0, 0/3 seeds > 0): " in (
        text
    )
    assert text.count("within the seed spread") == 1
    assert text in conclusion.ssl_conclusion(fake)


def test_baseline_sentence_pairs_one_device_with_each_seeds_untrained_backbone():
    fake = fake_ssl_report()
    single = [0.80, 0.82, 0.84]
    fake["runs"] = fake_runs(fake, {"single": single})
    untrained = [0.50, 0.81, 0.60]
    fake["baselines"] = [{"name": "raw pixels", "knn_accuracy": 0.83}] + [
        {"name": "untrained backbone", "seed": seed, "knn_accuracy": value}
        for seed, value in enumerate(untrained)
    ]
    gains = [100 * (t - u) for t, u in zip(single, untrained, strict=True)]
    mean = sum(gains) / 3
    sd = (sum((g - mean) ** 2 for g in gains) / 2) ** 0.5
    untrained_sd = 100 * np.std(untrained, ddof=1)
    verdict = "exceeds" if abs(mean) > max(2.0, untrained_sd) else "within"
    text = conclusion.baseline_sentence(fake)
    assert f"SimCLR at 8 {mean:+.1f} ± {sd:.1f} ({verdict} the seed spread)" in text
    assert "raw pixels reaches 83.0%" in text
    # 82% (the one-device mean) is below raw pixels' 83%.
    assert "0 of 1 one-device cells are above raw pixels" in text


def test_trainer_recomputes_batch_norm_statistics_before_evaluating():
    # After a run, each batch norm's moving mean is its input's mean over the clean training
    # images, not Keras' momentum average of the augmented batches.
    import keras

    config = ssl_quality.run_config(
        ssl_quality.parse_args(["--quick", "--image-size", "8", "--width", "4", "--limit", "32"])
    )
    data = ssl_quality.load_data("digits", image_size=8, seed=0, limit=32)
    trainer = ssl_quality.Trainer("simclr", "single", config, strategy=None)
    reference = ssl_quality.build_model("simclr", config, sync_bn=False)
    trainer.run(2, 0, reference, data)
    backbone = trainer.model.backbone
    stem = keras.Model(backbone.input, backbone.get_layer("stem_conv").output)
    expected = np.asarray(stem(data.x_train)).mean(axis=(0, 1, 2))
    moving = np.asarray(backbone.get_layer("stem_bn").moving_mean)
    np.testing.assert_allclose(moving, expected, rtol=1e-4, atol=1e-5)


def test_glyphs_are_the_default_data_and_digits_still_parse():
    assert ssl_quality.run_config(ssl_quality.parse_args([])).data == "glyphs"
    assert ssl_quality.run_config(ssl_quality.parse_args(["--data", "digits"])).data == "digits"
