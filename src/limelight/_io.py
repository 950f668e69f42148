"""File helpers: atomic writes (a partial output is never left under the final name), gzip-aware
text files, a file's content hash (``file_sha256``), and the one reader of versioned JSON
manifests (``read_versioned``)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from limelight.errors import IndexMismatchError, LimelightError


def _unique_beside(path: Path, make) -> Path:
    """A new, unique ``.<name>.<random>.tmp`` beside ``path``, created by ``make``. Created with the
    default mode (0666 / 0777 less the umask), not ``mkstemp``'s private 0600 / 0700, so the final
    file has the permissions ``open`` / ``mkdir`` would give it."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            make(tmp)
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path.parent}: no free temporary name for {path.name}")


def _create_file(p: Path) -> None:
    os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success (with the
    permissions of a file created by ``open``, not the temporary file's private ones)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = _unique_beside(path, _create_file)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside ``path``; it replaces ``path`` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _unique_beside(path, os.mkdir)
    try:
        yield tmp
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
