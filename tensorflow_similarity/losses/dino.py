"""DINO's cross entropy of student crops against centred, sharpened teacher crops."""

from __future__ import annotations

import numbers
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_number
from tensorflow_similarity.losses.global_batch import GlobalBatchLoss, computation_dtype


@keras.saving.register_keras_serializable(package="Similarity")
class DINOLoss(GlobalBatchLoss):
    """Cross entropy of the student's crops against the teacher's other crops (DINO).

    From Caron et al., "Emerging Properties in Self-Supervised Vision
    Transformers", ICCV 2021 (https://arxiv.org/abs/2104.14294). Called as
    `loss(y_true=teacher_probabilities, y_pred=student_logits)`:
    `teacher_probabilities` is `[batch, V_t, K]`, the teacher's centred and
    sharpened softmax over `K` prototypes for each of its `V_t` crops
    (`dino_teacher_probabilities`; its gradient is stopped here), and
    `student_logits` is `[batch, V_s, K]`, the student head's outputs for its
    `V_s >= V_t` crops, the first `V_t` of which are the teacher's crops (the
    global crops) and the rest the local crops. With `P` the teacher's
    probabilities, `T_s` the student temperature and the pairs of a teacher
    crop `t` and a different student crop `s`:

        loss_i = 1 / (V_t * (V_s - 1)) * sum_{t < V_t} sum_{s < V_s, s != t}
                 -sum_k P[i, t, k] * log_softmax(student[i, s] / T_s)_k

    and the loss is the mean of `loss_i` over the `N` samples of the global
    batch: the mean over the batch and the pairs, as DINO's own loss. No
    gradient reaches the teacher. The teacher's centring and its
    temperature are `dino_teacher_probabilities`'s; the centre's update is
    `dino_center_update`'s.

    Across replicas: each replica computes its own samples' terms (nothing
    is gathered; the teacher's centre, the only statistic of the batch, is
    the caller's) and the reduction takes the mean over the global batch;
    an empty global batch gives 0. See `GlobalBatchLoss` for the contract.

    Args:
        student_temperature: Temperature `T_s > 0` of the student's softmax.
            Defaults to `0.1`.
        reduction: Defaults to `"sum_over_batch_size"`; `"none"` or `None`
            returns the `[batch]` per-sample terms. See `GlobalBatchLoss`.
        name: Name of the loss. Defaults to `"dino_loss"`.
        dtype: See `GlobalBatchLoss`.

    Returns (when called):
        A scalar tensor, or a `[batch]` one with `reduction="none"`.

    Raises:
        ValueError: If `student_temperature` is not a positive number; for
            an unknown reduction; on inputs that are not
            `[batch, V_t, K]` and `[batch, V_s, K]` tensors with the same
            batch and `K` and `V_s >= max(V_t, 2)`, or when `sample_weight`
            is given.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import DINOLoss
    >>> teacher = np.array([[[1.0, 0.0]]])  # 1 sample, 1 global crop, K = 2
    >>> student = np.array([[[0.0, 0.0], [0.0, 0.0]]])  # its 2 crops
    >>> round(float(DINOLoss()(teacher, student)), 4)  # the one pair: log(2)
    0.6931
    """

    per_sample_terms = True

    def __init__(
        self,
        student_temperature: float = 0.1,
        reduction: str | None = "sum_over_batch_size",
        name: str | None = "dino_loss",
        dtype: Any = None,
    ) -> None:
        self.student_temperature = check_number(
            "student_temperature", student_temperature, positive=True, owner=type(self).__name__
        )
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, teacher_probabilities: tf.Tensor, student_logits: tf.Tensor) -> tf.Tensor:
        """Returns the `[n]` terms of this replica's samples, each the mean over its pairs."""
        dtype = computation_dtype(student_logits.dtype)
        teacher = tf.stop_gradient(tf.cast(teacher_probabilities, dtype))
        log_student = tf.nn.log_softmax(tf.cast(student_logits, dtype) / self.student_temperature)
        # cross[i, t, s]: teacher crop t's cross entropy with student crop s.
        cross = -tf.einsum("itk,isk->its", teacher, log_student)
        teacher_views, student_views = tf.shape(teacher)[1], tf.shape(log_student)[1]
        same_crop = tf.equal(tf.range(teacher_views)[:, None], tf.range(student_views)[None, :])
        cross = tf.where(same_crop[None], tf.zeros_like(cross), cross)
        pairs = tf.cast(teacher_views * (student_views - 1), dtype)
        return tf.reduce_sum(cross, axis=[1, 2]) / pairs

    def check_inputs(self, y_true: Any, y_pred: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """Checks the static shapes of the teacher's and the student's crops; returns tensors.

        Shapes a trace leaves unknown are checked at run time, before the
        loss is computed.

        Raises:
            ValueError: Unless `y_true` is `[batch, V_t, K]` and `y_pred`
                `[batch, V_s, K]` with the same batch and `K`, `V_t >= 1`
                and `V_s >= max(V_t, 2)`.
        """
        teacher = keras.ops.convert_to_tensor(y_true, dtype=self.dtype)
        student = keras.ops.convert_to_tensor(y_pred, dtype=self.dtype)
        name = type(self).__name__
        usage = (
            "Call it as loss(teacher_probabilities [batch, V_t, K], student_logits "
            "[batch, V_s, K]), the student's first V_t crops being the teacher's."
        )
        if len(teacher.shape) != 3 or len(student.shape) != 3:
            raise ValueError(
                f"{name} expects rank-3 inputs [batch, crops, prototypes]. Received shapes "
                f"{teacher.shape} (teacher) and {student.shape} (student). {usage}"
            )
        (batch_t, views_t, k_t), (batch_s, views_s, k_s) = teacher.shape, student.shape
        for what, a, b in (("batch size", batch_t, batch_s), ("number K of prototypes", k_t, k_s)):
            if a is not None and b is not None and a != b:
                raise ValueError(
                    f"{name}: the teacher and the student must have the same {what}. "
                    f"Received shapes {teacher.shape} (teacher) and {student.shape} "
                    f"(student). {usage}"
                )
        if views_t is not None and views_t < 1:
            raise ValueError(
                f"{name} needs at least one teacher crop. Received teacher shape "
                f"{teacher.shape}. {usage}"
            )
        if views_s is not None and views_s < max(views_t or 1, 2):
            raise ValueError(
                f"{name} needs at least as many student crops as teacher crops, and at least "
                f"2 (a teacher crop is compared with the other student crops). Received "
                f"shapes {teacher.shape} (teacher) and {student.shape} (student). {usage}"
            )
        if teacher.shape.is_fully_defined() and student.shape.is_fully_defined():
            return teacher, student
        shape_t, shape_s = tf.shape(teacher), tf.shape(student)
        checks = [
            tf.debugging.assert_equal(
                tf.gather(shape_t, [0, 2]),
                tf.gather(shape_s, [0, 2]),
                message=f"{name}: teacher and student must have the same batch size and K.",
            ),
            tf.debugging.assert_greater_equal(
                shape_s[1],
                tf.maximum(shape_t[1], 2),
                message=f"{name}: needs V_s >= max(V_t, 2) student crops.",
            ),
            tf.debugging.assert_greater_equal(
                shape_t[1], 1, message=f"{name}: needs at least one teacher crop."
            ),
        ]
        with tf.control_dependencies([c for c in checks if c is not None]):
            return tf.identity(teacher), tf.identity(student)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["student_temperature"] = self.student_temperature
        return config


def dino_teacher_probabilities(
    teacher_logits: Any, center: Any, temperature: float | tf.Tensor
) -> tf.Tensor:
    """Returns the teacher's centred, sharpened softmax, without gradient (DINO).

    Computes `stop_gradient(softmax((teacher_logits - center) / temperature))`
    over the last axis: DINO's guard against collapse. Centring
    (subtracting the running mean of the teacher's outputs,
    `dino_center_update`) keeps one prototype from dominating, and a low
    temperature (the paper warms it up from 0.04 to 0.07) keeps the
    distribution from going uniform. The result is `DINOLoss`'s `y_true`.

    Args:
        teacher_logits: `[..., K]` outputs of the teacher's head, e.g.
            `[batch, V_t, K]`.
        center: The centre, broadcastable to `teacher_logits` (`[K]`).
        temperature: Teacher temperature, a positive number or a scalar
            tensor (a schedule's value inside a `tf.function`).

    Returns:
        A tensor of the shape of `teacher_logits` whose last axis sums to 1.

    Raises:
        ValueError: If `temperature` is not a positive number (a tensor is
            used as it is).

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import dino_teacher_probabilities
    >>> logits = np.array([[1.0, 2.0, 3.0]])
    >>> p = dino_teacher_probabilities(logits, center=np.array([0.0, 1.0, 2.0]), temperature=0.5)
    >>> p.numpy().round(4).tolist()  # centred logits are all 1: uniform
    [[0.3333, 0.3333, 0.3333]]
    """
    if _is_python_argument(temperature):
        check_number("temperature", temperature, positive=True, owner="dino_teacher_probabilities")
    logits = tf.convert_to_tensor(teacher_logits)
    center = _as(center, logits.dtype)
    temperature = _as(temperature, logits.dtype)
    return tf.stop_gradient(tf.nn.softmax((logits - center) / temperature, axis=-1))


def dino_center_update(center: Any, batch_mean: Any, momentum: float | tf.Tensor) -> tf.Tensor:
    """Returns DINO's centre moved towards the teacher's batch mean: an exponential average.

    Computes `center * momentum + (1 - momentum) * batch_mean` (the paper's
    momentum is 0.9). `batch_mean` is the mean of the teacher's logits over
    the global batch and its crops; under `tf.distribute` the caller takes
    it over all replicas (e.g. `collectives.global_sum` of the sums and the
    counts), so every replica's centre stays the same. The caller assigns the
    result to its centre variable.

    Args:
        center: The current `[K]` centre.
        batch_mean: The `[K]` mean of the teacher's logits over the global
            batch.
        momentum: The weight of the current centre, in `[0, 1]`: a Python
            number or a scalar tensor.

    Returns:
        The new `[K]` centre.

    Raises:
        ValueError: If `momentum` is not a number in `[0, 1]` (a tensor is
            used as it is).

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import dino_center_update
    >>> center = dino_center_update(np.zeros(2), np.array([1.0, -2.0]), momentum=0.9)
    >>> center.numpy().round(4).tolist()
    [0.1, -0.2]
    """
    if _is_python_argument(momentum):
        check_number("momentum", momentum, low=0.0, high=1.0, owner="dino_center_update")
    center = tf.convert_to_tensor(center)
    batch_mean = _as(batch_mean, center.dtype)
    momentum = _as(momentum, center.dtype)
    return center * momentum + (1.0 - momentum) * batch_mean


def _is_python_argument(value: Any) -> bool:
    """Whether `value` is a Python (or NumPy) scalar or `None`, checked before use; not a tensor."""
    return value is None or isinstance(value, (numbers.Number, str, bytes))


def _as(value: Any, dtype: tf.DType) -> tf.Tensor:
    """`value` in `dtype`; a Python float is converted directly, not through float32."""
    return tf.cast(tf.convert_to_tensor(value, dtype_hint=dtype), dtype)
