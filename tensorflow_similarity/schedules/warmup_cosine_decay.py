"""`WarmupCosineDecay`: a linear warm-up from 0, then Keras' cosine decay."""

from __future__ import annotations

from typing import Any

import keras

from tensorflow_similarity._validation import check_int, check_number


@keras.saving.register_keras_serializable(package="Similarity")
class WarmupCosineDecay(keras.optimizers.schedules.CosineDecay):
    """A learning rate that rises linearly from 0 for `warmup_steps`, then decays along a cosine.

    At optimizer step `t` (clipped to `total_steps`), with `w = warmup_steps`,
    `d = total_steps - warmup_steps` and `m = max_learning_rate`:

    - `t < w`: `m * t / w`;
    - otherwise: `m * ((1 - alpha) * 0.5 * (1 + cos(pi * (t - w) / d)) + alpha)`,

    so the rate peaks at `m` at step `w` and ends at `alpha * m` from step
    `total_steps` on (SGDR, Loshchilov & Hutter, https://arxiv.org/abs/1608.03983,
    without restarts). This is Keras 3's `CosineDecay` with
    `initial_learning_rate=0`, `warmup_target=max_learning_rate`,
    `warmup_steps=warmup_steps` and `decay_steps=total_steps - warmup_steps`,
    under 0.17's arguments; its values are 0.17's.

    Args:
        max_learning_rate: The learning rate reached at the end of the warm-up.
        total_steps: Number of steps of warm-up and decay together; from then on
            the rate stays at `alpha * max_learning_rate`.
        warmup_steps: Number of warm-up steps, at least 0 and less than
            `total_steps`.
        alpha: The final learning rate as a fraction of `max_learning_rate`.
            Defaults to 0.0.
        name: Name scope of the schedule's ops, or `None`
            (`"WarmupCosineDecay"`). Defaults to `None`.

    Returns:
        Called with a step, a float32 scalar tensor: the learning rate.

    Raises:
        ValueError: If `warmup_steps >= total_steps`, a step count is not a
            non-negative integer, `max_learning_rate` is not a finite number
            or `alpha` is not in `[0, 1]`.

    Example:

    >>> import keras
    >>> from tensorflow_similarity.schedules import WarmupCosineDecay
    >>> schedule = WarmupCosineDecay(0.1, total_steps=100, warmup_steps=10)
    >>> float(schedule(5)), float(schedule(10)), float(schedule(100))
    (0.05000000074505806, 0.10000000149011612, 0.0)
    >>> optimizer = keras.optimizers.SGD(learning_rate=schedule)
    """

    def __init__(
        self,
        max_learning_rate: float,
        total_steps: int,
        warmup_steps: int,
        alpha: float = 0.0,
        name: str | None = None,
    ) -> None:
        owner = type(self).__name__
        check_number("max_learning_rate", max_learning_rate, owner=owner)
        check_int("total_steps", total_steps, minimum=1, owner=owner)
        check_int("warmup_steps", warmup_steps, minimum=0, owner=owner)
        check_number("alpha", alpha, low=0.0, high=1.0, owner=owner)
        if warmup_steps >= total_steps:
            raise ValueError(
                f"{owner}: warmup_steps must be less than the total steps (warmup_steps="
                f"{warmup_steps}, total_steps={total_steps}, which count the warm-up and the "
                "decay together). Raise total_steps or lower warmup_steps."
            )
        super().__init__(
            initial_learning_rate=0.0,
            decay_steps=int(total_steps) - int(warmup_steps),
            alpha=alpha,
            name=name or owner,
            warmup_target=max_learning_rate,
            warmup_steps=int(warmup_steps),
        )
        self.max_learning_rate = float(max_learning_rate)
        self.total_steps = int(total_steps)
        # Kept as given: `name` is None in the config when it was None here.
        self._given_name = name

    def get_config(self) -> dict[str, Any]:
        return {
            "max_learning_rate": self.max_learning_rate,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "alpha": self.alpha,
            "name": self._given_name,
        }
