"""File helpers: atomic writes (a partial output is never left under the final name), gzip-aware
text files, a file's content hash (``file_sha256``), the one reader of versioned JSON
manifests (``read_versioned``), and the root of limelight's local caches (``cache_root``)."""

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
from limelight.errors import with_article as _a


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
    check_output_file(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = _unique_beside(path, _create_file)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


OWNER_FILE = ".limelight-output"
"""The file inside every folder ``atomic_dir`` writes: what kind of output the folder is and
every file limelight put there (JSON). A folder without it is never replaced or emptied."""


class OutputRefusedError(LimelightError):
    """An output path limelight will not write: a folder or file it did not create."""


def _is_cwd_or_above(path: Path) -> bool:
    here = Path.cwd().resolve()
    return path == here or path in here.parents


def _listing(folder: Path) -> list[str]:
    """Every file and link under ``folder`` (relative POSIX paths), the owner file excluded."""
    out = []
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        out += [(rel / f).as_posix() for f in files]
        out += [(rel / d).as_posix() for d in dirs if (Path(root) / d).is_symlink()]
    return sorted(x for x in out if x != OWNER_FILE)


def _write_owner(folder: Path, kind: str, files: list[str]) -> None:
    """Mark ``folder`` as limelight's: its ``OWNER_FILE`` naming ``kind`` and its ``files``."""
    (folder / OWNER_FILE).write_text(json.dumps({"kind": kind, "files": files}), encoding="utf-8")


def read_owner(folder: str | os.PathLike) -> dict | None:
    """The owner record of a folder ``atomic_dir`` wrote (``{"kind", "files"}``), else ``None``."""
    p = Path(folder) / OWNER_FILE
    try:
        blob = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(blob, dict) and isinstance(blob.get("kind"), str) and isinstance(blob.get("files"), list)
    return blob if ok else None


def check_output_dir(path: str | os.PathLike, kind: str) -> None:
    """Refuse (``OutputRefusedError``, one line) an output folder ``path`` that ``atomic_dir``
    may not replace: the current folder or one above it, a file, a link, or a folder that is not
    limelight's own ``kind`` output holding only the files limelight put there. A missing path
    or an empty folder is accepted."""
    path = Path(path)
    resolved = path.resolve()
    if not resolved.name or _is_cwd_or_above(resolved):
        raise OutputRefusedError(f"{path}: is the current folder or one above it; give a new folder "
                                 "for the output")
    if path.is_symlink():
        raise OutputRefusedError(f"{path}: is a link; give a new folder for the output")
    if not path.exists():
        _check_parents(path)
        return
    if not path.is_dir():
        raise OutputRefusedError(f"{path}: exists and is a file, not a folder; give a new folder "
                                 "for the output")
    if not any(path.iterdir()):
        return
    owner = read_owner(path)
    if owner is None:
        raise OutputRefusedError(f"{path}: exists and was not written by limelight (no {OWNER_FILE} "
                                 "inside); give a new folder, or empty it yourself")
    if owner["kind"] != kind:
        raise OutputRefusedError(f"{path}: holds limelight's {owner['kind']} output, not {_a(kind)}; "
                                 "give another folder")
    foreign = sorted(set(_listing(path)) - set(map(str, owner["files"])))
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise OutputRefusedError(f"{path}: holds {foreign[0]!r}{more}, which limelight did not write; "
                                 "move it away or give another folder")


def _check_parents(path: Path) -> None:
    """Refuse (``OutputRefusedError``, one line) an output path below a file (``a/FILE/out``),
    where making its folders would fail."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputRefusedError(f"{path}: {parent} is a file, not a folder")
            break


def check_output_file(path: str | os.PathLike) -> None:
    """Refuse (``OutputRefusedError``, one line) an output file path that names a folder, or
    whose parent is a file."""
    path = Path(path)
    if path.is_dir():
        raise OutputRefusedError(f"{path}: is a folder; give a file name for the output")
    _check_parents(path)


def file_record(path: str | os.PathLike) -> Path:
    """Where limelight records that it wrote the output file ``path``: ``.NAME.limelight-output``
    beside it (JSON: ``{"kind": "file", "size", "sha256"}`` of the file as written)."""
    path = Path(path)
    return path.with_name(f".{path.name}{OWNER_FILE}")


def wrote_file(path: str | os.PathLike) -> bool:
    """Whether the file ``path`` is limelight's output as limelight wrote it: its record
    (``file_record``) gives its size and SHA-256, and the file still has them (a file the user
    edited since, or put there under the same name, is theirs)."""
    path = Path(path)
    try:
        rec = json.loads(file_record(path).read_text(encoding="utf-8"))
        if path.is_symlink() or not path.is_file() or not isinstance(rec, dict):
            return False
        return rec.get("size") == path.stat().st_size and rec.get("sha256") == file_sha256(path)
    except (OSError, ValueError):
        return False


def check_replaceable_file(path: str | os.PathLike, overwrite: bool = False,
                           flag: str | None = "--overwrite") -> None:
    """Refuse (``OutputRefusedError``, one line naming it) an output file path limelight may not
    write: ``check_output_file``'s cases, and, unless ``overwrite``, a file (or link) already there
    that limelight did not write (``wrote_file``). ``flag``: the option that allows it, named in
    the message (``None``: the command has none)."""
    path = Path(path)
    check_output_file(path)
    if overwrite or not (path.exists() or path.is_symlink()) or wrote_file(path):
        return
    what = "is a link" if path.is_symlink() else "exists and was not written by limelight (or was changed since)"
    raise OutputRefusedError(f"{path}: {what}; give another file name" +
                             (f", or {flag} to replace it" if flag else ", or move it away"))


@contextlib.contextmanager
def atomic_output_file(path: str | os.PathLike, overwrite: bool = False,
                       flag: str | None = "--overwrite") -> Iterator[Path]:
    """``atomic_path`` for an output file the user names (``--out FILE``): a file already there
    that limelight did not write is refused unless ``overwrite`` (``check_replaceable_file``,
    before the work and again before the rename); limelight's own is replaced atomically, and
    the file written gets its record (``file_record``), so that the next run may replace it."""
    path = Path(path)
    check_replaceable_file(path, overwrite, flag)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _unique_beside(path, _create_file)
    try:
        yield tmp
        check_replaceable_file(path, overwrite, flag)  # nothing of the user's arrived while we worked
        record = {"kind": "file", "size": tmp.stat().st_size, "sha256": file_sha256(tmp)}
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    with atomic_path(file_record(path)) as rec:
        rec.write_text(json.dumps(record), encoding="utf-8")


def check_resumable_dir(path: str | os.PathLike, marker: str, what: str) -> None:
    """Refuse (``OutputRefusedError``, one line) a folder that a resumable job (an audit, an
    exposure store) may not write into: a file, or a non-empty folder without the job's
    ``marker`` file (its manifest), which is someone else's (a job's ``scratch_dir`` alone does
    not count: a job killed before its manifest leaves only that)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputRefusedError(f"{path}: exists and is a file, not {_a(what)}; give a new folder")
    if not path.exists():
        _check_parents(path)
    if path.is_dir() and not (path / marker).is_file() and any(
            not p.name.startswith(SCRATCH_PREFIX) for p in path.iterdir()):
        raise OutputRefusedError(f"{path}: exists and is not {_a(what)} (no {marker} inside); give a "
                                 "new or empty folder")


SCRATCH_PREFIX = ".limelight-scratch-"
"""The name of a resumable job's scratch folder inside its output folder (``scratch_dir``)."""


@contextlib.contextmanager
def scratch_dir(out: str | os.PathLike, name: str) -> Iterator[Path]:
    """A resumable job's scratch folder ``OUT/.limelight-scratch-NAME`` (``out``: the job's output
    folder, made if missing), removed when the block ends, ``out`` too when this made it and
    it is left empty. Not in the system's temporary folder, where a killed job's scratch would
    stay: a killed job's is left in its own output, and the rerun that resumes the job removes
    it first (only a folder this made: it carries ``OWNER_FILE`` of kind ``scratch``)."""
    out = Path(out)
    made = [p for p in (out, *out.parents) if not p.exists()]
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{SCRATCH_PREFIX}{name}"
    if path.exists() or path.is_symlink():
        if path.is_symlink() or (read_owner(path) or {}).get("kind") != "scratch":
            raise OutputRefusedError(f"{path}: exists and was not made by limelight; move it away")
        shutil.rmtree(path)  # a killed run's
    path.mkdir()
    _write_owner(path, "scratch", [])
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        for p in made:  # (innermost first) the folders this made, when nothing else is in them
            try:
                p.rmdir()
            except OSError:
                break


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, kind: str) -> Iterator[Path]:
    """Yield a temporary directory beside ``path``; it replaces ``path`` only on success.

    ``path`` must be new, empty, or limelight's own ``kind`` output holding nothing else
    (``check_output_dir``, checked before any work and again before the swap); the folder written
    carries ``OWNER_FILE`` naming ``kind`` and its files, so that a later write can replace it.
    """
    path = Path(path)
    check_output_dir(path, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _unique_beside(path, os.mkdir)
    try:
        yield tmp
        _write_owner(tmp, kind, _listing(tmp))
        if path.exists():
            check_output_dir(path, kind)  # nothing of the user's arrived while we worked
            old = _unique_beside(path, os.mkdir)
            os.replace(path, old)  # an empty folder, or our own output (checked above)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def cache_root() -> Path:
    """Root of limelight's local caches (exported models, de-quantized backbones):
    ``$LIMELIGHT_CACHE`` (``~`` expanded) or, where it is unset or empty, ``.cache`` in the
    working folder. The one home of that rule."""
    env = os.environ.get("LIMELIGHT_CACHE")
    return Path(env).expanduser() if env else Path.cwd() / ".cache"


def open_text(path: str | os.PathLike, mode: str = "rt"):
    """Open a file, transparently gzip-compressed when the name ends with ``.gz``: UTF-8 text in
    a text mode (``"rt"``, ``"wt"``), bytes in a binary one (``"rb"``). The one gzip-or-plain
    opener of the house."""
    path = str(path)
    encoding = None if "b" in mode else "utf-8"
    if path.endswith(".gz"):
        import gzip

        return gzip.open(path, mode, encoding=encoding)
    return open(path, mode, encoding=encoding)


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's content (hex), read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---- versioned manifests -------------------------------------------------------------------------


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
