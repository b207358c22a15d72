"""`LARS`: momentum SGD with a layer-wise trust ratio (You et al., 2017)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
from keras import ops

from tensorflow_similarity._validation import check_number

#: The default exclusion rule's name: batch norm's `gamma` and `beta`, and every bias.
BIAS_AND_NORM = "bias_and_norm"
_NORM_AND_BIAS_LEAVES = ("bias", "gamma", "beta")


def _variable_path(variable: Any) -> str:
    """A Keras variable's path (`"dense/kernel"`); a `tf.Variable`'s name without `:0`."""
    path = getattr(variable, "path", None) or variable.name
    return path.split(":")[0]


def is_bias_or_norm(variable: Any) -> bool:
    """The default exclusion rule: rank at most 1, or a path ending in `bias`, `gamma` or `beta`.

    The rank catches every bias and every normalisation layer's scale and
    offset whatever their names (batch, layer and group norm over one axis);
    the names catch the same parameters when they have more than one axis
    (batch norm over several axes, a convolution's bias with a custom shape).

    Args:
        variable: A Keras (or TensorFlow) variable.

    Returns:
        Whether `LARS` leaves `variable` out of weight decay and trust-ratio adaptation.
    """
    leaf = _variable_path(variable).rsplit("/", 1)[-1]
    return len(variable.shape) <= 1 or leaf in _NORM_AND_BIAS_LEAVES


@keras.saving.register_keras_serializable(package="Similarity")
class LARS(keras.optimizers.Optimizer):
    """Momentum SGD whose step for each variable is scaled by its trust ratio (LARS).

    For each variable `w` with gradient `g`, learning rate `lr`, weight decay
    `wd` and trust coefficient `eta` (You, Gitman & Ginsburg, "Large Batch
    Training of Convolutional Networks", https://arxiv.org/abs/1708.03888):

    - `d = g + wd * w` (weight decay inside the update, not decoupled);
    - `trust = eta * ||w|| / (||g|| + wd * ||w||)`, and `trust = 1` when
      `||w||` or `||g||` is 0;
    - `v = momentum * v - lr * trust * d; w = w + v` (heavy-ball momentum,
      Keras' `SGD` convention; Nesterov momentum is not offered), or
      `w = w - lr * trust * d` when `momentum` is 0.

    A variable that `exclude` selects gets neither weight decay nor adaptation
    (`d = g`, `trust = 1`): plain momentum SGD, as SimCLR, BYOL and Barlow Twins
    train batch norm's `gamma` and `beta` and the biases. With `eta=None` no
    variable is adapted (`trust = 1` throughout) and LARS is momentum SGD with
    weight decay `wd` on the variables not excluded.

    Norms are of the whole variable. Keras calls `update_step` with
    gradients already summed over replicas, so under `MirroredStrategy` and
    `MultiWorkerMirroredStrategy` the norms, and the update, are the one-device
    ones. Weight decay is this optimizer's own: Keras' `weight_decay` machinery
    (decoupled, applied before the step) is left off, so decay is never applied
    twice. Wrap it in `keras.mixed_precision.LossScaleOptimizer` for loss
    scaling: the gradients reach LARS unscaled.

    Args:
        learning_rate: A float >= 0, a `keras.optimizers.schedules.LearningRateSchedule`
            or a callable of no arguments. See `scaled_learning_rate` for the
            rate at a global batch. Defaults to 0.1.
        momentum: The momentum, in `[0, 1]`; 0 keeps no momentum buffer.
            Defaults to 0.9.
        weight_decay: The L2 weight decay `wd`, >= 0, added to the gradient of
            each variable not excluded. Defaults to 0.0.
        eta: The trust coefficient, > 0, or `None` to turn adaptation off.
            Defaults to 0.001.
        exclude: Which variables get neither weight decay nor adaptation:
            `"bias_and_norm"` (variables of rank at most 1, or whose path ends in
            `bias`, `gamma` or `beta`; see `is_bias_or_norm`), a list of strings
            (a variable is excluded when one of them is a substring of its path,
            e.g. `["bias", "batch_normalization"]`; `[]` excludes nothing), or a
            callable taking a variable and returning a bool. A callable is used
            as given and cannot be saved: `get_config` raises, so pass names to
            save the optimizer with a model. Defaults to `"bias_and_norm"`.
        name: The optimizer's name, or `None` for an automatic one. Defaults to `None`.
        **kwargs: Keras' other optimizer arguments (`clipnorm`, `clipvalue`,
            `global_clipnorm`, `use_ema`, `ema_momentum`, `ema_overwrite_frequency`,
            `loss_scale_factor`, `gradient_accumulation_steps`).

    Raises:
        ValueError: If `learning_rate`, `momentum` or `weight_decay` is negative
            or not a finite number, `momentum` exceeds 1, `eta` is neither `None`
            nor a positive number, or `exclude` is not one of the kinds above.

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from tensorflow_similarity.optimizers import LARS, scaled_learning_rate
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    >>> lr = scaled_learning_rate(0.3, global_batch_size=512)
    >>> model.compile(optimizer=LARS(lr, weight_decay=1e-6), loss="mse")
    >>> history = model.fit(np.ones((8, 4)), np.zeros((8, 2)), verbose=0)
    >>> lr, model.optimizer.excluded(model.layers[0].bias)
    (0.6, True)
    """

    def __init__(
        self,
        learning_rate: float | Any = 0.1,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        eta: float | None = 0.001,
        exclude: str | Sequence[str] | Callable[[Any], bool] = BIAS_AND_NORM,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        if not callable(learning_rate):  # a schedule is callable
            check_number("learning_rate", learning_rate, low=0.0, owner=owner)
        check_number("momentum", momentum, low=0.0, high=1.0, owner=owner)
        check_number("weight_decay", weight_decay, low=0.0, owner=owner)
        if eta is not None:
            check_number(
                "eta", eta, positive=True, owner=owner, hint="Pass eta=None to turn adaptation off."
            )
        exclude = _check_exclude(exclude, owner)
        super().__init__(learning_rate=learning_rate, weight_decay=None, name=name, **kwargs)
        self.momentum = float(momentum)
        self.lars_weight_decay = float(weight_decay)
        self.eta = None if eta is None else float(eta)
        self.exclude = exclude

    def excluded(self, variable: Any) -> bool:
        """Whether `variable` is left out of weight decay and adaptation.

        Args:
            variable: A model variable.

        Returns:
            `True` when `exclude` selects `variable`.
        """
        if self.exclude == BIAS_AND_NORM:
            return is_bias_or_norm(variable)
        if callable(self.exclude):
            return bool(self.exclude(variable))
        path = _variable_path(variable)
        return any(part in path for part in self.exclude)

    def build(self, variables: Sequence[Any]) -> None:
        """Creates the momentum buffers and decides, once, which variables are excluded.

        Args:
            variables: The variables the optimizer will update.
        """
        if self.built:
            return
        super().build(variables)
        # Decided here, on the Keras variables and their paths: `update_step`
        # receives the per-replica `tf.Variable` under a strategy.
        self._excluded = tuple(self.excluded(variable) for variable in variables)
        self.momentums = []
        if self.momentum != 0:
            self.momentums = self.add_optimizer_variables(variables, "momentum")

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        """Applies the LARS update to one variable.

        Args:
            gradient: The variable's gradient, summed over replicas.
            variable: The variable.
            learning_rate: The current learning rate.
        """
        index = self._get_variable_index(variable)
        dtype = variable.dtype
        learning_rate = ops.cast(learning_rate, dtype)
        gradient = ops.cast(ops.convert_to_tensor(gradient), dtype)
        step = gradient
        if not self._excluded[index]:
            # Python floats go straight to the variable's dtype: `ops.cast(0.9, "float64")`
            # would round through float32.
            decay = ops.convert_to_tensor(self.lars_weight_decay, dtype=dtype)
            if self.lars_weight_decay:
                step = gradient + decay * variable
            if self.eta is not None:
                w_norm = ops.sqrt(ops.sum(ops.square(variable)))
                g_norm = ops.sqrt(ops.sum(ops.square(gradient)))
                eta = ops.convert_to_tensor(self.eta, dtype=dtype)
                ratio = eta * w_norm / (g_norm + decay * w_norm)
                # `where` evaluates both branches: the 0/0 of the other one is discarded.
                trust = ops.where(ops.logical_and(w_norm > 0, g_norm > 0), ratio, 1.0)
                learning_rate = learning_rate * ops.cast(trust, dtype)
        if self.momentum != 0:
            m = self.momentums[index]
            momentum = ops.convert_to_tensor(self.momentum, dtype=dtype)
            self.assign(m, momentum * m - learning_rate * step)
            self.assign_add(variable, m)
        else:
            self.assign_sub(variable, learning_rate * step)

    def get_config(self) -> dict[str, Any]:
        """The optimizer's arguments.

        Returns:
            A dict that `LARS.from_config` rebuilds the optimizer from.

        Raises:
            ValueError: If `exclude` is a callable, which a config cannot hold.
        """
        if callable(self.exclude):
            raise ValueError(
                f"{type(self).__name__}: exclude is a callable ({self.exclude!r}), which "
                "cannot be saved. To save the optimizer (e.g. with model.save), pass "
                "exclude as a list of substrings of the variables' paths, or "
                "'bias_and_norm'."
            )
        config = super().get_config()
        config.update(
            {
                "momentum": self.momentum,
                "weight_decay": self.lars_weight_decay,
                "eta": self.eta,
                "exclude": self.exclude if isinstance(self.exclude, str) else list(self.exclude),
            }
        )
        return config


def _check_exclude(exclude: Any, owner: str) -> str | tuple[str, ...] | Callable[[Any], bool]:
    if exclude == BIAS_AND_NORM and isinstance(exclude, str):
        return exclude
    if callable(exclude):
        return exclude
    if isinstance(exclude, (list, tuple)) and all(isinstance(s, str) and s for s in exclude):
        return tuple(exclude)
    raise ValueError(
        f"{owner}: exclude must be 'bias_and_norm', a list of non-empty strings (substrings of "
        "the excluded variables' paths, e.g. ['bias', 'batch_normalization']) or a callable "
        f"taking a variable and returning a bool. Received: exclude={exclude!r}."
    )
