"""How far from its reference `SyncBatchNormalization`'s "reduce" exchange stays exact.

The `"reduce"` exchange all-reduces float64 sums centred on a reference every
replica holds; its variance error grows as `1e-16 (|batch mean - reference| /
std)^2`. The first training step is centred on the moving mean, the next ones on
the previous step's global batch mean. This measures the relative error of the
batch variance on 2 replicas holding different, unequal parts of a batch (24 and
40 rows, 4 channels), against the float64 NumPy variance of the same values, for
batch means 1e2 ... 1e8 standard deviations from the moving mean, float32 and
float64 layers, steps 1 and 2, `"reduce"` and `"gather"`.

The moving mean is 0 and held there (`momentum=0`, reset before step 2): a fresh
layer, or one whose moving average lags the data (at the default momentum 0.99
it moves 1% of the way per step). The batch variance is then the moving
variance after the step. Worst channel; `null` where the data's float32 values
do not vary (their spacing exceeds the spread), so no relative error exists.

    python -m benchmark.sync_bn.reference_range
    # writes benchmark/results/sync_bn_reference_range.json and .md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

# benchmark.sync_bn.common sets TensorFlow's environment first; importing creates no
# TensorFlow context, so the logical devices can still be configured in `main`.
from benchmark.sync_bn.common import configure_devices  # isort: skip

import keras
import numpy as np
import tensorflow as tf

from benchmark.common import command_line, machine_record, markdown_table, output_folder
from tensorflow_similarity.layers import SyncBatchNormalization
from tensorflow_similarity.testing import mirrored_strategy, run_on_replicas

MODULE = "benchmark.sync_bn.reference_range"
NAME = "sync_bn_reference_range"
RATIOS = (1e2, 1e4, 1e6, 1e8)
DTYPES = ("float32", "float64")
EXCHANGES = ("reduce", "gather")
SIZES = (24, 40)
CHANNELS = 4


def measure(ratios: tuple[float, ...] = RATIOS, seed: int = 0) -> list[dict[str, Any]]:
    """One row per (dtype, exchange, mean / std ratio): the worst relative error of each step."""
    strategy = mirrored_strategy(len(SIZES))
    stds = np.logspace(0, 1, CHANNELS)
    rng = np.random.default_rng(seed)
    rows = []
    for dtype in DTYPES:
        for ratio in ratios:
            batches = [
                (ratio * stds + stds * rng.standard_normal((sum(SIZES), CHANNELS))).astype(dtype)
                for _ in range(2)
            ]
            references = [b.astype("float64").var(axis=0) for b in batches]
            for exchange in EXCHANGES:
                with strategy.scope():
                    layer = SyncBatchNormalization(momentum=0.0, dtype=dtype, exchange=exchange)
                    layer.build((None, CHANNELS))
                errors = []
                for batch, reference in zip(batches, references, strict=True):
                    layer.moving_mean.assign(np.zeros(CHANNELS, dtype))
                    run_on_replicas(
                        lambda x, layer=layer: layer(x, training=True),
                        batch,
                        SIZES,
                        strategy=strategy,
                    )
                    got = layer.moving_variance.numpy().astype("float64")
                    varies = reference > 0
                    errors.append(
                        float(np.max(np.abs(got - reference)[varies] / reference[varies]))
                        if varies.all()
                        else None
                    )
                rows.append(
                    {
                        "dtype": dtype,
                        "exchange": exchange,
                        "mean_over_std": ratio,
                        "step_1": errors[0],
                        "step_2": errors[1],
                    }
                )
    return rows


def render_markdown(payload: dict[str, Any]) -> str:
    def cell(error: float | None) -> str:
        return "n/a (no spread in the data)" if error is None else f"{error:.1e}"

    lines = [
        '# SyncBatchNormalization: the "reduce" exchange\'s exact range',
        "",
        f"{payload['date']}, {payload['machine']}, TensorFlow {payload['tensorflow']}. "
        f"Relative error of the batch variance (worst of {CHANNELS} channels) on "
        f"{len(SIZES)} replicas holding {' and '.join(map(str, SIZES))} rows, against "
        "float64 NumPy, the moving mean held at 0: step 1 is centred on it, step 2 "
        '(`"reduce"`) on step 1\'s global batch mean.',
        "",
        markdown_table(
            ["dtype", "exchange", "batch mean / std", "step 1", "step 2"],
            [
                [
                    row["dtype"],
                    f"`{row['exchange']}`",
                    f"{row['mean_over_std']:.0e}",
                    cell(row["step_1"]),
                    cell(row["step_2"]),
                ]
                for row in payload["rows"]
            ],
        ),
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two ratios, into a temporary folder")
    parser.add_argument("--out", type=Path, default=None, help="defaults to benchmark/results")
    args = parser.parse_args()
    configure_devices("cpu", 0)
    ratios = RATIOS[::3] if args.quick else RATIOS
    payload = {
        **machine_record(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "command": command_line(MODULE, ["--quick"] if args.quick else []),
        "quick": args.quick,
        "rows": measure(ratios),
    }
    out = output_folder(args.out, args.quick, NAME)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{NAME}.json").write_text(json.dumps(payload, indent=2) + "\n")
    (out / f"{NAME}.md").write_text(render_markdown(payload))
    print(render_markdown(payload))
    print(f"wrote {out / f'{NAME}.json'} and {out / f'{NAME}.md'}")


if __name__ == "__main__":
    main()
