"""Benchmark of the view augmenters: images per second through tf.data, and each transform.

For each augmenter (SimCLR, SimSiam, Barlow Twins, glyphs, DINO multi-crop)
at 32, 96 and 224 pixels:

1. Images per second made into two views by the pipeline `tfsim pretrain`
   feeds `fit` with (`tensorflow_similarity.cli.pretrain.view_batches`: one
   `map` call per batch of `--batch-size` images, one parallel call per
   core, two batches prefetched), from random uint8 RGB images held in
   memory (one channel for glyphs), each image's output its two views
   (DINO multi-crop: its two global views at the row's size and 8 local
   views of `local_size(size)` pixels, DINO's 96 at 224).
   The SimCLR, SimSiam and Barlow rows are measured twice: with the
   package's transforms, and with the colour jitter and Gaussian blur as
   they were before they were batched (`_previous_color_jitter`,
   `_previous_gaussian_blur` here: an HSV round trip of the whole batch at
   each of the jitter's four positions, and the blur as one shifted slice
   per kernel tap). Each figure is the median of `--repeats` runs of
   `--batches` batches, timed from the iterator's creation (after tracing)
   to the last batch, the two variants measured in alternation.
2. Each transform of `tensorflow_similarity.augmenters.image_ops` on its
   own: milliseconds per batch of `--batch-size` images at each size, at
   SimCLR's parameters, median of `--repeats` calls of a `tf.function`
   after a warm-up call; the previous jitter and blur beside them, with the
   largest difference between their outputs on the same seed.

Results go to `<out>/views.json` and `<out>/views.md`.

Usage (from the repository root):

    python -m benchmark.views            # full run, about 10 minutes on 2 busy cores
    python -m benchmark.views --quick    # smoke run (16 px, batch 8), into a temporary folder
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
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
    _adjust_hue,
    _per_image,
    _sub_seed,
    _uniform,
    bernoulli_mask,
    blur_kernel_size,
    grayscale,
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
# The augmenters that use the colour jitter and the blur, measured before and after.
WITH_PREVIOUS = ("SimCLR", "SimSiam", "Barlow Twins")
# SimCLR's colour jitter at strength 1 (brightness, contrast, saturation, hue, probability).
JITTER = (0.8, 0.8, 0.8, 0.2, 0.8)


def _previous_color_jitter(
    images: tf.Tensor,
    brightness: float,
    contrast: float,
    saturation: float,
    hue: float,
    probability: float,
    seed: tf.Tensor,
) -> tf.Tensor:
    """`image_ops.random_color_jitter` before it was batched: an HSV round trip per position."""
    batch = tf.shape(images)[0]
    factors = tf.stack(
        [
            _uniform(_sub_seed(seed, 0), batch, max(0.0, 1.0 - brightness), 1.0 + brightness),
            _uniform(_sub_seed(seed, 1), batch, max(0.0, 1.0 - contrast), 1.0 + contrast),
            _uniform(_sub_seed(seed, 2), batch, max(0.0, 1.0 - saturation), 1.0 + saturation),
        ],
        axis=1,
    )
    hue_shift = _uniform(_sub_seed(seed, 3), batch, -hue, hue)
    apply = bernoulli_mask(batch, probability, _sub_seed(seed, 4))
    order = tf.argsort(_uniform(_sub_seed(seed, 5), batch, 0.0, 1.0, (4,)), axis=1)
    with_hue = images.shape[-1] != 1 and hue > 0
    for position in range(4):
        operation = order[:, position]
        factor = tf.gather(factors, tf.minimum(operation, 2), batch_dims=1)[:, None, None, None]
        luma = grayscale(images)
        mean_luma = tf.reduce_mean(luma, axis=[1, 2, 3], keepdims=True)
        target = _per_image(operation == 1, tf.broadcast_to(mean_luma, tf.shape(images)), luma)
        target = _per_image(operation == 0, tf.zeros_like(images), target)
        blended = tf.clip_by_value(factor * images + (1.0 - factor) * target, 0.0, 1.0)
        result = _per_image(apply & (operation < 3), blended, images)
        if with_hue:
            result = _per_image(apply & (operation == 3), _adjust_hue(images, hue_shift), result)
        images = result
    return images


def _previous_blur_axis(images: tf.Tensor, weights: tf.Tensor, axis: int) -> tf.Tensor:
    radius = (weights.shape[1] - 1) // 2
    if radius == 0:
        return images
    padding = [[0, 0]] * 4
    padding[axis] = [radius, radius]
    padded = tf.pad(images, padding, mode="REFLECT")
    size = [-1, -1, -1, -1]
    size[axis] = images.shape[axis]
    total = 0.0
    for offset in range(2 * radius + 1):
        begin = [0, 0, 0, 0]
        begin[axis] = offset
        total += weights[:, offset, None, None, None] * tf.slice(padded, begin, size)
    return total


def _previous_gaussian_blur(
    images: tf.Tensor,
    sigma: tuple[float, float],
    probability: float,
    seed: tf.Tensor,
    kernel_size: tuple[int, int] | None = None,
) -> tf.Tensor:
    """`image_ops.random_gaussian_blur` before it was batched: a shifted slice per tap."""
    height, width = images.shape[1], images.shape[2]
    if kernel_size is None:
        kernel_size = (blur_kernel_size(height), blur_kernel_size(width))
    batch = tf.shape(images)[0]
    std = _uniform(_sub_seed(seed, 0), batch, sigma[0], sigma[1])
    blurred = images
    for axis, size in ((1, kernel_size[0]), (2, kernel_size[1])):
        radius = (size - 1) // 2
        offsets = tf.range(-radius, radius + 1, dtype=tf.float32)
        weights = tf.exp(-0.5 * tf.square(offsets[None, :] / std[:, None]))
        weights /= tf.reduce_sum(weights, axis=1, keepdims=True)
        blurred = _previous_blur_axis(blurred, weights, axis)
    apply = bernoulli_mask(batch, probability, _sub_seed(seed, 1))
    return _per_image(apply, blurred, images)


@contextlib.contextmanager
def previous_transforms() -> Iterator[None]:
    """Within it, augmenters built and traced use the previous jitter and blur."""
    saved = image_ops.random_color_jitter, image_ops.random_gaussian_blur
    image_ops.random_color_jitter = _previous_color_jitter
    image_ops.random_gaussian_blur = _previous_gaussian_blur
    try:
        yield
    finally:
        image_ops.random_color_jitter, image_ops.random_gaussian_blur = saved


def random_images(count: int, size: int, channels: int, seed: int) -> np.ndarray:
    """`count` random uint8 images of `size` x `size` pixels."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (count, size, size, channels), dtype=np.uint8)


def pipeline_rate(
    factory: Callable[..., ViewAugmenter | MultiCropAugmenter],
    images: np.ndarray,
    batch_size: int,
    batches: int,
    previous: bool = False,
) -> float:
    """Images per second turned into views by `view_batches`, from its first batch.

    Timed from the iterator's creation (the map function is traced before)
    to the last of `batches` batches. Timing only the batches after the first
    would count those made in parallel or prefetched meanwhile as free.
    """
    steps = len(images) // batch_size
    with previous_transforms() if previous else contextlib.nullcontext():
        augmenter = factory(images.shape[1], seed=0)
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
    """Each transform of a SimCLR view at `size` pixels: `(images, seed) -> images`."""
    kernel = (blur_kernel_size(size), blur_kernel_size(size))
    return {
        "random_resized_crop": lambda x, s: image_ops.random_resized_crop(
            x, (size, size), (0.08, 1.0), (3 / 4, 4 / 3), s
        ),
        "random_flip_left_right": lambda x, s: image_ops.random_flip_left_right(x, 0.5, s),
        "random_color_jitter": lambda x, s: image_ops.random_color_jitter(x, *JITTER, s),
        "random_color_jitter (previous)": lambda x, s: _previous_color_jitter(x, *JITTER, s),
        "random_grayscale": lambda x, s: image_ops.random_grayscale(x, 0.2, s),
        "random_gaussian_blur": lambda x, s: image_ops.random_gaussian_blur(
            x, (0.1, 2.0), 0.5, s, kernel
        ),
        "random_gaussian_blur (previous)": lambda x, s: _previous_gaussian_blur(
            x, (0.1, 2.0), 0.5, s, kernel
        ),
        "random_solarize": lambda x, s: image_ops.random_solarize(x, 0.2, s),
    }


def transform_costs(size: int, batch_size: int, repeats: int, seed: int) -> dict:
    """Seconds per batch of each transform alone, and how far the previous ones' outputs are."""
    images = tf.image.convert_image_dtype(random_images(batch_size, size, 3, seed), tf.float32)
    op_seed = tf.constant([seed, 1], tf.int64)
    seconds, outputs = {}, {}
    for name, transform in transforms(size).items():
        function = tf.function(transform)
        outputs[name] = function(images, op_seed).numpy()
        times = []
        for _ in range(repeats):
            gc.collect()
            start = time.perf_counter()
            function(images, op_seed).numpy()
            times.append(time.perf_counter() - start)
        seconds[name] = statistics.median(times)
    differences = {
        name: float(np.abs(outputs[name] - outputs[f"{name} (previous)"]).max())
        for name in ("random_color_jitter", "random_gaussian_blur")
    }
    return {"size": size, "seconds": seconds, "max_abs_difference": differences}


def measure_pipelines(
    size: int, batch_size: int, batches: int, repeats: int, seed: int, names: Sequence[str]
) -> list[dict]:
    """One row per augmenter at `size`: images per second now, and with the previous transforms."""
    rows = []
    for name in names:
        channels = 1 if name == "glyphs" else 3
        images = random_images(2 * batch_size, size, channels, seed)
        variants = (False, True) if name in WITH_PREVIOUS else (False,)
        rates: dict[bool, list[float]] = {variant: [] for variant in variants}
        in_step = []
        for repeat in range(repeats):
            in_step.append(in_step_rate(AUGMENTERS[name], images, batch_size, batches))
            order = variants if repeat % 2 == 0 else variants[::-1]
            for previous in order:
                factory = AUGMENTERS[name]
                rates[previous].append(
                    pipeline_rate(factory, images, batch_size, batches, previous)
                )
        row = {
            "augmenter": name,
            "size": size,
            "images_per_s": statistics.median(rates[False]),
            "previous_images_per_s": statistics.median(rates[True]) if True in rates else None,
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
        previous = row["previous_images_per_s"]
        return "-" if previous is None else f"{row['images_per_s'] / previous:.2f}"

    names = list(costs[sizes[0]]["seconds"])
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
            "'previous': the colour jitter and blur before they were batched. 'in the step': "
            "the augmenter alone in a `tf.function` on a batch already in memory, as "
            "`ContrastiveModel(augmenter=...)` runs it inside its training step.",
            "",
            "## Through tf.data (images per second)",
            "",
            markdown_table(
                ["augmenter", "pixels", "now", "previous", "speed-up", "in the step"],
                [
                    [
                        row["augmenter"],
                        row["size"],
                        rate(row["images_per_s"]),
                        rate(row["previous_images_per_s"]),
                        speedup(row),
                        rate(row.get("in_step_images_per_s")),
                    ]
                    for row in pipelines
                ],
            ),
            "",
            f"## Each transform alone (milliseconds per batch of {batch})",
            "",
            "SimCLR's parameters; the largest difference between the outputs of a "
            "transform and its previous version on the same images and seed: "
            + "; ".join(
                f"{size} px: jitter "
                f"{costs[size]['max_abs_difference']['random_color_jitter']:.1e}, blur "
                f"{costs[size]['max_abs_difference']['random_gaussian_blur']:.1e}"
                for size in sizes
            )
            + ".",
            "",
            markdown_table(
                ["transform", *(f"{size} px" for size in sizes)],
                [
                    [name, *(f"{1000 * costs[size]['seconds'][name]:,.1f}" for size in sizes)]
                    for name in names
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
