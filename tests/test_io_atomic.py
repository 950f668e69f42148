"""``limelight._io.atomic_path`` / ``atomic_dir``: the final name appears only on success, and it
carries the permissions a plain ``open`` / ``mkdir`` would give (not the temporary's private 0600).
``cache_root``: the one rule for where limelight's caches live."""

from __future__ import annotations

import os
import stat

import pytest

from limelight._io import atomic_dir, atomic_path, cache_root


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


def test_one_cache_root_for_encoders_and_generators(tmp_path, monkeypatch):
    """``$LIMELIGHT_CACHE`` (``~`` expanded) or ``.cache`` in the working folder, and the ONNX
    exports and the generator's backbone both live under it."""
    from limelight.querygen import generator
    from limelight.retrieval import encoders

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("LIMELIGHT_CACHE", "~/c")
    assert cache_root() == tmp_path / "c"
    monkeypatch.chdir(tmp_path)
    for unset in ("", None):
        if unset is None:
            monkeypatch.delenv("LIMELIGHT_CACHE")
        else:
            monkeypatch.setenv("LIMELIGHT_CACHE", unset)
        assert cache_root() == tmp_path / ".cache" and cache_root().is_absolute()
    assert encoders.cache_root is cache_root and generator.cache_root is cache_root
