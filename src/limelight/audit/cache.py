"""Stage cache: each stage is keyed by a hash of its inputs and settings.

A stage writes ``DIR/stages/<stage>.json`` twice: ``{"key", "status": "running"}`` when it starts
and ``{"key", "status": "done", "result"}`` when it ends (atomically). On a rerun:

- same key, done → the stage is skipped and its recorded ``result`` reused;
- same key, running (the audit was interrupted) → the stage runs again over its partial outputs,
  which resumable stages (exact exposure) pick up where they stopped;
- another key (a changed input or setting) → the stage's outputs are removed and it runs afresh,
  and so does every stage whose key includes this one's.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from limelight._io import atomic_path
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

    def begin(self, stage: str, key: str, outputs: Iterable[Path] = ()) -> bool:
        """Mark ``stage`` as running with ``key``. Outputs of a run with another key are removed
        first; returns True when resuming an interrupted run with the same key."""
        rec = self.record(stage)
        resuming = bool(rec and rec.get("key") == key)
        if not resuming:
            for p in outputs:
                p = Path(p)
                if p.is_dir():
                    shutil.rmtree(p)
                elif p.exists():
                    p.unlink()
        self._write(stage, {"stage": stage, "key": key, "status": "running"})
        return resuming

    def finish(self, stage: str, key: str, result: dict, seconds: float) -> dict:
        rec = {"stage": stage, "key": key, "status": "done", "seconds": round(seconds, 3),
               "result": result}
        self._write(stage, rec)
        return rec

    def known(self) -> list[str]:
        return sorted(p.stem for p in self.audit.stages_dir.glob("*.json"))
