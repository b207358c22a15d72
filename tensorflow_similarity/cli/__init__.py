"""The `tfsim` command: self-supervised pretraining with synchronised batch norm.

`tfsim train` (or `python -m tensorflow_similarity train`) trains a
`ContrastiveModel` under a `tf.distribute` strategy and reports the kNN
accuracy of its embeddings. With no options it runs a small job that needs no
network: SimSiam with a ResNet-18 on scikit-learn's handwritten digits, batch
norm synchronised over 2 replicas (logical CPU devices when there is no GPU,
all visible GPUs when there are). Run `tfsim train --help` for every option.

Two kNN accuracies (k=20, weighted votes, against the clean training images)
are reported before training and after each epoch: of the clean test images
(`knn_accuracy`), and of augmented test images (`knn_accuracy_augmented`),
each the first view the run's own augmenter draws with `step=-1` (which no
training batch uses), the same queries before and after training. The second
measures what self-supervision teaches, invariance to those augmentations;
random ResNet features already score high on clean digits.

What it writes to `--output` (default `tfsim-output`):

* `model.keras`: the trained `ContrastiveModel` (`keras.saving.load_model`).
* `history.json`: per-epoch loss, collapse monitors, both kNN accuracies,
  seconds and images per second, and both kNN accuracies before training.
* `run.json`: the options of the run (what `--resume` continues).
* `summary.json`: the table printed at the end.
* `logs/`: TensorBoard logs (`tensorboard --logdir OUTPUT/logs`).
* `loss.png`, `knn_accuracy.png` (both accuracies), `embeddings.png`: the
  curves and a 2-D PCA projection of the test embeddings coloured by label.
* `backup/`: the last completed epoch while training runs (deleted at the
  end); `--resume` continues from it after an interruption.

A seeded run is reproducible on the same machine (`--deterministic`, on by
default), and a run interrupted and resumed ends with the weights of the
uninterrupted one. Bad input (an unknown algorithm, a missing data folder, an
unreadable image, a batch smaller than the replicas, ...) ends with
`tfsim: error: ...` and exit status 2 before any model is built; Ctrl-C or
SIGTERM ends with exit status 130 and keeps what was written. TensorFlow's C++
log is hidden unless `TF_CPP_MIN_LOG_LEVEL` is set or `--verbose` is given.

Modules: `parser` (options and their checks), `devices` (replicas and
strategy), `training` (model, views, backup, `fit`), `report` (history,
TensorBoard, summary table, plots), `command` (`main`).
"""

from tensorflow_similarity.cli.command import main
from tensorflow_similarity.cli.parser import build_parser

__all__ = ["build_parser", "main"]
