"""MkDocs hook: the results pages stay as they are in the repository; their links to files outside
docs/ (an experiment's report, a plan) become the repository path in a code span, since the site
does not hold those files. A link to a path that does not exist stays a link, so that ``mkdocs
build --strict`` reports it as broken."""

from __future__ import annotations

import re
from pathlib import Path

_LINK = re.compile(r"(!?)\[([^\]]*)\]\((\.\./[^)#\s]+)(#[^)\s]*)?\)")


def on_page_markdown(markdown: str, page, config, files) -> str:
    docs = Path(config["docs_dir"]).resolve()
    repo = docs.parent
    src = page.file.abs_src_path
    if src is None:  # a generated page: it links only inside the site
        return markdown
    here = Path(src).resolve().parent

    def rewrite(m: re.Match) -> str:
        target = (here / m.group(3)).resolve()
        if target.is_relative_to(docs) or not target.is_relative_to(repo) or not target.exists():
            return m.group(0)
        rel = target.relative_to(repo).as_posix()
        text = m.group(2)
        return f"{text} (`{rel}` in the repository)" if m.group(1) == "" else f"`{rel}`"

    return _LINK.sub(rewrite, markdown)
