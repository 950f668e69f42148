"""Stage cache: each stage is keyed by a hash of its inputs and settings.

A stage writes ``DIR/stages/<stage>.json`` twice: ``{"key", "status": "running"}`` when it starts
and ``{"key", "status": "done", "result"}`` when it ends (atomically). On a rerun:

- same key, done → the stage is skipped and its recorded ``result`` reused;
- same key, running (the audit was interrupted) → the stage runs again over its partial outputs,
  which resumable stages (exact exposure) pick up where they stopped;
- another key (a changed input or setting) → the stage's outputs are removed and it runs afresh,
  and so does every stage whose key includes this one's.

Only what limelight wrote is ever removed: the record keeps the files each stage's outputs held
when the stage finished (or was interrupted), and an output holding any other file (a user's
notes inside ``systems/bm25/exposure/``, say) is refused in one line naming it, before anything
is removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from limelight._io import OutputRefusedError, atomic_path
from limelight.audit.layout import AuditDir


def stable_hash(*parts: Any) -> str:
    """A short, stable hash of JSON-serialisable ``parts``."""
    blob = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def _jsonable(x: Any) -> Any:
    import numpy as np

    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, float) and x != x:  # NaN → null (valid JSON)
        return None
    return x


class StageCache:
    """Stage records of one audit directory."""

    def __init__(self, audit: AuditDir):
        self.audit = audit
        audit.stages_dir.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def _file(stage: str) -> str:
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in stage)

    def record(self, stage: str) -> dict | None:
        p = self.audit.stage_record(self._file(stage))
        if not p.exists():
            return None
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return None

    def _write(self, stage: str, rec: dict) -> None:
        with atomic_path(self.audit.stage_record(self._file(stage))) as tmp:
            tmp.write_text(json.dumps(_jsonable(rec), indent=1, allow_nan=False), encoding="utf-8")

    def lookup(self, stage: str, key: str) -> dict | None:
        """The recorded result when ``stage`` finished with ``key``; else ``None``."""
        rec = self.record(stage)
        if rec and rec.get("key") == key and rec.get("status") == "done":
            return rec
        return None

    def _files(self, outputs: Iterable[Path]) -> list[str]:
        """Every file and link under ``outputs`` (files or folders), as POSIX paths relative to
        the audit folder (absolute when an output lies outside it)."""
        root = self.audit.path
        found: list[Path] = []
        for p in map(Path, outputs):
            if p.is_symlink() or p.is_file():
                found.append(p)
            elif p.is_dir():
                for dirpath, dirs, files in os.walk(p):
                    d = Path(dirpath)
                    found += [d / f for f in files] + [d / x for x in dirs if (d / x).is_symlink()]
        out = []
        for f in found:
            try:
                out.append(f.relative_to(root).as_posix())
            except ValueError:
                out.append(f.as_posix())
        return sorted(out)

    def begin(self, stage: str, key: str, outputs: Iterable[Path] = ()) -> bool:
        """Mark ``stage`` as running with ``key``; returns True when resuming an interrupted run
        with the same key. Outputs of a run with another key are removed first, but only when
        they hold nothing but the files limelight recorded for the stage: otherwise
        ``OutputRefusedError`` names the first foreign file and nothing is removed."""
        outputs = [Path(p) for p in outputs]
        rec = self.record(stage)
        resuming = bool(rec and rec.get("key") == key)
        if not resuming:
            ours = set(rec.get("files", [])) if rec else set()
            foreign = [f for f in self._files(outputs) if f not in ours]
            if foreign:
                more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
                raise OutputRefusedError(
                    f"{self.audit.path / foreign[0]}: limelight did not write this file{more}, and "
                    f"stage {stage!r} must replace its folder (its settings changed); move it away "
                    "and rerun")
            for p in outputs:
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                elif p.exists() or p.is_symlink():
                    p.unlink()
        self._write(stage, {"stage": stage, "key": key, "status": "running",
                            "files": self._files(outputs)})
        return resuming

    def interrupted(self, stage: str, key: str, outputs: Iterable[Path] = ()) -> None:
        """Record, as the stage stops unfinished, the files its outputs now hold (limelight wrote
        them while it ran), so that a rerun with other settings may replace them."""
        self._write(stage, {"stage": stage, "key": key, "status": "running",
                            "files": self._files(outputs)})

    def finish(self, stage: str, key: str, result: dict, seconds: float,
               outputs: Iterable[Path] = ()) -> dict:
        """Record ``stage`` as done with ``key`` and ``result``, and the files its outputs hold."""
        rec = {"stage": stage, "key": key, "status": "done", "seconds": round(seconds, 3),
               "result": result, "files": self._files(outputs)}
        self._write(stage, rec)
        return rec

    def known(self) -> list[str]:
        return sorted(p.stem for p in self.audit.stages_dir.glob("*.json"))
