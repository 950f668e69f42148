"""docs/results.md follows its own verdict rule (issue 23).

Every Markdown table of docs/results.md whose header has a ``verdict`` column is a verdict table.
It must have the fixed layout ``| finding (paper) | paper | ours | verdict | evidence |``; each
row's verdict is one of the four phrases of the rule, alone (``reproduces``) or followed by
``: reason`` (required for the other three); its evidence cell links at least one section of a
detail page (``results-*.md#anchor``) whose file exists under docs/ and whose anchor is a heading
of that file under GitHub's anchor rule, and names the command that produced it (a backtick
span). Tables without a ``verdict`` column (the measurements) are not checked.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
RESULTS = DOCS / "results.md"

VERDICTS = ("reproduces", "partly", "does not reproduce", "not testable here")
LAYOUT = ["finding (paper)", "paper", "ours", "verdict", "evidence"]
VERDICT_RE = re.compile(r"^(reproduces|partly|does not reproduce|not testable here)(?:: (\S.*))?$")
LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
DETAIL_RE = re.compile(r"^(results-[A-Za-z0-9_-]+\.md)(?:#(.*))?$")
CODE_RE = re.compile(r"`([^`]+)`")
MIN_VERDICT_ROWS = 20


def split_row(line: str) -> list[str]:
    """Cells of a Markdown table row (``\\|`` is a literal bar, not a separator)."""
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", body)]


def tables(text: str) -> list[tuple[int, list[str], list[tuple[int, list[str]]]]]:
    """(line number of the header, header cells, [(line number, cells)]) of every table."""
    out = []
    lines = text.splitlines()
    i = 0
    in_code = False
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            in_code = not in_code
            i += 1
            continue
        is_table = (
            not in_code
            and line.lstrip().startswith("|")
            and i + 1 < len(lines)
            and re.fullmatch(r"\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*", lines[i + 1])
        )
        if not is_table:
            i += 1
            continue
        header = split_row(line)
        rows = []
        j = i + 2
        while j < len(lines) and lines[j].lstrip().startswith("|"):
            rows.append((j + 1, split_row(lines[j])))
            j += 1
        out.append((i + 1, header, rows))
        i = j
    return out


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: the rendered text lowercased, every character that is not a
    letter, digit, '_', '-' or space removed, spaces turned into '-'."""
    text = LINK_RE.sub(lambda m: m.group(0)[1 : m.group(0).index("]")], heading)
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (duplicates get -1, -2, ... as on GitHub)."""
    seen: Counter[str] = Counter()
    out = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if in_code or not m:
            continue
        slug = github_anchor(m.group(1))
        out.add(slug if seen[slug] == 0 else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return out


def verdict_rows(text: str) -> list[tuple[int, list[str]]]:
    rows = []
    for line_no, header, body in tables(text):
        if "verdict" not in [h.lower() for h in header]:
            continue
        assert header == LAYOUT, (
            f"docs/results.md:{line_no}: verdict table layout {header}, expected {LAYOUT}"
        )
        rows.extend(body)
    return rows


def row_problems(line_no: int, cells: list[str]) -> list[str]:
    """What is wrong with one verdict row ([] when nothing)."""
    where = f"docs/results.md:{line_no}"
    if len(cells) != len(LAYOUT):
        return [f"{where}: {len(cells)} cells, expected {len(LAYOUT)} (a raw '|' inside a cell?)"]
    problems = []
    finding, paper, ours, verdict, evidence = cells
    for name, cell in (("finding", finding), ("paper", paper), ("ours", ours)):
        if not cell:
            problems.append(f"{where}: empty {name} cell")
    m = VERDICT_RE.match(verdict)
    if not m:
        problems.append(
            f"{where}: verdict {verdict!r} does not start with one of {VERDICTS} (then ': reason')"
        )
    elif m.group(1) != "reproduces" and not m.group(2):
        problems.append(f"{where}: verdict {m.group(1)!r} without ': reason'")
    detail_links = []
    for target in LINK_RE.findall(evidence):
        d = DETAIL_RE.match(target)
        if d:
            detail_links.append((d.group(1), d.group(2)))
        elif (
            not target.startswith(("http://", "https://", "#"))
            and not (DOCS / target.split("#")[0]).exists()
        ):
            problems.append(f"{where}: link to {target!r}, which does not exist under docs/")
    if not detail_links:
        problems.append(f"{where}: no link to a detail page section (results-*.md#anchor)")
    for file, anchor in detail_links:
        path = DOCS / file
        if not path.exists():
            problems.append(f"{where}: linked page docs/{file} does not exist")
        elif anchor is not None and anchor not in anchors(path):
            problems.append(f"{where}: docs/{file} has no heading with anchor #{anchor}")
    if not any(code.strip() for code in CODE_RE.findall(evidence)):
        problems.append(f"{where}: evidence names no command (a `backtick` span)")
    return problems


def test_github_anchor_rule():
    assert github_anchor(
        "Table 2(a) analog — BM25 (`python experiments/eqi/bm25_table2.py npl debian`)"
    ) == ("table-2a-analog--bm25-python-experimentseqibm25_table2py-npl-debian")
    assert github_anchor("H1 and H2: verdict") == "h1-and-h2-verdict"
    assert github_anchor("Dense (all-MiniLM-L6-v2) vs BM25") == "dense-all-minilm-l6-v2-vs-bm25"


def test_parser_catches_broken_rows():
    good = ["f", "p", "o", "partly: only on npl", "[s](results-eqi.md) `cmd`"]
    assert row_problems(1, good) == []
    assert row_problems(1, [*good[:3], "reproduce", good[4]])  # misspelled verdict
    assert row_problems(1, [*good[:3], "Reproduces", good[4]])  # not the exact word
    assert row_problems(1, [*good[:3], "partly", good[4]])  # reason missing
    assert row_problems(
        1, [*good[:4], "[s](results-eqi.md#no-such-heading) `cmd`"]
    )  # broken anchor
    assert row_problems(1, [*good[:4], "[s](results-nothing.md#x) `cmd`"])  # missing page
    assert row_problems(1, [*good[:4], "[s](results-eqi.md) no command"])  # no command
    assert row_problems(1, [*good[:4], "`cmd` only"])  # no link


def test_every_verdict_row_follows_the_rule():
    text = RESULTS.read_text(encoding="utf-8")
    rows = verdict_rows(text)
    assert len(rows) >= MIN_VERDICT_ROWS, f"only {len(rows)} verdict rows in docs/results.md"
    problems = [p for line_no, cells in rows for p in row_problems(line_no, cells)]
    assert not problems, "\n".join(problems)


def test_the_rule_is_stated_at_the_top():
    text = RESULTS.read_text(encoding="utf-8")
    first_table = min((line_no for line_no, _, _ in tables(text)), default=None)
    top = "\n".join(text.splitlines()[: first_table or None]).lower()
    for phrase in VERDICTS:
        assert f"**{phrase}**" in top, (
            f"the rule at the top of docs/results.md does not define {phrase!r}"
        )


@pytest.mark.parametrize("verdict", VERDICTS)
def test_verdict_words_parse(verdict):
    assert VERDICT_RE.match(verdict if verdict == "reproduces" else f"{verdict}: why")
