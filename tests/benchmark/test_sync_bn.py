"""Smoke test of `python -m benchmark.sync_bn`: a `--quick` run writes every table row.

Without `--out`, the quick run must write to a temporary folder and leave the
committed full results in `benchmark/results` untouched; with `--out` it
writes there.

The benchmark runs in a subprocess, as a user would run it, because it must
configure its own logical devices before TensorFlow initialises. Timings are
never asserted (they depend on the machine and its load); collective counts and
variance errors are deterministic and are.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess

import pytest

from benchmark.sync_bn import options as sync_bn
from tests.benchmark.quick_runs import quick_output_folder, results_snapshot, run_benchmark

# Each runs a benchmark end to end (tens of seconds): out of the fast loop.
pytestmark = pytest.mark.slow
VARIANTS = ("plain", "keras", "ours", "ours_gather")
LABELS = (
    "plain `BatchNormalization`",
    "Keras `BatchNormalization(synchronized=True)`",
    "ours `SyncBatchNormalization`",
    'ours, `exchange="gather"`',
)
RATIOS = (0.0, 1e2, 1e3, 1e4)
RESNET_VARIANTS = (*VARIANTS, "ours_g2")
# ResNet-18 (He et al., 2015): a stem batch norm, two per basic block (8 blocks) and one
# per projection shortcut (stages 3, 4, 5).
RESNET18_BATCH_NORM_LAYERS = 1 + 2 * 8 + 3


def _run_script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_benchmark("benchmark.sync_bn", *args, env=env)


@pytest.fixture(scope="module")
def results_before():
    return results_snapshot()


@pytest.fixture(scope="module")
def quick_tmpdir(tmp_path_factory):
    """The TMPDIR of the quick run, where it puts its results folder when given no --out."""
    return tmp_path_factory.mktemp("sync_bn_tmpdir")


@pytest.fixture(scope="module")
def quick_run(results_before, quick_tmpdir):
    result = _run_script("--quick", env={"TMPDIR": str(quick_tmpdir)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    out = quick_output_folder(result.stdout)
    report = json.loads((out / "sync_bn.json").read_text())
    markdown = (out / "sync_bn.md").read_text()
    return report, markdown, result.stdout


def _table_rows(markdown: str, section: str) -> list[list[str]]:
    """The body rows of the markdown tables under `## <section>`."""
    body = markdown.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_header_names_machine_versions_date_and_command(quick_run):
    report, markdown, _ = quick_run
    meta = report["meta"]
    for key in ("hardware", "cpu_count", "tensorflow", "keras", "date_utc", "command"):
        assert meta[key], key
    assert meta["quick"] is True
    assert f"TensorFlow {meta['tensorflow']}, Keras {meta['keras']}" in markdown
    assert f"{meta['cpu_count']} CPUs" in markdown
    assert "--quick" in meta["command"] and f"`{meta['command']}`" in markdown
    assert meta["date_utc"] in markdown


def test_stdout_prints_the_written_tables(quick_run):
    _, markdown, stdout = quick_run
    assert markdown.strip() in stdout


def test_quick_run_writes_to_a_temporary_folder_not_the_committed_results(
    quick_run, results_before, quick_tmpdir
):
    _, _, stdout = quick_run
    out = quick_output_folder(stdout)
    assert out.parent == quick_tmpdir
    assert {p.name for p in out.iterdir()} == {"sync_bn.json", "sync_bn.md"}
    assert results_snapshot() == results_before


def test_collectives_table_has_every_variant_and_counts_agree(quick_run):
    report, markdown, _ = quick_run
    rows = {row["variant"]: row for row in report["collectives"]}
    assert set(rows) == set(VARIANTS)
    for row in rows.values():
        # The graph count and the trace-time all_reduce counter are independent.
        assert row["counts_agree"], row
    assert rows["plain"]["graph_ops_step"] == 0
    assert rows["ours"]["total_per_layer"] <= 2
    assert rows["keras"]["total_per_layer"] > 0

    table = _table_rows(markdown, "Collectives per batch-norm layer")
    assert [row[0] for row in table[1:]] == list(LABELS)
    agree = table[0].index("graph = counter")
    assert all(row[agree] == "yes" for row in table[1:])


def test_collective_bytes_by_replica_count_follow_each_algorithm(quick_run):
    """Bytes from the collective ops' shapes in the graph, per layer of C channels."""
    report, markdown, _ = quick_run
    rows = report["collectives"]
    replicas = sorted({row["replicas"] for row in rows})
    assert replicas == sorted({*report["meta"]["floor_replicas"], 2})
    for row in rows:
        k, forward, backward = row["replicas"], row["forward_bytes"], row["backward_bytes"]
        if row["variant"] == "ours":
            # One all-reduce of (count, sums, sums of squares) in float64 forward:
            # 8 (2C + 1) bytes, whatever k; (d_mean, d_variance) in float32 backward.
            assert forward == {"per_channel": 16, "fixed": 8}, row
            assert backward == {"per_channel": 8, "fixed": 0}, row
        elif row["variant"] == "ours_gather":
            # A float32 row of 4C per replica, as a k-row zero-padded all-reduce.
            assert forward == {"per_channel": 16 * k, "fixed": 0}, row
            assert backward == {"per_channel": 8, "fixed": 0}, row
        elif row["variant"] == "keras":
            assert forward == {"per_channel": 12, "fixed": 0}, row
            assert backward == {"per_channel": 8, "fixed": 0}, row
        else:
            assert forward == backward == {"per_channel": 0, "fixed": 0}, row
    # Fewer non-collective ops per layer than Keras' synchronised batch norm, on both paths.
    for k in replicas:
        ops = {r["variant"]: r["extra_compute_ops_per_layer"] for r in rows if r["replicas"] == k}
        assert ops["ours"] < ops["keras"] and ops["ours_gather"] < ops["keras"], ops
    table = _table_rows(markdown, "Collective bytes per batch-norm layer")
    body = [row for row in table if row[0] != "layer"]
    assert len(body) == 3 * len(replicas)
    assert "Target forward bytes per layer constant in the number of replicas (ours): **met**" in (
        markdown
    )


def test_step_time_table_has_a_row_per_setting_and_replica_count(quick_run):
    report, markdown, _ = quick_run
    meta = report["meta"]
    expected = {(s["name"], k) for s in meta["settings"] for k in meta["replica_counts"]}
    assert len(expected) == 4
    got = {(row["setting"], row["replicas"]) for row in report["step_time"]}
    assert got == expected
    for row in report["step_time"]:
        for variant in VARIANTS:
            assert len(row["times_ms"][variant]) == meta["reps"]
            assert math.isfinite(row["median_ms"][variant])
        assert math.isfinite(row["ours_over_plain"]) and math.isfinite(row["keras_over_plain"])

    table = _table_rows(markdown, "Training step time")
    body = [row for row in table if row[0] != "replicas"]
    assert len(body) == len(expected)
    assert all(len(row) == 11 for row in body)
    for setting in meta["settings"]:
        assert f"### {setting['name']}" in markdown


def test_robustness_table_has_every_ratio_and_ours_is_accurate(quick_run):
    report, markdown, _ = quick_run
    rows = report["robustness"]
    assert [row["mean_over_std"] for row in rows] == list(RATIOS)
    for row in rows:
        errors = row["relative_error"]
        assert set(errors) == {"keras", "ours", "ours_gather", "single_device"}
        # Against a float64 NumPy variance of the same data.
        assert errors["ours"] < 1e-3, row
        assert errors["ours_gather"] < 1e-3, row
    table = _table_rows(markdown, "Variance relative error")
    assert [row[0] for row in table[1:]] == ["0", "100", "1000", "10000"]


def test_gpu_request_without_gpu_fails_clearly(tmp_path):
    result = _run_script(
        "--quick", "--device", "gpu", "--out", str(tmp_path), env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert result.returncode != 0
    assert "--device gpu" in result.stderr and "--device cpu" in result.stderr
    assert not list(tmp_path.iterdir())


def test_resnet_table_has_every_replica_count_and_variant(quick_run):
    report, markdown, _ = quick_run
    meta = report["meta"]
    expected = {(r["name"], k) for r in meta["resnet_settings"] for k in r["replica_counts"]}
    rows = report["resnet_step_time"]
    assert {(row["model"], row["replicas"]) for row in rows} == expected
    for row in rows:
        k = row["replicas"]
        timed = RESNET_VARIANTS if k > 2 and k % 2 == 0 else VARIANTS
        assert tuple(row["median_ms"]) == timed
        assert row["global_batch"] == k * row["batch_per_replica"]
        for variant in timed:
            assert len(row["times_ms"][variant]) == meta["resnet_reps"]
            ms = row["median_ms"][variant]
            assert math.isfinite(ms) and ms > 0
            assert row["images_per_s"][variant] == pytest.approx(row["global_batch"] * 1e3 / ms)
        assert row["over_plain"]["plain"] == pytest.approx(1.0)
        if row["model"] == "ResNet-18":
            assert row["batch_norm_layers"] == RESNET18_BATCH_NORM_LAYERS
        traced = row["traced_all_reduces"]
        # The optimizer all-reduces each gradient, even with one replica.
        assert traced["plain"] == k * row["trainable_variables"]
        # Keras' synchronised layer all-reduces even with one replica; ours only with more.
        assert traced["keras"] == traced["plain"] + k * 5 * row["batch_norm_layers"]
        if k == 1:
            assert traced["ours"] == traced["plain"]
        else:
            assert traced["ours"] == traced["plain"] + k * 2 * row["batch_norm_layers"]
            assert traced["ours_gather"] == traced["ours"]

    assert "## ResNet step time and throughput (logical CPUs)" in markdown
    table = _table_rows(markdown, "ResNet step time")
    body = [row for row in table if row[0] != "replicas"]
    assert len(body) == len(expected)
    assert all(len(row) == 2 + len(RESNET_VARIANTS) + 1 for row in body)


def test_multiworker_table_times_two_processes(quick_run):
    report, markdown, _ = quick_run
    row = report["multiworker"]
    assert row["workers"] == 2 and row["replicas"] == 2
    assert set(row["median_ms"]) >= {"plain", "ours"}
    for variant, ms in row["median_ms"].items():
        assert math.isfinite(ms) and ms > 0
        assert math.isfinite(row["over_plain"][variant])
        # Both workers' collectives are traced in worker 0: one per replica and tensor.
        assert row["traced_all_reduces"][variant] > 0
    # Sync batch norm adds all-reduces to the gradient ones.
    assert row["traced_all_reduces"]["ours"] > row["traced_all_reduces"]["plain"]
    table = _table_rows(markdown, "Two worker processes")
    assert [r[0] for r in table[1:]] == [LABELS[VARIANTS.index(v)] for v in row["median_ms"]]


def test_floor_counts_match_the_layers_algorithms(quick_run):
    report, markdown, _ = quick_run
    floor = report["floor"]
    assert [p["replicas"] for p in floor["probes"]] == report["meta"]["floor_replicas"]
    for probe in floor["probes"]:
        k = probe["replicas"]
        layer = probe["per_layer"]
        # Keras: sum, sum of squares and count all-reduced forward (C floats each), the
        # gradients of sum and sum of squares backward: 5 all-reduces, 5C float32.
        assert layer["keras"]["all_reduces"] == 5
        assert layer["keras"]["bytes_per_channel"] == 5 * 4
        assert layer["keras"]["fixed_bytes"] == 0
        # Ours: one float64 sum of (count, sums, sums of squares) forward, 8 (2C + 1) bytes,
        # one float32 sum of (d_mean, d_variance) backward, 8C bytes.
        assert layer["ours"]["all_reduces"] == 2
        assert layer["ours"]["bytes_per_channel"] == 24 and layer["ours"]["fixed_bytes"] == 8
        # Gather path: every replica's packed per-channel row (4 floats per channel)
        # forward, the same backward.
        assert layer["ours_gather"]["all_reduces"] == 2
        row_floats = (layer["ours_gather"]["bytes_per_channel"] / 4 - 2) / k
        assert row_floats == 4, layer["ours_gather"]
        # Keras hands every gradient to one all-reduce call, which the strategy packs.
        assert probe["gradient_rule"]["tensors_per_variable"] == 1
        assert probe["gradient_rule"]["bytes_per_parameter"] == 4
        assert 1 <= probe["gradient_rule"]["collectives_per_step"] <= 2
        assert probe["collective_cost"]["latency_us"] > 0
        assert probe["collective_cost"]["bytes_per_s"] > 0

    probes = {p["replicas"]: p for p in floor["probes"]}
    for row in floor["rows"]:
        assert row["gradient"]["bytes"] == 4 * row["trainable_parameters"]
        assert (
            row["gradient"]["all_reduces"]
            == (probes[row["replicas"]]["gradient_rule"]["collectives_per_step"])
        )
        for variant, entry in row["batch_norm"].items():
            per_layer = probes[row["replicas"]]["per_layer"][variant]
            assert entry["all_reduces"] == per_layer["all_reduces"] * row["batch_norm_layers"]
            assert entry["bytes"] == (
                per_layer["bytes_per_channel"] * row["batch_norm_channels"]
                + per_layer["fixed_bytes"] * row["batch_norm_layers"]
            )
            assert entry["traced_total_agrees"] in (None, True), (row["model"], variant)
    table = _table_rows(markdown, "Analytic floor")
    assert any(r[0] == "ResNet-18" for r in table)


def test_scaling_model_extends_the_traced_bytes_to_256_replicas(quick_run):
    report, markdown, _ = quick_run
    scaling = report["floor"]["scaling"]
    # keras.applications.ResNet50: 53 batch norms over 26,560 channels, 25.6 M parameters.
    assert scaling["batch_norm_layers"] == 53
    assert scaling["batch_norm_channels"] == 26_560
    assert 25.5e6 < scaling["trainable_parameters"] < 25.7e6
    rows = scaling["rows"]
    assert [r["replicas"] for r in rows] == [2, 4, 8, 16, 32, 64, 128, 256]
    channels, layers = scaling["batch_norm_channels"], scaling["batch_norm_layers"]
    for fit in scaling["fits"].values():
        assert fit["exact"]
    for row in rows:
        k, bn = row["replicas"], row["batch_norm"]
        assert row["gradient_bytes"] == 4 * scaling["trainable_parameters"]
        assert bn["ours"]["bytes"] == pytest.approx(24 * channels + 8 * layers)
        assert bn["ours_gather"]["bytes"] == pytest.approx((16 * k + 8) * channels)
        assert bn["keras"]["bytes"] == pytest.approx(20 * channels)
        assert bn["ours"]["all_reduces"] == 2 * layers and bn["keras"]["all_reduces"] == 5 * layers
        for entry in bn.values():
            assert entry["over_gradient"] == pytest.approx(entry["bytes"] / row["gradient_bytes"])
    assert "### Batch-norm bytes per step from 2 to 256 replicas" in markdown


def test_targets_table_names_every_target(quick_run):
    _, markdown, _ = quick_run
    table = _table_rows(markdown, "Targets")
    targets = [row[0] for row in table[1:]]
    assert targets[0].startswith("forward bytes per layer constant")
    assert targets[1].startswith("added ops per layer")
    assert table[1][-1] == "**met**" and table[2][-1] == "**met**"
    assert any("first step" in t for t in targets)


def test_sections_flag_keeps_earlier_tables(quick_run, tmp_path):
    report, _, _ = quick_run
    (tmp_path / "sync_bn.json").write_text(json.dumps(report))
    result = _run_script("--quick", "--sections", "robustness", "--out", str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    again = json.loads((tmp_path / "sync_bn.json").read_text())
    markdown = (tmp_path / "sync_bn.md").read_text()
    assert again["meta"]["sections"] == ["robustness"]
    assert set(again["meta"]["kept_sections"]) == {
        "collectives",
        "step_time",
        "resnet",
        "multiworker",
        "floor",
    }
    assert again["collectives"] == report["collectives"]
    assert again["resnet_step_time"] == report["resnet_step_time"]
    assert [r["mean_over_std"] for r in again["robustness"]] == list(RATIOS)
    assert "kept from an earlier run" in markdown and "## Analytic floor" in markdown


@pytest.mark.parametrize("text", ["resnet,bogus", ""])
def test_unknown_section_fails_clearly(text):
    with pytest.raises(argparse.ArgumentTypeError, match="resnet,multiworker,floor"):
        sync_bn.parse_sections(text)
    assert sync_bn.parse_sections("floor,resnet") == ("resnet", "floor")


@pytest.mark.parametrize("text", ["0,2", "16", "two"])
def test_bad_replica_counts_fail_clearly(text):
    with pytest.raises(argparse.ArgumentTypeError, match="from 1 to 8"):
        sync_bn.parse_replicas(text)
    assert sync_bn.parse_replicas("4,1,2,2") == (1, 2, 4)


def test_resnet_models_choose_the_settings_a_child_process_times():
    with pytest.raises(argparse.ArgumentTypeError, match="ResNet-18, ResNet-50"):
        sync_bn.parse_resnet_models("ResNet-34")
    args = sync_bn.parse_args(["--resnet-models", "ResNet-50", "--replicas", "8"])
    config = sync_bn.run_config(args)
    assert [(r.name, r.replica_counts) for r in config.resnets] == [("ResNet-50", (8,))]
    assert args.isolate is None  # decided in main: on for full runs, off for --quick
