"""`tfsim pretrain --bn`: the other spelling of `--sync-bn`, and shuffle batch norm's checks."""

from __future__ import annotations

import argparse

import pytest

from tensorflow_similarity.cli.errors import UsageError
from tensorflow_similarity.cli.options import resolve_batch_norm_mode, resolve_defaults
from tensorflow_similarity.cli.parser import build_parser
from tensorflow_similarity.cli.pretrain import check_batch_norm_batch


def resolved(*options: str) -> argparse.Namespace:
    argv = ["pretrain", *options]
    explicit = vars(build_parser(suppress_defaults=True).parse_args(argv))
    args = resolve_defaults(build_parser().parse_args(argv), explicit)
    resolve_batch_norm_mode(args, explicit)
    return args


@pytest.mark.parametrize(
    ("options", "bn", "sync_bn"),
    [
        ([], "sync", True),  # The command's default, as before --bn existed.
        (["--no-sync-bn"], "per_replica", False),
        (["--bn", "per_replica"], "per_replica", False),
        (["--bn", "sync", "--sync-bn"], "sync", True),
        (["--algorithm", "mocov3", "--bn", "shuffle"], "shuffle", False),
    ],
)
def test_bn_and_sync_bn_resolve_to_one_mode(options, bn, sync_bn):
    args = resolved(*options)
    assert (args.bn, args.sync_bn) == (bn, sync_bn)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--bn", "per_replica", "--sync-bn"], "--bn per_replica contradicts --sync-bn"),
        (["--bn", "sync", "--no-sync-bn"], "--bn sync contradicts --no-sync-bn"),
        (["--algorithm", "simclr", "--bn", "shuffle"], "simclr has none.*byol.*mocov3"),
    ],
)
def test_contradictions_and_methods_without_a_key_encoder_are_refused(options, message):
    with pytest.raises(UsageError, match=message):
        resolved(*options)


def test_shuffle_on_one_replica_is_refused_before_any_work():
    args = resolved("--algorithm", "byol", "--bn", "shuffle", "--batch-size", "8")
    with pytest.raises(UsageError, match="--bn shuffle.*one.*--replicas 2 or more"):
        check_batch_norm_batch(args, replicas=1)
    assert check_batch_norm_batch(args, replicas=2) is None


def test_the_metric_job_has_no_bn():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train-metric", "--bn", "sync"])
