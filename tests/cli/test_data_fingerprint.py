"""`cli.data_fingerprint`: `--resume` refuses data that changed since the run started."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

from tensorflow_similarity.cli import lookup, main
from tensorflow_similarity.cli.data_fingerprint import (
    check_unchanged,
    data_fingerprint,
    describe_change,
)
from tensorflow_similarity.cli.errors import UsageError
from tensorflow_similarity.datasets import check_data_spec


def folder_fingerprint(root):
    return data_fingerprint(str(root), check_data_spec(str(root)), 8)


@pytest.fixture
def data(tmp_path):
    root = tmp_path / "data"
    for name in ("cats", "dogs"):
        (root / name).mkdir(parents=True)
        for i in range(3):
            (root / name / f"{i}.png").write_bytes(f"{name} {i}".encode())
    return root


def test_a_folders_fingerprint_is_its_files_sizes_and_hashes(data):
    fingerprint = folder_fingerprint(data)
    assert sorted(fingerprint["files"]) == [
        f"{c}/{i}.png" for c in ("cats", "dogs") for i in range(3)
    ]
    size, digest = fingerprint["files"]["cats/0.png"]
    assert size == len(b"cats 0") and len(digest) == 64
    check_unchanged(fingerprint, folder_fingerprint(data))


def test_replaced_added_and_removed_images_are_refused_by_name(data):
    saved = folder_fingerprint(data)
    (data / "dogs" / "1.png").write_bytes(b"dogs 9")  # same size, other content
    with pytest.raises(UsageError, match=r"changed since .*: 1 file changed \(dogs/1.png\)"):
        check_unchanged(saved, folder_fingerprint(data))
    (data / "dogs" / "1.png").write_bytes(b"dogs 1")
    (data / "cats" / "3.png").write_bytes(b"cats 3")
    (data / "dogs" / "0.png").unlink()
    change = describe_change(saved, folder_fingerprint(data))
    assert change == "1 file added (cats/3.png); 1 file removed (dogs/0.png)"


def test_many_changes_name_the_first_few(data):
    saved = folder_fingerprint(data)
    for i in range(3, 8):
        (data / "cats" / f"{i}.png").write_bytes(b"new")
    assert describe_change(saved, folder_fingerprint(data)) == (
        "5 files added (cats/3.png, cats/4.png, cats/5.png and 2 more)"
    )


def test_an_embedded_source_is_identified_by_its_loader():
    glyphs = data_fingerprint("glyphs", None, 16)
    assert glyphs["embedded"] and set(glyphs["packages"]) == {"matplotlib", "pillow", "fonttools"}
    check_unchanged(glyphs, data_fingerprint("glyphs", None, 16))
    with pytest.raises(UsageError, match="source 'glyphs' -> 'digits'"):
        check_unchanged(glyphs, data_fingerprint("digits", None, 16))
    upgraded = {**glyphs, "packages": {**glyphs["packages"], "matplotlib": "0.1"}}
    assert "packages" in describe_change(upgraded, glyphs)


def test_a_run_json_without_a_fingerprint_resumes_with_a_warning(data):
    assert "records no fingerprint of its data" in check_unchanged(None, folder_fingerprint(data))


class _FailingRead:
    """An open file whose reads fail as a damaged disk's do (EIO)."""

    def __init__(self, file):
        self.file = file

    def read(self, *args):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.file.close()


def test_an_image_that_cannot_be_read_is_named(data, monkeypatch):
    files = check_data_spec(str(data))
    real_open = Path.open

    def open_damaged(path, *args, **kwargs):
        file = real_open(path, *args, **kwargs)
        return _FailingRead(file) if path == data / "dogs" / "1.png" else file

    monkeypatch.setattr(Path, "open", open_damaged)
    message = rf"cannot read image {str(data / 'dogs' / '1.png')!r} of --data \(Input/output"
    with pytest.raises(UsageError, match=message):
        data_fingerprint(str(data), files, 8)


def test_entries_named_as_images_that_are_not_files_are_refused_by_name(data, capsys):
    (data / "cats" / "gone.png").symlink_to(data / "missing.png")
    os.mkfifo(data / "dogs" / "pipe.png")  # opening it would block: it must never be opened
    (data / "dogs" / "fine.png").symlink_to(data / "dogs" / "0.png")
    message = (
        r"holds 2 entries named as images but not files: 'cats/gone.png' \(a link to a missing "
        r"file\), 'dogs/pipe.png' \(a FIFO\)\. Replace or remove them"
    )
    with pytest.raises(ValueError, match=message):
        check_data_spec(str(data))
    output = data.parent / "out"
    assert main(["pretrain", "--data", str(data), "--output", str(output)]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not output.exists()
    (data / "cats" / "gone.png").unlink()
    (data / "dogs" / "pipe.png").unlink()
    assert len(check_data_spec(str(data))) == 7  # a link to an image is an image


def test_lookup_refuses_entries_named_as_images_that_are_not_files(data):
    os.mkfifo(data / "dogs" / "pipe.png")
    with pytest.raises(UsageError, match=r"image '.*dogs/pipe.png' is a FIFO, not an image file"):
        lookup.image_paths([str(data)])
    with pytest.raises(UsageError, match=r"image '.*dogs/pipe.png' is a FIFO, not an image file"):
        lookup.image_paths([str(data / "dogs" / "pipe.png")])
    (data / "dogs" / "pipe.png").unlink()
    (data / "dogs" / "gone.png").symlink_to(data / "missing.png")
    with pytest.raises(UsageError, match=r"gone.png' is a link to a missing file, not an image"):
        lookup.image_paths([str(data / "cats"), str(data / "dogs")])
    (data / "dogs" / "gone.png").unlink()
    assert len(lookup.image_paths([str(data)])) == 6
