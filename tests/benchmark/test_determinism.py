"""`benchmark/determinism.py`: where a quick run writes, and the report it renders.

The runs themselves are `tfsim train` processes, covered by tests/cli/test_cli.py;
here the benchmark's report is checked on a made-up payload. Where a quick run writes
is `benchmark.common.output_folder`, tested in tests/benchmark/test_common.py.
"""

from __future__ import annotations

from benchmark import determinism


def test_report_gives_each_mode_its_median_and_the_ratio():
    def run(speed, losses):
        return {"images_per_second": speed, "seconds_per_epoch": 1.0, "losses": losses}

    payload = {
        "options": [],
        "quick": False,
        "repeats": 3,
        "machine": "x86_64, 2 CPU cores",
        "runs": {
            "--deterministic": [run(90.0, [1.0]), run(80.0, [1.0]), run(70.0, [1.0])],
            "--no-deterministic": [run(100.0, [1.0]), run(120.0, [1.5]), run(110.0, [1.0])],
        },
    }
    report = determinism.render(payload)
    assert "| --deterministic | 90.0, 80.0, 70.0 | 80.0 | yes |" in report
    assert "| --no-deterministic | 100.0, 120.0, 110.0 | 110.0 | no |" in report
    assert f"**{80 / 110:.2f}**" in report
