"""Learning-rate schedules (0.17's `tensorflow_similarity.schedules`).

`WarmupCosineDecay` ramps the learning rate linearly from 0 and then decays
it along a cosine; it is a Keras 3 `LearningRateSchedule` that any optimizer
takes as its `learning_rate`.
"""

from tensorflow_similarity.schedules.warmup_cosine_decay import WarmupCosineDecay

__all__ = ["WarmupCosineDecay"]
