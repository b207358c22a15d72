"""`benchmark.views_peer` without torch: its table and its argument checks.

The peer side needs a Python with torch and lightly (`--peer-python`); what is
tested here runs in the project's own.
"""

from __future__ import annotations

import pytest

from benchmark import views_peer


def payload(**changes):
    base = {
        "date": "2026-12-04",
        "machine": "x86_64, 2 CPU cores",
        "load_average": 1.5,
        "tensorflow": "2.21.0",
        "torch": "2.14.1",
        "peer": "lightly 1.6.0",
        "peer_name": "lightly",
        "peer_pipeline": "`SimCLRTransform`",
        "batch_size": 128,
        "batches": 4,
        "repeats": 3,
        "workers": 2,
        "cores": 2,
        "rows": [
            {"size": 32, "ours_images_per_s": 1500.0, "peer_images_per_s": 1000.0},
            {"size": 224, "ours_images_per_s": 40.0, "peer_images_per_s": 160.0},
        ],
    }
    return {**base, **changes}


def test_table_has_one_row_per_size_with_the_ratio():
    text = views_peer.render_markdown(payload())
    assert text.startswith("# SimCLR two views: ours against lightly 1.6.0")
    assert "| pixels | ours (images/s) | lightly (images/s) | ours / peer |" in text
    assert "| 32 | 1,500 | 1,000 | 1.50 |" in text
    assert "| 224 | 40 | 160 | 0.25 |" in text
    assert "medians of 3 runs" in text and "2 workers" in text and "2 cores" in text


def test_a_single_run_is_not_called_a_median():
    assert "one run" in views_peer.render_markdown(payload(repeats=1))


def test_peer_python_is_required(capsys):
    with pytest.raises(SystemExit):
        views_peer.parse_args([])
    assert "--peer-python is required" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [["--batch-size", "0"], ["--repeats", "0"], ["--cores", "0"], ["--sizes", "4"]],
)
def test_out_of_range_arguments_are_refused(argv):
    with pytest.raises(SystemExit):
        views_peer.parse_args(["--peer-python", "python", *argv])


def test_quick_run_is_small_and_peer_side_needs_no_peer_python():
    args = views_peer.parse_args(["--peer-python", "python", "--quick"])
    assert (args.sizes, args.batch_size, args.batches, args.repeats) == ([16], 8, 1, 1)
    assert views_peer.parse_args(["--peer-side", "--sizes", "32"]).peer_side


def test_blur_kernel_is_a_tenth_of_the_side_and_odd():
    assert [views_peer._blur_kernel_size(size) for size in (16, 32, 96, 224)] == [3, 3, 9, 23]
