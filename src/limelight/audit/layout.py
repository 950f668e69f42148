"""The on-disk layout of an audit directory, as a small typed API.

Everything that reads an audit (the HTML report, ``limelight serve --audit DIR``, notebooks) goes
through :class:`AuditDir` rather than spelling paths itself::

    DIR/audit.json                     manifest: collection, query log, systems + settings,
                                       stage status / input hashes / timings
    DIR/config.toml                    the validated configuration the audit ran with
    DIR/index/                         a ``limelight index`` directory (BM25, docs, dense if used)
    DIR/systems/<name>/exposure/       an ExposureStore (manifest.json, shards/, doc_index/, ...)
    DIR/systems/<name>/retrievability.parquet   r(d) per document at each cutoff
    DIR/systems/query_vectors.npy      dense query vectors shared by dense and hybrid systems
    DIR/eqi/<method>/                  EQI models and their outputs
    DIR/tables/<table>.parquet         every table shown in the report
    DIR/figures/<figure>.png           every figure shown in the report
    DIR/stages/<stage>.json            per-stage cache record (hash of inputs + settings, outputs)
    DIR/results.json                   the headline numbers (``systems.<name>.gini_c100`` ...)
    DIR/report.html                    the self-contained report
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from limelight._io import check_resumable_dir
from limelight.errors import LimelightError

if TYPE_CHECKING:  # pragma: no cover
    from limelight.exposure.store import ExposureStore

MANIFEST = "audit.json"
FORMAT = "limelight-audit/1"


class NotAnAuditError(LimelightError):
    """A directory that is not (or not yet) an audit directory."""


class _Part:
    """A file or folder of an audit directory at a fixed place in it, read as an attribute
    (``audit.tables_dir``: ``audit.path / "tables"``)."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, audit: AuditDir | None, owner: type | None = None) -> Any:
        return self if audit is None else audit.path / self.name


@dataclass(frozen=True)
class AuditDir:
    """An audit output directory (it need not exist yet)."""

    path: Path

    def __init__(self, path: str | os.PathLike):
        object.__setattr__(self, "path", Path(path))

    # -- files ------------------------------------------------------------------------------------
    manifest_path = _Part(MANIFEST)

    config_toml = _Part("config.toml")

    index_dir = _Part("index")

    systems_dir = _Part("systems")

    def system_dir(self, system: str) -> Path:
        return self.systems_dir / system

    def store_dir(self, system: str) -> Path:
        """The ExposureStore directory of ``system``."""
        return self.system_dir(system) / "exposure"

    #: dense query vectors shared by the dense and hybrid systems (float32 ``.npy``)
    query_vectors = _Part("systems/query_vectors.npy")

    def retrievability_path(self, system: str) -> Path:
        return self.system_dir(system) / "retrievability.parquet"

    eqi_root = _Part("eqi")

    def eqi_dir(self, method: str) -> Path:
        return self.eqi_root / method

    tables_dir = _Part("tables")

    def table(self, name: str) -> Path:
        return self.tables_dir / f"{name}.parquet"

    figures_dir = _Part("figures")

    stages_dir = _Part("stages")

    def stage_record(self, stage: str) -> Path:
        return self.stages_dir / f"{stage}.json"

    results_json = _Part("results.json")

    report_html = _Part("report.html")

    # -- reading ----------------------------------------------------------------------------------
    def check_writable(self) -> None:
        """Refuse (one line) an output path that is a file or someone else's non-empty folder."""
        check_resumable_dir(self.path, MANIFEST, "audit folder")

    def exists(self) -> bool:
        return self.manifest_path.exists()

    @property
    def manifest(self) -> dict[str, Any]:
        """``audit.json``: collection, systems with settings, stage status and hashes."""
        if not self.manifest_path.exists():
            raise NotAnAuditError(f"{self.path}: not an audit directory (no {MANIFEST}; create one "
                                  "with `limelight audit CONFIG.toml --out DIR`)")
        try:
            return json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise NotAnAuditError(f"{self.manifest_path}:{e.lineno}: corrupt manifest ({e.msg})") from None

    @property
    def systems(self) -> list[str]:
        """Names of the audited systems, in config order."""
        return [s["name"] for s in self.manifest.get("systems", [])]

    def store(self, system: str) -> ExposureStore:
        """Open the (complete) ExposureStore of ``system``."""
        from limelight.exposure.store import ExposureStore

        d = self.store_dir(system)
        if not d.exists():
            known = ", ".join(self.systems) if self.exists() else "none"
            raise NotAnAuditError(f"{self.path}: no exposure store for system {system!r} "
                                  f"(systems: {known})")
        return ExposureStore.open(d)

    def results(self) -> dict[str, Any]:
        """``results.json`` as a dict."""
        if not self.results_json.exists():
            raise NotAnAuditError(f"{self.path}: the audit has not finished (no results.json)")
        return json.loads(self.results_json.read_text(encoding="utf-8"))

    def read_table(self, name: str):
        """A Parquet table of the audit as a pandas DataFrame."""
        import pandas as pd

        p = self.table(name)
        if not p.exists():
            raise NotAnAuditError(f"{self.path}: no table {name!r} (have: "
                                  f"{', '.join(sorted(x.stem for x in self.tables_dir.glob('*.parquet')))})")
        return pd.read_parquet(p)
