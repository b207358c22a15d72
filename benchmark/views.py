"""Benchmark of the view augmenters: images per second through tf.data, and each transform.

For each augmenter (SimCLR, SimSiam, Barlow Twins, glyphs, DINO multi-crop)
at 32, 96 and 224 pixels:

1. Images per second made into two views by the pipeline `tfsim pretrain`
   feeds `fit` with (`tensorflow_similarity.cli.pretrain.view_batches`: one
   `map` call per batch of `--batch-size` images, one parallel call per
   core, two batches prefetched), from random uint8 RGB images held in
   memory (one channel for glyphs), each image's output its two views
   (DINO multi-crop: its two global views at the row's size and 8 local
   views of `local_size(size)` pixels, DINO's 96 at 224). Each augmenter
   but the glyphs' is measured both ways it can make views: image by image
   (its default on a CPU from 40 x 40 pixels) and on the batch (its way
   below that, and on a GPU or TPU), in alternation. Each figure is the
   median of `--repeats` runs of `--batches` batches, timed from the
   iterator's creation (after tracing) to the last batch. Beside them, 'in
   the step': the augmenter alone in a `tf.function` on a batch already in
   memory, as `ContrastiveModel(augmenter=...)` runs it in its training
   step.
2. Each transform on its own, milliseconds per batch of `--batch-size`
   images at each size, SimCLR's parameters, median of `--repeats` calls
   of a `tf.function` after a warm-up call: on the batch, each function of
   `tensorflow_similarity.augmenters.image_ops`; image by image, a SimCLR
   augmenter making one view with only the crop, then with the crop and one
   transform drawn for every image, the crop's time taken off.

Results go to `<out>/views.json` and `<out>/views.md`.

Usage (from the repository root):

    python -m benchmark.views            # full run, about 10 minutes on 2 busy cores
    python -m benchmark.views --quick    # smoke run (16 px, batch 8), into a temporary folder
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmark.common import markdown_table, output_folder  # noqa: E402
from tensorflow_similarity.augmenters import (  # noqa: E402
    GlyphAugmenter,
    MultiCropAugmenter,
    ViewAugmenter,
    barlow_augmenter,
    image_ops,
    multicrop_augmenter,
    simclr_augmenter,
    simsiam_augmenter,
)
from tensorflow_similarity.augmenters.image_ops import (  # noqa: E402
    blur_kernel_size,
)
from tensorflow_similarity.cli.pretrain import view_batches  # noqa: E402


def local_size(size: int) -> int:
    """The local views' side beside global views of `size` pixels: DINO's 96 at 224, else half."""
    return 96 if size == 224 else max(1, size // 2)


def dino_multicrop(size: int, seed: int | None = None) -> MultiCropAugmenter:
    """DINO's multi-crop views of `size`-pixel images: 2 global and 8 local views."""
    return multicrop_augmenter(size, local_size(size), seed=seed)


AUGMENTERS: dict[str, Callable[..., ViewAugmenter | MultiCropAugmenter]] = {
    "SimCLR": simclr_augmenter,
    "SimSiam": simsiam_augmenter,
    "Barlow Twins": barlow_augmenter,
    "glyphs": GlyphAugmenter,
    "DINO multi-crop": dino_multicrop,
}
# SimCLR's colour jitter at strength 1 (brightness, contrast, saturation, hue, probability).
JITTER = (0.8, 0.8, 0.8, 0.2, 0.8)
# SimCLR's transforms after the crop, each alone and drawn for every image (image by image).
EACH_IMAGE_TRANSFORMS = {
    "flip": {"flip_prob": 1.0},
    "color jitter": {"jitter_prob": 1.0},
    "grayscale": {"grayscale_prob": 1.0},
    "gaussian blur": {"blur_prob": 1.0},
    "solarize": {"solarize_prob": 1.0},
}
CROP_ONLY = {"flip_prob": 0.0, "jitter_prob": 0.0, "grayscale_prob": 0.0, "blur_prob": 0.0}


def random_images(count: int, size: int, channels: int, seed: int) -> np.ndarray:
    """`count` random uint8 images of `size` x `size` pixels."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (count, size, size, channels), dtype=np.uint8)


def pipeline_rate(
    factory: Callable[..., ViewAugmenter | MultiCropAugmenter],
    images: np.ndarray,
    batch_size: int,
    batches: int,
    each_image: bool | None = None,
) -> float:
    """Images per second turned into views by `view_batches`, from its first batch.

    `each_image` picks the augmenter's way (`None`: its default).

    Timed from the iterator's creation (the map function is traced before)
    to the last of `batches` batches. Timing only the batches after the first
    would count those made in parallel or prefetched meanwhile as free.
    """
    steps = len(images) // batch_size
    augmenter = factory(images.shape[1], seed=0)
    if each_image is not None:
        augmenter._each_image = each_image
    dataset = view_batches(
        images, augmenter, batch_size, seed=0, first_epoch=0, epochs=math.ceil(batches / steps)
    ).take(batches)
    gc.collect()
    start = time.perf_counter()
    for _ in dataset:
        pass
    return batches * batch_size / (time.perf_counter() - start)


def in_step_rate(
    factory: Callable[..., ViewAugmenter | MultiCropAugmenter],
    images: np.ndarray,
    batch_size: int,
    batches: int,
) -> float:
    """Images per second turned into views inside a compiled step, as with `augmenter=`.

    `ContrastiveModel(..., augmenter=...)` makes the views in its training
    step from a batch already on the device: here the augmenter alone in a
    `tf.function` on a device-resident batch, `batches` calls after one
    warm-up (tracing) call, each waited for.
    """
    augmenter = factory(images.shape[1], seed=0)
    batch = tf.constant(images[:batch_size])
    step = tf.function(lambda x, n: augmenter(x, step=n))
    tf.nest.map_structure(lambda t: t.numpy(), step(batch, tf.constant(0, tf.int64)))
    gc.collect()
    start = time.perf_counter()
    for n in range(batches):
        tf.nest.map_structure(lambda t: t.numpy(), step(batch, tf.constant(n, tf.int64)))
    return batches * batch_size / (time.perf_counter() - start)


def transforms(size: int) -> dict[str, Callable[[tf.Tensor, tf.Tensor], tf.Tensor]]:
    """Each transform of a SimCLR view at `size` pixels on the batch: `(images, seed) -> images`."""
    kernel = (blur_kernel_size(size), blur_kernel_size(size))
    return {
        "random_resized_crop": lambda x, s: image_ops.random_resized_crop(
            x, (size, size), (0.08, 1.0), (3 / 4, 4 / 3), s
        ),
        "random_flip_left_right": lambda x, s: image_ops.random_flip_left_right(x, 0.5, s),
        "random_color_jitter": lambda x, s: image_ops.random_color_jitter(x, *JITTER, s),
        "random_grayscale": lambda x, s: image_ops.random_grayscale(x, 0.2, s),
        "random_gaussian_blur": lambda x, s: image_ops.random_gaussian_blur(
            x, (0.1, 2.0), 0.5, s, kernel
        ),
        "random_solarize": lambda x, s: image_ops.random_solarize(x, 0.2, s),
    }


def _median_seconds(function: Callable[[], object], repeats: int) -> float:
    function()
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def transform_costs(size: int, batch_size: int, repeats: int, seed: int) -> dict:
    """Seconds per batch of each transform alone: on the batch, and image by image."""
    uint8_images = random_images(batch_size, size, 3, seed)
    images = tf.image.convert_image_dtype(uint8_images, tf.float32)
    op_seed = tf.constant([seed, 1], tf.int64)
    batched = {}
    for name, transform in transforms(size).items():
        function = tf.function(transform)
        batched[name] = _median_seconds(lambda f=function: f(images, op_seed).numpy(), repeats)

    def one_view(**overrides: float) -> float:
        augmenter = simclr_augmenter(size, seed=seed, **{**CROP_ONLY, **overrides})
        augmenter._each_image = True
        function = tf.function(lambda x: augmenter(x, step=1)[0])
        batch = tf.constant(uint8_images)
        return _median_seconds(lambda: function(batch).numpy(), repeats)

    crop = one_view()
    each_image = {"crop (uint8 in, float out)": crop}
    for name, overrides in EACH_IMAGE_TRANSFORMS.items():
        each_image[name] = max(0.0, one_view(**overrides) - crop)
    return {"size": size, "seconds": batched, "each_image_seconds": each_image}


def measure_pipelines(
    size: int, batch_size: int, batches: int, repeats: int, seed: int, names: Sequence[str]
) -> list[dict]:
    """One row per augmenter at `size`: images per second image by image and on the batch."""
    rows = []
    for name in names:
        channels = 1 if name == "glyphs" else 3
        images = random_images(2 * batch_size, size, channels, seed)
        ways = (None,) if name == "glyphs" else (True, False)
        rates: dict[bool | None, list[float]] = {way: [] for way in ways}
        in_step = []
        for repeat in range(repeats):
            in_step.append(in_step_rate(AUGMENTERS[name], images, batch_size, batches))
            for way in ways if repeat % 2 == 0 else ways[::-1]:
                rates[way].append(pipeline_rate(AUGMENTERS[name], images, batch_size, batches, way))
        row = {
            "augmenter": name,
            "size": size,
            "images_per_s": statistics.median(rates[ways[0]]),
            "batched_images_per_s": statistics.median(rates[False]) if False in rates else None,
            "in_step_images_per_s": statistics.median(in_step),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def render_markdown(payload: dict) -> str:
    sizes = payload["sizes"]
    pipelines = payload["pipelines"]
    costs = {row["size"]: row for row in payload["transforms"]}
    batch = payload["batch_size"]

    def rate(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}"

    def speedup(row: dict) -> str:
        batched = row.get("batched_images_per_s")
        return "-" if batched is None else f"{row['images_per_s'] / batched:.2f}"

    names = list(costs[sizes[0]]["seconds"])
    each_names = list(costs[sizes[0]].get("each_image_seconds", {}))
    return "\n".join(
        [
            "# Two-view augmenters: images per second",
            "",
            f"{payload['date']}, {payload['machine']}, load average "
            f"{payload['load_average']:.2f}, TensorFlow {payload['tensorflow']}. Random uint8 "
            f"images in memory, batches of {batch} through `view_batches` (the pipeline of "
            "`tfsim pretrain`: one `map` call per batch, one parallel call per core); each "
            "image's output is its two views (DINO multi-crop: 2 global views at the row's "
            "size and 8 local views at half of it, 96 pixels at 224). "
            + ("One run" if payload["repeats"] == 1 else f"Medians of {payload['repeats']} runs")
            + f" of {payload['batches']} batches each, timed from the "
            "iterator's creation (after tracing). "
            "'image by image': the augmenters' way on a CPU from 40 x 40 pixels; 'on the "
            "batch': their way below that and on a GPU or TPU, here on the CPU. 'in the "
            "step': the augmenter alone in a `tf.function` on a batch already in memory, as "
            "`ContrastiveModel(augmenter=...)` runs it inside its training step, its default "
            "way (on a CPU: image by image from 40 x 40 pixels, on the batch below).",
            "",
            "## Through tf.data (images per second)",
            "",
            markdown_table(
                ["augmenter", "pixels", "image by image", "on the batch", "ratio", "in the step"],
                [
                    [
                        row["augmenter"],
                        row["size"],
                        rate(row["images_per_s"]),
                        rate(row.get("batched_images_per_s")),
                        speedup(row),
                        rate(row.get("in_step_images_per_s")),
                    ]
                    for row in pipelines
                ],
            ),
            "",
            f"## Each transform alone (milliseconds per batch of {batch})",
            "",
            "On the batch: each `image_ops` function, SimCLR's parameters (a transform drawn "
            "for only some images is still computed for all).",
            "",
            markdown_table(
                ["transform", *(f"{size} px" for size in sizes)],
                [
                    [name, *(f"{1000 * costs[size]['seconds'][name]:,.1f}" for size in sizes)]
                    for name in names
                ],
            ),
            "",
            "Image by image: one SimCLR view of each image with only the crop, then the time "
            "one more transform adds when drawn for every image.",
            "",
            markdown_table(
                ["transform", *(f"{size} px" for size in sizes)],
                [
                    [
                        name,
                        *(
                            f"{1000 * costs[size]['each_image_seconds'][name]:,.1f}"
                            for size in sizes
                        ),
                    ]
                    for name in each_names
                ],
            ),
            "",
        ]
    )


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run, into a temporary folder")
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 96, 224])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--batches", type=int, default=6, help="timed batches per run")
    parser.add_argument("--repeats", type=int, default=1, help="runs per figure (median)")
    parser.add_argument("--augmenters", nargs="+", default=list(AUGMENTERS), choices=AUGMENTERS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="defaults to benchmark/results")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.batch_size, args.batches, args.repeats = [16], 8, 1, 1
    out = output_folder(args.out, args.quick, "views")

    payload = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "load_average": os.getloadavg()[0],
        "tensorflow": tf.__version__,
        "quick": args.quick,
        "sizes": args.sizes,
        "batch_size": args.batch_size,
        "batches": args.batches,
        "repeats": args.repeats,
        "pipelines": [],
        "transforms": [],
    }
    for size in args.sizes:
        payload["transforms"].append(
            transform_costs(size, args.batch_size, args.repeats, args.seed)
        )
        print(json.dumps(payload["transforms"][-1]), flush=True)
        payload["pipelines"] += measure_pipelines(
            size, args.batch_size, args.batches, args.repeats, args.seed, args.augmenters
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "views.json").write_text(json.dumps(payload, indent=2) + "\n")
    (out / "views.md").write_text(render_markdown(payload))
    print(f"wrote {out / 'views.json'} and {out / 'views.md'}")
    return out


if __name__ == "__main__":
    main()
