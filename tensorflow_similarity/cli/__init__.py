"""The `tfsim` command: self-supervised pretraining and supervised metric learning.

Two commands train, each one job, under a `tf.distribute` strategy with
batch norm synchronised over the replicas (`--sync-bn`, `--sync-group-size`):
`tfsim pretrain` (self-supervised) and `tfsim train-metric` (metric
learning), each with its own job's options only. `tfsim train --algorithm
NAME`, the compatible spelling, runs the job the algorithm names and takes
both jobs' options (the other job's are refused). `python -m tfsim ...` is
the same command. Neither job needs a network: by default they train a
ResNet-18 on the embedded glyphs over 2 replicas (logical CPU devices when
there is no GPU, all visible GPUs when there are). Run `tfsim COMMAND --help`
for every option.

* `pretrain` (`--algorithm` `simsiam`, `simclr`, `barlow`, `vicreg`, `byol`,
  `mocov3`, `dino`, `mocov2`, `swav` or any method registered before the command line is
  parsed, each with the views and options its class declares: see
  `models.algorithms`; the default is simclr on glyphs, simsiam elsewhere):
  trains a `ContrastiveModel` on unlabelled views and reports the kNN
  accuracy of its embeddings (k=20, weighted votes, against the clean
  training images) before training and after each epoch: of the clean test
  images (`knn_accuracy`), and of augmented test images
  (`knn_accuracy_augmented`, each the first view the run's own augmenter
  draws with `step=-1`, which no training batch uses).
  The second measures invariance to the run's augmentations; random ResNet
  features already score high on clean digits. Beside them, before and
  after training, the top-1 accuracy of a linear probe on the same features
  and splits (`linear_accuracy_before`/`_after`,
  `evaluators.linear_probe_on_features` at its defaults), and both figures
  of the raw pixels.
* `train-metric` (`--algorithm multisimilarity`, the default, `triplet`,
  `circle`, `pn`, `softnn`, `supcon`, `arcface`): trains a `SimilarityModel`
  with that metric loss on the first `--train-classes` classes (glyphs' 62
  Latin classes, or 6 of the digits' 10) with class-balanced batches,
  indexes the training images of every class, and reports recall@1 and mAP@R
  of the held-out images before and after training, for the classes trained
  on and the unseen ones apart.

`tfsim lookup --output DIR [--k 5] [--json] IMAGE_OR_FOLDER...` embeds images
with a supervised run's model and prints their nearest indexed images
(rank, class, distance), or JSON. `tfsim export RUN OUT [--k 5] [--tflite]`
writes a finished run's model and index as a SavedModel with `embed` and
`lookup` signatures that serves with TensorFlow alone (`serving`).

What a training command writes to `--output` (default `tfsim-output`):

* `model.keras`: the trained model (`keras.saving.load_model`); for a
  supervised run, its index beside it in `model.index/`
  (`model.load_index("model.keras")`).
* `history.json`: per-epoch loss, the job's figures (collapse monitors and
  both kNN accuracies, or retrieval figures), seconds and images per second, and the
  figures before training (the linear probe's among them).
* `run.json`: the options of the run (what `--resume` continues); once it
  finished, the SHA-256 of its model.keras and index, which `lookup` checks.
* `summary.json`: the table printed at the end.
* `logs/`: TensorBoard logs (`tensorboard --logdir OUTPUT/logs`).
* Plots: `loss.png`; `knn_accuracy.png` (self-supervised) or
  `retrieval.png` (supervised): the figures by epoch, beside the raw
  pixels' as a dashed line; `neighbours.png`: 8 held-out images (seeded,
  spread over classes) each beside its 5 nearest held-out images
  (self-supervised) or indexed images (supervised), wrong classes framed
  in red; `embeddings.png`: a 2-D PCA of the test embeddings of the 10
  classes with the most test images.
* `backup/`: the last completed epoch while training runs (deleted at the
  end); `--resume` continues from it after an interruption.

A folder holds one run: a new run in a folder that holds one is refused
unless `--overwrite` deletes that run's files first (the names above, never
anything else; see `run_folder`), and a run in a folder another live run is
using is refused (`.tfsim.lock`, see `run_lock`). `--output` inside `--data`
is refused. `--resume` refuses data that changed since the run started (its
fingerprint in run.json, see `data_fingerprint`) and any option that changes
the run, `--deterministic` included, unless it equals what the run resolved.

A seeded run is reproducible on the same machine (`--deterministic`, on by
default), and a run interrupted and resumed ends with the weights of the
uninterrupted one. Bad input (an unknown algorithm, a missing data folder, an
unreadable image, a batch smaller than the replicas, an option of the other
job, a folder holding another run, ...) ends with `tfsim: error: ...` and exit
status 2 before any model is built; Ctrl-C or SIGTERM ends with exit status
130 and keeps what was written; a non-finite loss or weight stops training
with exit status 3 and no model.keras. Under `--strategy multi-worker`, each
task waits at most `--worker-timeout` seconds for the others to start, and a
task lost during training ends the others; both end with exit status 4,
naming the task (`cluster`). TensorFlow's C++ log is hidden unless
`TF_CPP_MIN_LOG_LEVEL` is set or `--verbose` is given.

Modules: `command` (`main`), `parser` (the commands and their options; the
metric job's own in `metric_options`, lookup's in `lookup`), `defaults` (the
defaults of each job and data set), `options` (the parsed options resolved
and checked, run.json's taken back on `--resume`), `errors` (the errors and
exit statuses), `devices` (replicas and strategy),
`cluster` (the multi-worker cluster's bounded wait and lost tasks),
`run_lock` and `data_fingerprint` (one run per folder, the data it trained on),
`run` (the run skeleton both jobs share, and the `Job` each fills in),
`fitting` (backup, the fit call, inference), `report` (history.json,
TensorBoard, run.json, what both summaries share), `run_folder` (one run
per `--output`; the interruption and divergence messages); the
self-supervised job in `pretrain` and `pretrain_report`; the metric job in
`metric`, `retrieval` and `metric_report`; `lookup`.
"""

from tensorflow_similarity.cli.command import main
from tensorflow_similarity.cli.parser import build_parser

__all__ = ["build_parser", "main"]
