"""Did issue 55 ("one system, one door") change the demo's figures? Its acceptance: "the demo's
``results.json`` equal before and after (tested against the previous code's values)".

The demo's audit (``limelight audit debian``, what ``make demo`` runs) was run by three codes,
each ``results.json`` kept in ``results/``:

- ``before.json``: commit ccc107e, the code before issue 55's first commit (fb444e1);
- ``before+densefix.json``: ccc107e with commit 358b04f cherry-picked (the fix that made
  dense search bit-reproducible; it moved dense scores by up to ~3e-7, see CHANGELOG.md);
- ``after.json``: the code after issue 55.

This script compares them leaf by leaf (every number, string and flag; floats exactly) and
writes the section "Figures before and after" of ``docs/architecture.md`` from them
(``--write-docs``), so the page says what the files say. ``--audit DIR`` compares a demo
audit of your own (``demo-out``) with the three instead.

    python experiments/one_door/compare.py --write-docs
    python experiments/one_door/compare.py --audit demo-out
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
DOC = HERE.parents[1] / "docs" / "architecture.md"
BEGIN = "### Figures before and after"
END = "<!-- end: figures before and after -->"
CODES = {"before": "ccc107e (before issue 55)",
         "before+densefix": "ccc107e with 358b04f (the dense fix) cherry-picked",
         "after": "after issue 55"}


def leaves(x: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every leaf of a JSON value as (dotted path, value); an empty object or list is a leaf."""
    if isinstance(x, dict) and x:
        for k, v in x.items():
            yield from leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(x, list) and x:
        for i, v in enumerate(x):
            yield from leaves(v, f"{path}[{i}]")
    else:
        yield path, x


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def compare(a: Any, b: Any) -> dict[str, Any]:
    """``equal`` (the number of leaves of both that are equal: same type, same value),
    ``differ`` ({path: (a's, b's)}), ``only_a`` and ``only_b`` ({path: value})."""
    la, lb = dict(leaves(a)), dict(leaves(b))
    return {"equal": sum(1 for k in la if k in lb and _same(la[k], lb[k])),
            "differ": {k: (la[k], lb[k]) for k in la if k in lb and not _same(la[k], lb[k])},
            "only_a": {k: v for k, v in la.items() if k not in lb},
            "only_b": {k: v for k, v in lb.items() if k not in la}}


def _load(name: str) -> Any:
    return json.loads((RESULTS / f"{name}.json").read_text())


def section() -> str:
    """The docs section, from the three committed results."""
    before, fixed, after = (_load(n) for n in CODES)
    ba, bf, fa = compare(before, after), compare(before, fixed), compare(fixed, after)
    explained = set(ba["differ"]) == set(bf["differ"]) and not fa["differ"] and not fa["only_a"]
    lines = [BEGIN, "",
             "The demo's audit (`limelight audit debian`, what `make demo` runs) by the code before "
             "issue 55 (ccc107e), by that code with the fix that made dense search bit-reproducible "
             "(358b04f, in CHANGELOG.md) cherry-picked, and by the code after it; its `results.json` compared leaf by leaf, "
             "floats exactly (`python experiments/one_door/compare.py --write-docs` writes this "
             "section from `experiments/one_door/results/`; `--audit demo-out` compares yours). "
             "The three ran on 2026-11-29 over the same catalog vectors, taken from the embedding "
             "cache of a fresh-clone `make demo` (the code before issue 55 finds them under the "
             "same cache keys, and re-encoded 400 of them bit for bit):",
             "",
             "| compared | equal | differ | only in the first | only in the second |",
             "|---|---|---|---|---|"]
    for (x, y), c in ((("before", "after"), ba), (("before+densefix", "after"), fa),
                      (("before", "before+densefix"), bf)):
        lines.append(f"| {CODES[x]} → {CODES[y]} | {c['equal']} | {len(c['differ'])} | "
                     f"{len(c['only_a'])} | {len(c['only_b'])} |")
    words = [f"With the dense fix, the code before issue 55 gives the figures of the code after "
             f"it: {fa['equal']} leaves equal, {len(fa['differ'])} differ."]
    words.append("Every figure that differs between before and after differs the same way between "
                 "before and before with the dense fix: the dense fix moved them, not issue 55."
                 if explained else "Some differences are not the dense fix's (the table below).")
    if fa["only_b"]:
        topics = all(k.startswith("stages.topics.") for k in fa["only_b"])
        words.append("Only in the code after it: " + ", ".join(f"`{k}`" for k in fa["only_b"])
                     + (" (the audit's topics stage, new with issue 56)." if topics else "."))
    lines += ["", " ".join(words), "", "| figure | before | after |", "|---|---|---|"]
    lines += [f"| `{k}` | {a!r} | {b!r} |" for k, (a, b) in ba["differ"].items()]
    return "\n".join([*lines, "", END, ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write-docs", action="store_true", help="write the section of docs/architecture.md")
    ap.add_argument("--audit", type=Path, help="a demo audit's folder to compare with the three")
    args = ap.parse_args(argv)
    if args.audit is not None:
        path = args.audit / "results.json"
        if not path.is_file():
            print(f"error: {path}: no results.json (run `limelight audit debian --out {args.audit}`)",
                  file=sys.stderr)
            return 2
        mine = json.loads(path.read_text())
        for name, label in CODES.items():
            c = compare(_load(name), mine)
            print(f"{label} → {path}: {c['equal']} equal, {len(c['differ'])} differ, "
                  f"{len(c['only_a'])} only there, {len(c['only_b'])} only here")
            for k, (a, b) in c["differ"].items():
                print(f"  {k}: {a!r} → {b!r}")
        return 0
    text = section()
    if args.write_docs:
        # imported here, not at the top: the tests import this module, and their own _shared
        # module is already in sys.modules under that name
        sys.path.insert(0, str(HERE.parents[0]))
        from _shared import splice_section

        DOC.write_text(splice_section(DOC.read_text(), text, BEGIN, END))
        print(f"wrote the section of {DOC}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
