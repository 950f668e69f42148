"""``limelight._io.atomic_path`` / ``atomic_dir``: the final name appears only on success, and it
carries the permissions a plain ``open`` / ``mkdir`` would give (not the temporary's private 0600)."""

from __future__ import annotations

import os
import stat

import pytest

from limelight._io import atomic_dir, atomic_path


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_atomic_file_gets_the_mode_of_open(tmp_path):
    ref = tmp_path / "ref.txt"
    ref.write_text("x")
    with atomic_path(tmp_path / "out.txt") as tmp:
        tmp.write_text("y")
    assert (tmp_path / "out.txt").read_text() == "y"
    assert _mode(tmp_path / "out.txt") == _mode(ref)
    assert _mode(tmp_path / "out.txt") & 0o044  # readable by group and others under umask 022


def test_atomic_dir_gets_the_mode_of_mkdir(tmp_path):
    (tmp_path / "ref").mkdir()
    with atomic_dir(tmp_path / "out", "test output") as tmp:
        (tmp / "f").write_text("z")
    assert (tmp_path / "out" / "f").read_text() == "z"
    assert _mode(tmp_path / "out") == _mode(tmp_path / "ref")


def test_a_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "out.txt") as tmp:
        tmp.write_text("partial")
        raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []
