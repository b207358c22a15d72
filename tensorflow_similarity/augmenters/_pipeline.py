"""Views from drawn parameters: on the batch at once, or image by image.

The augmenters draw every random parameter of a call for the whole batch
(`ViewDraws`, through `view_draws`' functions), then `make_views`
applies them. Two ways give the same views:

- on the batch: each transform runs once over every view (`image_ops`'
  batch functions), computing a transform for all images and keeping it
  where drawn. Few, large ops: what an accelerator wants.
- image by image: a `tf.map_fn` over the views runs each view's transforms
  one after another on that image only, and skips those not drawn. A view
  stays in the processor's cache from its crop to its last transform, where
  each batch op would stream the whole batch through memory again: the
  faster way on a CPU (`benchmark/views.py` measures both).

`make_views` takes the second on a CPU (a `tf.data` pipeline, or a step
placed on one) for views of at least `EACH_IMAGE_MIN_PIXELS` pixels, and the
first for smaller views (whose batch fits in the cache anyway) and wherever
the images are placed on a GPU or TPU.
The hue shift is TensorFlow's fused `adjust_hue` image by image and an HSV
round trip of the batch otherwise: the two differ by float32 rounding (a few
1e-6). Every other transform computes the same formula either way, some
with their sums in another order (the luma, the mean luma as the luma of the
mean colour).
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from tensorflow_similarity.augmenters import image_ops, view_draws
from tensorflow_similarity.augmenters._inputs import to_float32

# Views made at once by `tf.map_fn`; each holds a few copies of one view.
_PARALLEL_VIEWS = 4
# The smallest view, in pixels, made image by image on a CPU: below it the
# per-op cost of each view outweighs what the cache saves
# (`benchmark/views.py` measures both ways).
EACH_IMAGE_MIN_PIXELS = 40 * 40


@dataclasses.dataclass(frozen=True)
class ViewDraws:
    """The per-view random parameters of a call; `None` leaves a transform out.

    Attributes:
        boxes: `[n, 4]` crop boxes (`view_draws.crop_boxes`).
        source: `[n]` int32 index of the image each view is cropped from.
        flip: `[n]` bool: mirror the view.
        jitter: Colour jitter draws (`view_draws.draw_color_jitter`).
        grayscale: `[n]` bool: replace the view by its luma.
        blur: `([n] standard deviations, [n] bool)`
            (`view_draws.draw_gaussian_blur`).
        solarize: `[n]` bool: solarise the view.
    """

    boxes: tf.Tensor
    source: tf.Tensor
    flip: tf.Tensor | None = None
    jitter: view_draws.JitterDraws | None = None
    grayscale: tf.Tensor | None = None
    blur: tuple[tf.Tensor, tf.Tensor] | None = None
    solarize: tf.Tensor | None = None


def concat_draws(parts: list[ViewDraws]) -> ViewDraws:
    """One `ViewDraws` for the views of `parts`, in order; all draw the same transforms."""
    fields = [field.name for field in dataclasses.fields(ViewDraws)]
    values = {}
    for name in fields:
        drawn = [getattr(part, name) for part in parts]
        if all(value is None for value in drawn):
            values[name] = None
        elif any(value is None for value in drawn):
            raise ValueError(f"concat_draws: {name} is drawn for some parts only.")
        elif isinstance(drawn[0], tuple):
            columns = [tf.concat(list(c), axis=0) for c in zip(*drawn, strict=True)]
            values[name] = view_draws.JitterDraws(*columns) if name == "jitter" else tuple(columns)
        else:
            values[name] = tf.concat(drawn, axis=0)
    return ViewDraws(**values)


def on_accelerator(images: tf.Tensor) -> bool:
    """Whether `images`, or ops made here, are placed on a GPU or TPU."""
    device = images.device or ""
    if not tf.executing_eagerly():
        device += tf.zeros([]).device or ""
    device = device.upper()
    return "GPU" in device or "TPU" in device


def make_views(
    images: tf.Tensor,
    draws: ViewDraws,
    size: tuple[int, int],
    kernel_size: tuple[int, int],
    *,
    with_hue: bool,
    each_image: bool | None = None,
) -> tf.Tensor:
    """The views `draws` describes, `[n, size[0], size[1], channels]` float32 in `[0, 1]`.

    Args:
        images: `[batch, height, width, channels]` images, float in `[0, 1]`
            or integers (rescaled by their dtype's maximum).
        draws: One entry per view.
        size: The views' `(height, width)`.
        kernel_size: The blur's `(height, width)` kernel sizes.
        with_hue: Whether the jitter shifts hue.
        each_image: `True` image by image, `False` on the batch. Defaults to
            `None`: image by image for views of at least
            `EACH_IMAGE_MIN_PIXELS` pixels, unless the images are on a GPU or
            TPU.

    Returns:
        The views, in the order of `draws`.
    """
    if each_image is None:
        each_image = size[0] * size[1] >= EACH_IMAGE_MIN_PIXELS and not on_accelerator(images)
    if each_image:
        return _views_each(images, draws, size, kernel_size, with_hue)
    return _views_batched(images, draws, size, kernel_size, with_hue)


def _views_batched(
    images: tf.Tensor,
    draws: ViewDraws,
    size: tuple[int, int],
    kernel_size: tuple[int, int],
    with_hue: bool,
) -> tf.Tensor:
    x = image_ops.crop_to_boxes(to_float32(images), draws.boxes, size, draws.source)
    if draws.flip is not None:
        x = image_ops._per_image(draws.flip, tf.reverse(x, axis=[2]), x)
    if draws.jitter is not None:
        x = image_ops.color_jitter(x, draws.jitter, with_hue=with_hue)
    if draws.grayscale is not None:
        x = image_ops._per_image(draws.grayscale, image_ops.grayscale(x), x)
    if draws.blur is not None:
        std, apply = draws.blur
        x = image_ops._per_image(apply, image_ops.gaussian_blur(x, std, kernel_size), x)
    if draws.solarize is not None:
        x = image_ops._per_image(draws.solarize, image_ops.solarize(x), x)
    return x


def _blend(image: tf.Tensor, factor: tf.Tensor, target: tf.Tensor | float) -> tf.Tensor:
    return tf.clip_by_value(factor * image + (1.0 - factor) * target, 0.0, 1.0)


def _luma(image: tf.Tensor) -> tf.Tensor:
    """`[height, width, 1]` luma of one image: channel slices, much faster than a reduction."""
    if image.shape[-1] == 1:
        return image
    red, green, blue = image_ops.LUMA_WEIGHTS
    return image[..., :1] * red + image[..., 1:2] * green + image[..., 2:] * blue


def _mean_luma(image: tf.Tensor) -> tf.Tensor:
    """The mean of `_luma(image)`, as the luma of the mean colour."""
    means = tf.reduce_mean(image, axis=[0, 1])
    if image.shape[-1] == 1:
        return means[0]
    return tf.tensordot(means, tf.constant(image_ops.LUMA_WEIGHTS, image.dtype), 1)


def _jitter_one(
    image: tf.Tensor, factors: tf.Tensor, hue_shift: tf.Tensor, order: tf.Tensor, with_hue: bool
) -> tf.Tensor:
    """One image's colour jitter, its four operations in its own order."""
    with_hue = with_hue and image.shape[-1] == 3
    for position in range(4):

        def operations(x: tf.Tensor = image) -> list:
            return [
                lambda: _blend(x, factors[0], 0.0),
                lambda: _blend(x, factors[1], _mean_luma(x)),
                lambda: _blend(x, factors[2], _luma(x)),
                (lambda: tf.clip_by_value(tf.image.adjust_hue(x, hue_shift), 0.0, 1.0))
                if with_hue
                else (lambda: x),
            ]

        image = tf.switch_case(order[position], operations())
    return image


def _solarize_one(image: tf.Tensor) -> tf.Tensor:
    # `image_ops.solarize` at its threshold 0.5, exactly, on values in [0, 1]:
    # `1 - v` is exact for `v >= 0.5`, and the smaller of `v` and `1 - v`.
    return tf.minimum(image, 1.0 - image)


def _blur_kernels(
    std: tf.Tensor, kernel_size: tuple[int, int], channels: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """Every view's depthwise kernels `[n, kh, 1, channels, 1]` and `[n, 1, kw, channels, 1]`.

    Computed for all views at once, as `image_ops.gaussian_blur` computes them
    (a kernel of size 1 is the single weight 1: no blur along that axis).
    """
    kernels = []
    for axis, size in ((1, kernel_size[0]), (2, kernel_size[1])):
        weights = image_ops.gaussian_weights(std, size)
        shape = [-1, size, 1, 1, 1] if axis == 1 else [-1, 1, size, 1, 1]
        kernels.append(tf.tile(tf.reshape(weights, shape), [1, 1, 1, channels, 1]))
    return kernels[0], kernels[1]


def _blur_one(image: tf.Tensor, kernels: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
    """`image_ops.gaussian_blur` of one `[height, width, channels]` image."""
    x = image[None]
    for axis, kernel in zip((1, 2), kernels, strict=True):
        if kernel.shape[axis - 1] == 1:
            continue
        radius = (kernel.shape[axis - 1] - 1) // 2
        padding = [[0, 0]] * 4
        padding[axis] = [radius, radius]
        x = tf.nn.depthwise_conv2d(
            tf.pad(x, padding, mode="REFLECT"), kernel, [1, 1, 1, 1], "VALID"
        )
    return tf.clip_by_value(x[0], 0.0, 1.0)


def _views_each(
    images: tf.Tensor,
    draws: ViewDraws,
    size: tuple[int, int],
    kernel_size: tuple[int, int],
    with_hue: bool,
) -> tf.Tensor:
    elements = {"source": draws.source, "box": draws.boxes}
    optional = {
        "flip": draws.flip,
        "gray": draws.grayscale,
        "solarize": draws.solarize,
        "jitter": draws.jitter,
        "blur": None
        if draws.blur is None
        else (
            _blur_kernels(draws.blur[0], kernel_size, images.shape[-1]),
            draws.blur[1],
        ),
    }
    elements.update({key: value for key, value in optional.items() if value is not None})
    # Eagerly, `tf.map_fn` would run its function once per view in Python.
    map_views = _map_views_graph if tf.executing_eagerly() else _map_views
    return map_views(images, elements, tuple(size), tuple(kernel_size), with_hue)


def _map_views(
    images: tf.Tensor,
    elements: dict,
    size: tuple[int, int],
    kernel_size: tuple[int, int],
    with_hue: bool,
) -> tf.Tensor:
    channels = images.shape[-1]
    # Converted and padded once for every view of the call; each view's crop
    # then reads only the pixels it samples.
    padded = image_ops.pad_for_crop(to_float32(images))

    def one(element: dict) -> tf.Tensor:
        box, source = element["box"][None], element["source"][None]
        x = image_ops.crop_padded(padded, box, size, source)[0]

        def when(mask: tf.Tensor, transform, x: tf.Tensor) -> tf.Tensor:
            result = tf.cond(mask, lambda: transform(x), lambda: x)
            result.set_shape(x.shape)
            return result

        if "flip" in element:
            x = when(element["flip"], lambda v: tf.reverse(v, axis=[1]), x)
        if "jitter" in element:
            factors, hue_shift, apply, order = element["jitter"]
            x = when(apply, lambda v: _jitter_one(v, factors, hue_shift, order, with_hue), x)
        if "gray" in element:
            x = when(element["gray"], lambda v: tf.broadcast_to(_luma(v), tf.shape(v)), x)
        if "blur" in element:
            kernels, apply = element["blur"]
            x = when(apply, lambda v: _blur_one(v, kernels), x)
        if "solarize" in element:
            x = when(element["solarize"], _solarize_one, x)
        return x

    return tf.map_fn(
        one,
        elements,
        fn_output_signature=tf.TensorSpec([*size, channels], tf.float32),
        parallel_iterations=_PARALLEL_VIEWS,
    )


_map_views_graph = tf.function(_map_views)
