"""File helpers: atomic writes (a partial output is never left under the final name), gzip-aware
text files, a file's content hash (``file_sha256``), and the one reader of versioned JSON
manifests (``read_versioned``)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from limelight.errors import IndexMismatchError, LimelightError

# the process umask, read once (os.umask can only be read by setting it): temporary files and
# folders are created private (0600 / 0700), and get the mode a plain open() or mkdir() would give
# before they take the final name
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def _public_mode(p: Path, is_dir: bool) -> None:
    if p.exists():
        os.chmod(p, (0o777 if is_dir else 0o666) & ~_UMASK)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success (with the
    permissions of a file created by ``open``, not the temporary file's private ones)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        _public_mode(tmp_path, tmp_path.is_dir())
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside ``path``; it replaces ``path`` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        _public_mode(tmp, True)
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def open_text(path: str | os.PathLike, mode: str = "rt"):
    """Open a text file, transparently gzip-compressed when the name ends with ``.gz``."""
    path = str(path)
    if path.endswith(".gz"):
        import gzip

        return gzip.open(path, mode, encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's content (hex), read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---- versioned manifests -------------------------------------------------------------------------
def _a(what: str) -> str:
    return f"an {what}" if what[:1].lower() in "aeiou" else f"a {what}"


def check_format(blob: object, expected: str, path: str | os.PathLike, what: str,
                 rebuild: str | None = None, error: type[LimelightError] = IndexMismatchError) -> dict:
    """``blob`` (a manifest or checkpoint read from ``path``) if it is a dict whose ``format`` is
    ``expected``; otherwise a one-line ``error`` naming the file, both formats and, with
    ``rebuild``, how to make a new one: ``PATH: not a WHAT (format GOT, expected EXPECTED; REBUILD)``.
    """
    got = blob.get("format") if isinstance(blob, dict) else None
    if got != expected:
        hint = f"; {rebuild}" if rebuild else ""
        raise error(f"{path}: not {_a(what)} (format {got!r}, expected {expected!r}{hint})")
    return blob  # type: ignore[return-value]


def read_versioned(path: str | os.PathLike, expected_format: str, what: str,
                   rebuild: str | None = None) -> dict:
    """Read the JSON manifest ``path`` of an on-disk artifact (index, store, model) and check its
    ``format`` field; every failure is one line naming the file and, with ``rebuild`` (e.g.
    ``"build one with `limelight index`"``), the command that makes a new one:

    * missing: ``LimelightError`` ``PATH: missing, not a WHAT (REBUILD)``;
    * not JSON: ``IndexMismatchError`` ``PATH: corrupt WHAT metadata (why; REBUILD)``;
    * another format or version: ``IndexMismatchError`` (``check_format``).
    """
    path = Path(path)
    if not path.is_file():
        raise LimelightError(f"{path}: missing, not {_a(what)}" + (f" ({rebuild})" if rebuild else ""))
    try:
        blob = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        why = e.msg if isinstance(e, json.JSONDecodeError) else "not UTF-8 text"
        hint = f"; {rebuild}" if rebuild else ""
        raise IndexMismatchError(f"{path}: corrupt {what} metadata ({why}{hint})") from None
    return check_format(blob, expected_format, path, what, rebuild)
