"""Combine experiments/variations/out/table4_*.json into one markdown table beside the paper's
TREC-DL-2019 BM25 column (Table 4 of Penha et al.).

    .venv/bin/python experiments/variations/collect.py
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
#: Table 4, TREC-DL-2019, BM25 column (original query first); None: not in the paper
PAPER_BM25 = {"original": 0.480, "NeighbCharSwap": 0.275, "RandomCharSub": 0.231, "QWERTYCharSub": 0.244,
              "RmvStopWords": 0.478, "T5DescToTitle": 0.421, "RandOrderSwap": 0.480, "BackTransl": 0.396,
              "T5QQP": 0.472, "WEmbedSynSwap": 0.353, "WNetSynSwap": 0.349}
SIG = {"NeighbCharSwap", "RandomCharSub", "QWERTYCharSub", "WEmbedSynSwap", "WNetSynSwap"}
CAT = {"NeighbCharSwap": "Misspelling", "RandomCharSub": "Misspelling", "QWERTYCharSub": "Misspelling",
       "RmvStopWords": "Naturality", "T5DescToTitle": "Naturality", "RandOrderSwap": "Ordering",
       "BackTransl": "Paraphrasing", "T5QQP": "Paraphrasing", "WEmbedSynSwap": "Paraphrasing",
       "WNetSynSwap": "Paraphrasing"}


def main() -> None:
    reps = {p.stem.split("_", 1)[1]: json.loads(p.read_text()) for p in sorted(OUT.glob("table4_*.json"))}
    order = [n for n in ("cranfield", "npl", "scifact") if n in reps]
    cols = [(n, s) for n in order for s in reps[n]["systems"]]
    head = "| Category | Variation | paper BM25 (DL-19) | " + " | ".join(f"{n} {s}" for n, s in cols) + " |"
    lines = [head, "|---|---|---:|" + "---:|" * len(cols)]

    def cell(n, s, m):
        rows = [r for r in reps[n]["rows"] if r["system"] == s and r["mode"] == "full" and r["level"] == "method"]
        if m == "original":
            return f"{rows[0]['original']:.3f}" if rows else ""
        r = next((r for r in rows if r["method"] == m), None)
        if r is None:
            return "skipped" if m in reps[n]["skipped"] else ""
        return f"{r['value']:.3f}{r['sig']} ({-100 * r['rel_drop'] + 0.0:+.0f}%)"

    lines.append("| – | original query | 0.480 | " + " | ".join(cell(n, s, "original") for n, s in cols) + " |")
    for m, p in PAPER_BM25.items():
        if m == "original":
            continue
        lines.append(f"| {CAT[m]} | {m} | {p:.3f}{'↓' if m in SIG else ''} | " +
                     " | ".join(cell(n, s, m) for n, s in cols) + " |")
    judged = []
    for n in order:
        for s in reps[n]["systems"]:
            rows = [r for r in reps[n]["rows"] if r["system"] == s and r["mode"] == "full" and r["level"] == "method"]
            j1 = sum(r["judged"] for r in rows) / len(rows)
            judged.append(f"{n} {s} {rows[0]['judged_original']:.3f} → {j1:.3f}")
    print("\n".join(lines))
    print("\nJudged fraction of the top 10 (original → mean over methods): " + "; ".join(judged))


if __name__ == "__main__":
    main()
