"""The defaults of the `tfsim` training commands, by job and by data set.

Each job (`"ssl"`, self-supervised; `"supervised"`, metric learning) has its
own defaults; `DATA_DEFAULTS` overrides some of them on an embedded data set.
The parser prints these tables in `--help`, and `options.resolve_defaults`
fills them in after parsing.
"""

from __future__ import annotations

from typing import Any

from tensorflow_similarity.cli.metric_options import GLYPHS_SEEN_CLASSES, SUPERVISED_DEFAULTS

# The default job must finish in a few minutes on two CPU cores: a full-width
# ResNet-18 costs about 4x more per image at 16x16 than at the digits' own 8x8.
DEFAULT_IMAGE_SIZE = 8
DEFAULT_EPOCHS = 3
DEFAULT_BATCH_SIZE = 128
DEFAULT_LEARNING_RATE = 0.05
DEFAULT_CPU_REPLICAS = 2
# Seconds a task of --strategy multi-worker waits for the cluster's others to start.
DEFAULT_WORKER_TIMEOUT = 300.0
ADAM_LEARNING_RATE = 1e-3
# --optimizer lars: --learning-rate is the rate at a batch of LARS_REFERENCE_BATCH, scaled
# linearly to --batch-size; SimCLR's LARS rate at 256 (Chen et al., 2020, appendix B.6).
LARS_LEARNING_RATE = 0.3
LARS_REFERENCE_BATCH = 256
# --lars-exclude: the kinds of variable LARS leaves out of weight decay and adaptation, and the
# substrings of variable paths each selects ("bias,norm", the default, is LARS' own rule).
LARS_EXCLUSIONS = {"bias": ("bias",), "norm": ("gamma", "beta")}
# Defaults of each job that depend on the embedded data set (the others apply otherwise).
DATA_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "glyphs": {
        "supervised": {
            "train_classes": GLYPHS_SEEN_CLASSES,
            "epochs": 12,
            "batch_size": 64,
            "classes_per_batch": 16,
            "optimizer": "adam",
            # An evaluation (batch norm statistics, 2,140 images indexed, 972 queries) costs
            # about an epoch of training on two CPU cores: after epochs 4, 8 and 12.
            "eval_every": 4,
        },
        # Of the settings tried, SimCLR with Adam does best in a short run on glyphs; SimSiam
        # (SGD or Adam) collapses there. A quarter-width ResNet-18 trains 30 epochs in the time
        # the full width trains 4, and gains over its untrained network where 5 full-width
        # epochs did not (benchmark.glyphs.ssl_length, REPORT.md).
        "ssl": {"optimizer": "adam", "epochs": 30, "width": 0.25},
    },
}
# The self-supervised algorithm of `tfsim train` with no --algorithm, by data (else simsiam).
DEFAULT_ALGORITHMS = {"glyphs": "simclr"}

# The two jobs, by their key in `DATA_DEFAULTS`: the words that name them, and their defaults
# that do not depend on the data.
JOB_TITLES = {"ssl": "self-supervised", "supervised": "supervised"}
JOB_DEFAULTS: dict[str, dict[str, Any]] = {
    "ssl": {
        "epochs": DEFAULT_EPOCHS,
        "batch_size": DEFAULT_BATCH_SIZE,
        "optimizer": "sgd",
        "eval_every": 1,
        "width": 1.0,
    },
    "supervised": {**SUPERVISED_DEFAULTS, "optimizer": "sgd", "eval_every": 1, "width": 1.0},
}
# The metric loss of `tfsim train-metric` with no --algorithm (`tfsim train` has none).
DEFAULT_METRIC_ALGORITHM = "multisimilarity"
# The job of each training command; `train` runs the job its --algorithm names.
COMMAND_JOBS = {"pretrain": "ssl", "train-metric": "supervised"}
BOTH_JOBS = ("ssl", "supervised")
