"""`scaled_learning_rate`: a base learning rate scaled to the global batch."""

from __future__ import annotations

import math

from tensorflow_similarity._validation import check_choice, check_int, check_number

RULES = ("linear", "sqrt")


def scaled_learning_rate(
    base_learning_rate: float,
    global_batch_size: int,
    rule: str = "linear",
    reference_batch_size: int = 256,
) -> float:
    """The learning rate for a global batch, from the rate at a reference batch.

    - `"linear"`: `base_learning_rate * global_batch_size / reference_batch_size`
      (Goyal et al., https://arxiv.org/abs/1706.02677; SimCLR, BYOL and Barlow
      Twins with LARS);
    - `"sqrt"`: `base_learning_rate * sqrt(global_batch_size / reference_batch_size)`
      (SimCLR's rule for small batches and long training).

    The global batch is the batch over all replicas (per-replica batch times
    the number of replicas), the one the gradients are averaged over. Pass the
    result as `max_learning_rate` of `schedules.WarmupCosineDecay` for the
    papers' warm-up and cosine decay.

    Args:
        base_learning_rate: The learning rate at `reference_batch_size`, > 0.
        global_batch_size: The global batch size, a positive integer.
        rule: `"linear"` or `"sqrt"`. Defaults to `"linear"`.
        reference_batch_size: The batch size `base_learning_rate` is given
            for, a positive integer. Defaults to 256.

    Returns:
        The scaled learning rate, a float.

    Raises:
        ValueError: If `base_learning_rate` is not a positive finite number,
            a batch size is not a positive integer, or `rule` is unknown.

    Example:

    >>> from tensorflow_similarity.optimizers import scaled_learning_rate
    >>> scaled_learning_rate(0.3, 4096)
    4.8
    >>> scaled_learning_rate(0.075, 4096, rule="sqrt")
    0.3
    """
    owner = "scaled_learning_rate"
    base = check_number("base_learning_rate", base_learning_rate, positive=True, owner=owner)
    batch = check_int("global_batch_size", global_batch_size, minimum=1, owner=owner)
    reference = check_int("reference_batch_size", reference_batch_size, minimum=1, owner=owner)
    check_choice(
        "rule",
        rule,
        RULES,
        owner=owner,
        hint="'linear' scales by batch / reference, 'sqrt' by its square root.",
    )
    if rule == "linear":
        return base * batch / reference
    return base * math.sqrt(batch / reference)
