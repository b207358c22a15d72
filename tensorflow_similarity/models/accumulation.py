"""Gradient accumulation's input: `N` consecutive batches stacked into one element per step."""

from __future__ import annotations

import warnings
from typing import Any

import tensorflow as tf


def group_micro_batches(x: Any, steps: int, steps_per_epoch: int | None = None) -> Any:
    """Groups `steps` consecutive batches of a dataset into one element, batch axis first.

    Each element's tensors `[batch, ...]` become `[batch, steps, ...]`, so that
    a strategy splits every one of the `steps` batches among its replicas as
    it would split it alone; `split_micro_batches` takes them apart again.

    An optimizer step is one element, so it cannot span the dataset's end:
    when the dataset's number of batches is not a multiple of `steps`, its
    last `batches % steps` batches never train (each epoch, as Keras iterates
    the dataset anew each epoch, or once at the dataset's end with
    `steps_per_epoch`). A `UserWarning` names them, or says that a dataset of
    unknown length cannot be checked; a repeated dataset loses none.

    Batches of an unknown static size (`batch(b)` without `drop_remainder`)
    are taken as they come, as long as the `steps` batches of each step have
    one size, since they are stacked into one tensor; a step whose batches
    differ (a last, smaller batch) stops training with an `InvalidArgumentError`
    that names the fix.

    Args:
        x: A `tf.data.Dataset` of batches.
        steps: The batches of one optimizer step, at least 2.
        steps_per_epoch: `fit`'s `steps_per_epoch`, or `None`.

    Returns:
        The dataset of grouped batches.

    Raises:
        ValueError: If `x` is not a `tf.data.Dataset`, has fewer batches than
            `steps` (no optimizer step could be taken), or its tensors have
            different static batch sizes.
    """
    if not isinstance(x, tf.data.Dataset):
        raise ValueError(
            f"accumulation_steps={steps} takes its consecutive batches from a tf.data.Dataset; "
            f"got {type(x).__name__}. Pass tf.data.Dataset.from_tensor_slices(...).batch(b, "
            "drop_remainder=True)."
        )
    sizes = {spec.shape[0] for spec in tf.nest.flatten(x.element_spec)}
    if len(sizes - {None}) > 1:
        raise ValueError(
            f"accumulation_steps={steps} needs the tensors of a batch to share their batch "
            f"axis, but the dataset's elements have batch sizes {sorted(sizes, key=str)}."
        )
    _check_batch_count(int(x.cardinality()), steps, steps_per_epoch)

    def batch_axis_first(*element):
        element = element[0] if len(element) == 1 else element
        return tf.nest.map_structure(lambda t: tf.experimental.numpy.swapaxes(t, 0, 1), element)

    if None not in sizes:
        return x.batch(steps, drop_remainder=True).map(batch_axis_first)
    # Ragged, so that a step whose batches differ in size gets this error, not tf.data's.
    return x.ragged_batch(steps, drop_remainder=True).map(_one_size(steps)).map(batch_axis_first)


def _one_size(steps: int):
    def stack(*element):
        element = element[0] if len(element) == 1 else element
        sizes = tf.nest.flatten(element)[0].row_lengths()
        tf.debugging.assert_equal(
            sizes,
            sizes[0],
            message=(
                f"accumulation_steps={steps} stacks the {steps} batches of an optimizer step into "
                "one tensor, so that a strategy splits each of them as it would alone, and they "
                "must have one size; this step's batches differ (a last, smaller batch of the "
                "dataset). Batch the dataset with drop_remainder=True, or with a batch size "
                "that divides its number of samples. Batch sizes of the step"
            ),
        )
        return tf.nest.map_structure(lambda t: t.to_tensor(), element)

    return stack


def _check_batch_count(batches: int, steps: int, steps_per_epoch: int | None) -> None:
    """Refuses fewer batches than one step; warns about those an incomplete step leaves out."""
    if batches == tf.data.INFINITE_CARDINALITY:
        return
    if batches == tf.data.UNKNOWN_CARDINALITY:
        warnings.warn(
            f"The dataset's number of batches is unknown (after filter(), say), so "
            f"ContrastiveModel cannot check it against accumulation_steps={steps}: an "
            f"optimizer step takes {steps} batches, and when an epoch's batches are not a "
            f"multiple of {steps} its last (batches mod {steps}) never train. Declare the length "
            "with dataset.apply(tf.data.experimental.assert_cardinality(batches)) to have it "
            "checked, or repeat the dataset (dataset.repeat(), with steps_per_epoch).",
            UserWarning,
            stacklevel=4,
        )
        return
    if batches < steps:
        raise ValueError(
            f"The dataset has {batches} batches, fewer than accumulation_steps={steps}: an "
            f"optimizer step takes {steps} batches, so fit would take none. Use "
            f"accumulation_steps={batches} or fewer, smaller batches, or repeat the dataset "
            "(dataset.repeat(), with steps_per_epoch)."
        )
    left = batches % steps
    if not left:
        return
    which = f"batch {batches}" if left == 1 else f"batches {batches - left + 1} to {batches}"
    every_epoch = "" if steps_per_epoch else ", in every epoch"
    warnings.warn(
        f"The dataset has {batches} batches{'' if steps_per_epoch else ' per epoch'} and "
        f"accumulation_steps={steps}: fit takes {batches // steps} optimizer "
        f"step{'s' if batches // steps > 1 else ''} of {steps} batches from it, and the last "
        f"{left} batch{'es' if left > 1 else ''} ({which}) never "
        f"train{'s' if left == 1 else ''}{every_epoch}. An optimizer step runs its batches in one "
        "training step, so it cannot carry them into the next epoch as Keras' "
        f"gradient_accumulation_steps does. Give the dataset a multiple of {steps} batches, "
        "or repeat it (dataset.repeat(), with steps_per_epoch) so that steps run across its end.",
        UserWarning,
        stacklevel=4,
    )


def split_micro_batches(data: Any, steps: int) -> list[Any]:
    """Returns the `steps` batches of a `group_micro_batches` element (`[data]` for 1)."""
    if steps == 1:
        return [data]
    return [tf.nest.map_structure(lambda t, i=i: t[:, i], data) for i in range(steps)]
