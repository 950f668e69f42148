"""What the fairness and topics experiments share (one home each): the ``limelight`` command,
a catalog's index and the Click test set, and the splice of a script's section into a doc.

A script in ``experiments/<name>/`` reaches it with
``sys.path.insert(0, str(Path(__file__).resolve().parents[1]))``, then ``from _shared import ...``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: where a section goes the first time it is written into a doc
ANCHOR = "## Design decisions and deviations"


def limelight(*args: str) -> None:
    """Run the venv's ``limelight`` command with ``args``, printing it first."""
    cmd = [str(ROOT / ".venv" / "bin" / "limelight"), *args]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def index_for(catalog: str, work: Path) -> Path:
    """``work/catalog/index``: a ``limelight index --dense`` of ``catalog``, built once (Debian's
    a copy of the demo audit's)."""
    idx = work / catalog / "index"
    if (idx / "meta.json").exists():
        return idx
    if catalog == "debian":  # a copy: nothing here may write into the demo audit
        shutil.copytree(ROOT / "demo-out" / "index", idx)
    else:
        limelight("index", "--collection", catalog, "--dense", "--out", str(idx))
    return idx


def click_files(catalog: str, work: Path) -> tuple[Path, Path]:
    """The Click test set as a query TSV and TREC qrels (binary: the entity each query is for)."""
    import pandas as pd

    df = pd.read_parquet(ROOT / "experiments" / "ctrlqgen" / "results" / catalog / "weaklabels" / "click_test.parquet")
    q, r = work / f"{catalog}-click.tsv", work / f"{catalog}-click.qrels"
    if not q.exists():
        q.parent.mkdir(parents=True, exist_ok=True)
        q.write_text("".join(f"{a}\t{' '.join(str(b).split())}\n" for a, b in zip(df["query_id"], df["text"], strict=True)))
        r.write_text("".join(f"{a} 0 {b} 1\n" for a, b in zip(df["query_id"], df["entity_id"], strict=True)))
    return q, r


def splice_section(text: str, new: str, begin: str, end: str) -> str:
    """``text`` with its part from ``begin`` to ``end`` replaced by ``new`` (a section from
    ``begin`` to ``end``), or, the first time, ``new`` added before :data:`ANCHOR` (at the end
    where there is none)."""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        return head + new.rstrip("\n") + rest.split(end, 1)[1]
    return text.replace(ANCHOR, new + "\n" + ANCHOR, 1) if ANCHOR in text else text + "\n" + new
