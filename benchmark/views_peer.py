"""Our SimCLR two-view pipeline against lightly's `SimCLRTransform` in a PyTorch `DataLoader`.

The same question as `benchmark.views` (images per second made into two
views), asked of a peer on the same images, cores and batch size, in one run:

* ours: `view_batches` (the pipeline of `tfsim pretrain`) with
  `simclr_augmenter`, timed by `benchmark.views.pipeline_rate`, in this
  process;
* the peer: `lightly.transforms.SimCLRTransform` (`--peer lightly`; its
  defaults, which are SimCLR's: crop area `(0.08, 1)`, flip 0.5, jitter 0.8
  at strength 1, greyscale 0.2, blur p=0.5 with sigma `(0.1, 2)`, as ours;
  `normalize=None`, as ours does not normalize) applied per PIL image, or a
  `torchvision.transforms.v2` pipeline of the same transforms on uint8
  tensors (`--peer torchvision`, its blur kernel 10% of the side as ours),
  through a `DataLoader` with `--workers` worker processes, in a child
  process run by `--peer-python` (a virtualenv with torch, torchvision and
  lightly: this project's environment has no torch).

Both sides see `2 x --batch-size` random uint8 RGB images held in memory and
make `--batches` batches of two views of `--batch-size` images, timed from
the iterator's creation to the last batch, so each side pays its start once
(ours: instantiating the traced map function, about 0.3 s; the peer's:
starting its worker processes), as a training epoch does; the default 16
batches keep that start from outweighing the steady rate, which is what
a run of thousands of batches sees. The two are run in alternation,
`--repeats` times per size (the order swapped at each repeat), and each
figure is the median.

Threads: both processes are pinned to the first `--cores` CPUs
(`os.sched_setaffinity`) and run with `OMP_WAIT_POLICY=PASSIVE`. Ours: the
`map` of `view_batches` makes one parallel call per core of the machine
(`os.cpu_count()`), TensorFlow's thread pools take their default size (the
cores it may use). The peer: `--workers` `DataLoader` workers (PyTorch sets
one intra-op thread in each), `torch.set_num_threads(--cores)` in the child.

Results go to `<out>/views_peer.json` and `<out>/views_peer.md`.

Usage (from the repository root):

    python -m benchmark.views_peer --peer-python /tmp/peer/bin/python
    python -m benchmark.views_peer --peer-python /tmp/peer/bin/python --quick
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmark.common import REPO_ROOT, markdown_table, output_folder

PEERS = ("lightly", "torchvision")


def random_images(count: int, size: int, seed: int) -> np.ndarray:
    """`count` random uint8 RGB images of `size` x `size` pixels, as `benchmark.views` makes."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (count, size, size, 3), dtype=np.uint8)


def pin_cores(cores: int) -> None:
    """Runs this process on the first `cores` CPUs it may use."""
    available = sorted(os.sched_getaffinity(0))
    if cores > len(available):
        raise ValueError(f"--cores {cores}: only {len(available)} CPUs are available.")
    os.sched_setaffinity(0, available[:cores])


def _blur_kernel_size(size: int) -> int:
    """An odd kernel of about 10% of the side, as `image_ops.blur_kernel_size`."""
    return max(3, 2 * (int(0.1 * size) // 2) + 1)


def peer_rate(peer: str, size: int, batch_size: int, batches: int, workers: int, seed: int) -> dict:
    """Images per second made into two views by the peer; runs under `--peer-python`."""
    # Imported here: this module also runs in the project's Python, which has no torch.
    import torch
    from PIL import Image
    from torch.utils.data import DataLoader, Dataset

    images = random_images(2 * batch_size, size, seed)
    if peer == "lightly":
        import lightly
        from lightly.transforms import SimCLRTransform

        transform = SimCLRTransform(input_size=size, normalize=None)

        def views(image: np.ndarray):
            return transform(Image.fromarray(image))

        version = f"lightly {lightly.__version__}"
    else:
        import torchvision
        from torchvision.transforms import v2

        kernel = _blur_kernel_size(size)
        transform = v2.Compose(
            [
                v2.RandomResizedCrop(size, scale=(0.08, 1.0), antialias=True),
                v2.RandomHorizontalFlip(0.5),
                v2.RandomApply([v2.ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8),
                v2.RandomGrayscale(0.2),
                v2.RandomApply([v2.GaussianBlur(kernel, sigma=(0.1, 2.0))], p=0.5),
                v2.ToDtype(torch.float32, scale=True),
            ]
        )

        def views(image: np.ndarray):
            pixels = torch.from_numpy(image).permute(2, 0, 1)
            return transform(pixels), transform(pixels)

        version = f"torchvision {torchvision.__version__} transforms.v2"

    class Views(Dataset):
        def __len__(self) -> int:
            return batch_size * batches

        def __getitem__(self, index: int):
            return views(images[index % len(images)])

    loader = DataLoader(
        Views(), batch_size=batch_size, shuffle=True, num_workers=workers, drop_last=True
    )
    start = time.perf_counter()
    for _ in loader:
        pass
    rate = batches * batch_size / (time.perf_counter() - start)
    return {"images_per_s": rate, "peer": version, "torch": torch.__version__}


def run_peer(args: argparse.Namespace, size: int) -> dict:
    """One peer measurement, in a child process of `--peer-python`."""
    command = [
        str(args.peer_python),
        "-m",
        "benchmark.views_peer",
        "--peer-side",
        "--peer",
        args.peer,
        "--sizes",
        str(size),
        "--batch-size",
        str(args.batch_size),
        "--batches",
        str(args.batches),
        "--workers",
        str(args.workers),
        "--cores",
        str(args.cores),
        "--seed",
        str(args.seed),
    ]
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    result = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"the peer failed ({' '.join(command)}):\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def our_rate(args: argparse.Namespace, size: int) -> float:
    """Images per second made into two views by `view_batches` with `simclr_augmenter`."""
    # Imported here: the peer side runs this module in a Python without TensorFlow.
    from benchmark import views

    images = random_images(2 * args.batch_size, size, args.seed)
    return views.pipeline_rate(views.simclr_augmenter, images, args.batch_size, args.batches)


def render_markdown(payload: dict) -> str:
    """The table of a run: pixels, our images per second, the peer's, their ratio."""
    rows = [
        [
            row["size"],
            f"{row['ours_images_per_s']:,.0f}",
            f"{row['peer_images_per_s']:,.0f}",
            f"{row['ours_images_per_s'] / row['peer_images_per_s']:.2f}",
        ]
        for row in payload["rows"]
    ]
    repeats = payload["repeats"]
    return "\n".join(
        [
            f"# SimCLR two views: ours against {payload['peer']}",
            "",
            f"{payload['date']}, {payload['machine']}, load average "
            f"{payload['load_average']:.2f}; TensorFlow {payload['tensorflow']}, "
            f"torch {payload['torch']}, {payload['peer']}. Random uint8 RGB images in memory "
            f"({2 * payload['batch_size']} per size), {payload['batches']} batches of "
            f"{payload['batch_size']} images made into two views per run, timed from the "
            "iterator's creation to the last batch. Ours: `view_batches` with "
            f"`simclr_augmenter`. Peer: {payload['peer_pipeline']} in a `DataLoader` with "
            f"{payload['workers']} workers. Both pinned to {payload['cores']} cores, "
            "`OMP_WAIT_POLICY=PASSIVE`; "
            + ("one run" if repeats == 1 else f"medians of {repeats} runs")
            + ", the two sides alternated.",
            "",
            markdown_table(
                ["pixels", "ours (images/s)", f"{payload['peer_name']} (images/s)", "ours / peer"],
                rows,
            ),
            "",
        ]
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--peer-python", type=Path, default=None, help="a Python with torch, torchvision, lightly"
    )
    parser.add_argument("--peer", choices=PEERS, default="lightly")
    parser.add_argument("--quick", action="store_true", help="smoke run, into a temporary folder")
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 96, 224])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--batches", type=int, default=16, help="timed batches per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--workers", type=int, default=2, help="the peer's DataLoader workers")
    parser.add_argument("--cores", type=int, default=2, help="CPUs both sides are pinned to")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="defaults to benchmark/results")
    parser.add_argument("--peer-side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("batch_size", "batches", "repeats", "workers", "cores"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1.")
    if any(size < 8 for size in args.sizes):
        parser.error("--sizes must be at least 8 pixels.")
    if not args.peer_side and args.peer_python is None:
        parser.error("--peer-python is required: a Python with torch, torchvision and lightly.")
    if args.quick:
        args.sizes, args.batch_size, args.batches, args.repeats = [16], 8, 1, 1
    return args


def main(argv: Sequence[str] | None = None) -> Path | None:
    args = parse_args(argv)
    pin_cores(args.cores)
    if args.peer_side:
        import torch  # noqa: PLC0415 -- the peer side only

        torch.set_num_threads(args.cores)
        (size,) = args.sizes
        print(
            json.dumps(
                peer_rate(args.peer, size, args.batch_size, args.batches, args.workers, args.seed)
            )
        )
        return None
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    out = output_folder(args.out, args.quick, "views_peer")
    rows, peer = [], {}
    for size in args.sizes:
        ours, theirs = [], []
        for repeat in range(args.repeats):
            for side in ("ours", "peer") if repeat % 2 == 0 else ("peer", "ours"):
                if side == "ours":
                    ours.append(our_rate(args, size))
                else:
                    peer = run_peer(args, size)
                    theirs.append(peer["images_per_s"])
        row = {
            "size": size,
            "ours_images_per_s": statistics.median(ours),
            "peer_images_per_s": statistics.median(theirs),
            "ours_runs": ours,
            "peer_runs": theirs,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    import tensorflow as tf  # noqa: PLC0415 -- already loaded by `benchmark.views`

    payload = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "load_average": os.getloadavg()[0],
        "command": " ".join(["python", "-m", "benchmark.views_peer", *(argv or sys.argv[1:])]),
        "tensorflow": tf.__version__,
        "torch": peer["torch"],
        "peer": peer["peer"],
        "peer_name": args.peer,
        "peer_pipeline": (
            "`lightly.transforms.SimCLRTransform(input_size, normalize=None)` per PIL image"
            if args.peer == "lightly"
            else "`torchvision.transforms.v2` (crop, flip, jitter, grey, blur) per uint8 tensor"
        ),
        "quick": args.quick,
        "sizes": args.sizes,
        "batch_size": args.batch_size,
        "batches": args.batches,
        "repeats": args.repeats,
        "workers": args.workers,
        "cores": args.cores,
        "rows": rows,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "views_peer.json").write_text(json.dumps(payload, indent=2) + "\n")
    (out / "views_peer.md").write_text(render_markdown(payload))
    print(f"wrote {out / 'views_peer.json'} and {out / 'views_peer.md'}")
    return out


if __name__ == "__main__":
    main()
