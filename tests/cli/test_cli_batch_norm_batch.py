"""`tfsim pretrain` refuses batch norm over one image (a replica's, or a sync group's)."""

from __future__ import annotations

import pytest

from tensorflow_similarity.cli.errors import UsageError
from tensorflow_similarity.cli.pretrain import check_batch_norm_batch
from tests.cli.test_cli import QUICK, tfsim
from tests.cli.test_cli_lars import resolved


def _check(algorithm: str, batch: int, replicas: int, *sync: str) -> None:
    argv = ["pretrain", "--algorithm", algorithm, "--batch-size", str(batch), *sync]
    check_batch_norm_batch(resolved(argv), replicas)


@pytest.mark.parametrize(
    ("algorithm", "batch", "replicas", "sync", "remedy"),
    [
        ("byol", 2, 2, ["--no-sync-bn"], "Use --sync-bn"),
        ("dino", 2, 2, ["--no-sync-bn"], "Use --sync-bn"),
        ("simclr", 4, 4, ["--no-sync-bn"], "Use --sync-bn"),
        ("byol", 1, 1, [], "Use --batch-size 2 or more"),
        ("byol", 4, 4, ["--sync-bn", "--sync-group-size", "1"], "larger --sync-group-size"),
    ],
)
def test_one_image_per_batch_norm_is_refused(algorithm, batch, replicas, sync, remedy):
    with pytest.raises(UsageError, match=rf"gives batch norm one image at a time.*{remedy}"):
        _check(algorithm, batch, replicas, *sync)


@pytest.mark.parametrize(
    ("batch", "replicas", "sync"),
    [
        (2, 2, ["--sync-bn"]),  # Statistics over both replicas' images.
        (4, 4, ["--sync-bn", "--sync-group-size", "2"]),
        (4, 2, ["--no-sync-bn"]),  # Two images per replica.
    ],
)
def test_batch_norm_over_two_images_or_more_is_accepted(batch, replicas, sync):
    assert _check("byol", batch, replicas, *sync) is None  # No UsageError.


@pytest.mark.slow
def test_tfsim_refuses_before_training_with_a_usage_error(tmp_path):
    # In its own process: the test process's 8 logical CPUs cannot be split into 2 again.
    output = tmp_path / "byol"
    options = [*QUICK, "--batch-size", "2", "--replicas", "2", "--no-sync-bn"]

    result = tfsim(
        "pretrain", "--algorithm", "byol", *options, "--output", str(output), cwd=tmp_path
    )

    assert result.returncode == 2, result.stderr[-3000:]
    assert "tfsim: error: --batch-size 2 over 2 replica(s) gives batch norm one image" in (
        result.stderr
    )
    assert "kNN accuracy" not in result.stdout  # Nothing was measured or trained.
    assert not (output / "history.json").exists()
