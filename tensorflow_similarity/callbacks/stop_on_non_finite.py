"""A callback that stops training with an error at the first non-finite loss or weight."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np


class TrainingDiverged(Exception):
    """Training produced a non-finite loss or weight.

    Raised by `StopOnNonFinite` as soon as it sees one, so that nothing of
    the diverged epoch is evaluated or saved by the callbacks after it.

    Args:
        what: What became non-finite, e.g. `"the loss became nan"`.
        epoch: The epoch it happened in, counted from 1.
        step: The step of that epoch, counted from 1, or `None` when it was
            found at the epoch's end.
        steps: The steps of an epoch, or `None` when unknown.
        learning_rate: The learning rate to report, or `None` when unknown.
        epochs_done: The epochs completed before it.
        advice: What to check, appended to the message. Defaults to `""`.
    """

    def __init__(
        self,
        what: str,
        epoch: int,
        step: int | None,
        steps: int | None,
        learning_rate: float | None,
        epochs_done: int,
        advice: str = "",
    ) -> None:
        self.what = what
        self.epoch = epoch
        self.step = step
        self.steps = steps
        self.learning_rate = learning_rate
        self.epochs_done = epochs_done
        self.advice = advice
        super().__init__(f"{what} {self.where}" + (f". {advice}" if advice else ""))

    @property
    def where(self) -> str:
        """When it happened, e.g. `at epoch 2, step 5 of 7`."""
        if self.step is None:
            return f"at the end of epoch {self.epoch}"
        if self.steps is None:
            return f"at epoch {self.epoch}, step {self.step}"
        return f"at epoch {self.epoch}, step {self.step} of {self.steps}"


@keras.saving.register_keras_serializable(package="Similarity")
class StopOnNonFinite(keras.callbacks.Callback):
    """Stops training at the first non-finite loss, or weight at an epoch's end.

    Keras' `TerminateOnNaN` stops silently; this one raises `TrainingDiverged`
    from `fit`, naming the epoch and step. The loss of each step is checked
    (a NaN or infinite loss stays in the epoch's running mean), and at each
    epoch's end the model's weights, moving batch-norm statistics included
    (they can overflow while the loss, of batch statistics, stays finite).
    Placed first among the callbacks, a diverged epoch is neither evaluated
    nor saved by the others. `SimilarityModel.fit` and `ContrastiveModel.fit`
    add one by default (`stop_on_non_finite=True`).

    Args:
        steps_per_epoch: Steps in an epoch, for the message. `None` (the
            default) takes the number `fit` reports, when it knows one.
        learning_rate: The learning rate, for the message. `None` (the
            default) reads the optimizer's at the time of the error.
        advice: Whether the message says what to check (the inputs for NaN
            or infinite values, the learning rate). Defaults to `True`.

    Raises:
        TrainingDiverged: From `fit`, with the epoch and step.

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from tensorflow_similarity.callbacks import StopOnNonFinite, TrainingDiverged
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> x = np.array([[1.0, np.nan], [0.0, 1.0]], "float32")
    >>> try:
    ...     model.fit(x, np.zeros(2), callbacks=[StopOnNonFinite()], verbose=0)
    ... except TrainingDiverged as error:
    ...     print(error.where)
    at epoch 1, step 1 of 1
    """

    def __init__(
        self,
        steps_per_epoch: int | None = None,
        learning_rate: float | None = None,
        advice: bool = True,
    ) -> None:
        super().__init__()
        self.steps_per_epoch = steps_per_epoch
        self.learning_rate = learning_rate
        self.advice = advice
        self.epoch = 0

    def get_config(self) -> dict[str, Any]:
        """The constructor's arguments."""
        return {
            "steps_per_epoch": self.steps_per_epoch,
            "learning_rate": self.learning_rate,
            "advice": self.advice,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> StopOnNonFinite:
        """Rebuilds the callback from `get_config`'s dictionary."""
        return cls(**config)

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.epoch = epoch

    def _learning_rate(self) -> float | None:
        if self.learning_rate is not None:
            return self.learning_rate
        try:
            return float(np.asarray(self.model.optimizer.learning_rate))
        except (AttributeError, TypeError, ValueError):
            return None

    def _diverged(self, what: str, step: int | None) -> TrainingDiverged:
        steps = self.steps_per_epoch
        if steps is None:
            steps = (self.params or {}).get("steps")
        learning_rate = self._learning_rate()
        advice = ""
        if self.advice:
            rate = f" (it is {learning_rate:g})" if learning_rate is not None else ""
            advice = (
                "Check the inputs for NaN or infinite values (one bad pixel is enough) and "
                f"lower the learning rate{rate}; pass stop_on_non_finite=False to fit to "
                "train on regardless"
            )
        return TrainingDiverged(
            what, self.epoch + 1, step, steps, learning_rate, self.epoch, advice=advice
        )

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        loss = (logs or {}).get("loss")
        if loss is not None and not np.isfinite(loss):
            raise self._diverged(f"the loss became {float(loss)}", batch + 1)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        loss = (logs or {}).get("loss")
        if loss is not None and not np.isfinite(loss):
            raise self._diverged(f"the loss became {float(loss)}", None)
        bad = [v.path for v in self.model.weights if not np.isfinite(np.asarray(v)).all()]
        if bad:
            raise self._diverged(
                f"{len(bad)} weight{'s' * (len(bad) > 1)} became nan or infinite "
                f"({', '.join(bad[:3])}{', ...' * (len(bad) > 3)})",
                None,
            )
