"""The layers of ``docs/architecture.md``, enforced on the source (a small AST check).

Every ``import`` of a ``limelight`` module in ``src/limelight`` is an edge of the module graph,
wherever it stands (top level, ``if TYPE_CHECKING:``, or inside a function):

- ``import a.b.c`` → ``a.b.c``;
- ``from a.b import n`` → ``a.b`` (the statement reads the package's namespace) and ``a.b.n``
  when that is a module. So a package ``__init__`` that exports a submodule's names, and that
  submodule writing ``from <its package> import ...``, make a loop: siblings import each other by
  full module name (``import limelight.service.schemas as S``).

The rules: no module imports a higher layer; no import loop between modules; nothing outside
``limelight/cli/`` imports the CLI; no private name crosses a package (``private_imports``), nor
reaches a script under ``experiments/`` (``experiment_private_imports``); no two scripts of an
experiment import each other, directly or through others (``script_imports``); no
function in ``src/`` longer than 80 lines (``def`` to last line, docstring included) unless its
docstring says why in a sentence that starts "Long because".
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "limelight"
EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"

#: bottom to top; a module may import its own layer and the layers below it, never one above.
#: ``limelight`` itself (the package ``__init__``) re-exports everyday names of the library.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "_io", "_lazy", "_extras", "_checkpoint", "analysis", "progress"),  # shared helpers
    ("data",),
    ("retrieval",),
    ("evaluation",),
    ("exposure",),
    ("rerank", "querygen"),
    ("scale",),
    ("audit",),
    ("report", "service"),
    ("limelight",),  # the package's front door: src/limelight/__init__.py
    ("cli",),
]
LAYER = {part: i for i, parts in enumerate(LAYERS) for part in parts}
#: the house's shared internals: top-level private modules that every package may import (their
#: public names only), listed in docs/architecture.md. Any other private name stays in its package.
SHARED_INTERNALS = ("_io", "_lazy", "_extras", "_checkpoint")
MAX_LINES = 80
REASON = re.compile(r"(?:^|[.!?:;]\s+)Long because\b")


def module_name(path: Path, root: Path = SRC) -> str:
    parts = ("limelight",) + path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = SRC) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def imports(path: Path, name: str, known: set[str]) -> Iterator[tuple[str, int]]:
    """``(imported limelight module, line)`` for every import statement of a file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            if base in known:
                yield base, node.lineno
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    yield f"{base}.{alias.name}", node.lineno


def import_graph(root: Path = SRC) -> dict[str, dict[str, int]]:
    """``{module: {imported module: first line}}`` over every module under ``root``."""
    mods = modules(root)
    graph: dict[str, dict[str, int]] = {}
    for name, path in mods.items():
        edges = graph.setdefault(name, {})
        for target, line in imports(path, name, set(mods)):
            if target != name:
                edges.setdefault(target, line)
    return graph


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYER[parts[1] if len(parts) > 1 else "limelight"]


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph.get(w, ()))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def upward_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    return [f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)}), line {line}"
            for a, edges in sorted(graph.items()) for b, line in sorted(edges.items())
            if layer(b) > layer(a)]


def cli_importers(graph: dict[str, dict[str, int]]) -> list[str]:
    return [f"{a} imports {b}, line {line}" for a, edges in sorted(graph.items())
            for b, line in sorted(edges.items())
            if (b == "limelight.cli" or b.startswith("limelight.cli."))
            and not (a == "limelight.cli" or a.startswith("limelight.cli."))]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _package(module: str) -> str:
    """The package of a ``limelight`` module: its directory under ``src/limelight`` (``exposure``
    for ``limelight.exposure.eqi.lexicon``), or the top-level module itself (``_io``, ``errors``;
    ``limelight`` for the package's ``__init__``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "limelight"


def _crossing(source: str, target: list[str]) -> str | None:
    """The private part of ``target`` (a dotted ``limelight`` path, split) that ``source`` may not
    import, or None: a name starting with ``_`` (a module or a symbol) of another package, or a
    private symbol of a shared internal (whose module name itself is allowed)."""
    if len(target) < 2 or _package(".".join(target)) == _package(source):
        return None
    rest = target[2:] if target[1] in SHARED_INTERNALS else target[1:]
    bad = [p for p in rest if _private(p)]
    return ".".join(target) if bad else None


def private_imports(root: Path = SRC) -> list[str]:
    """``module:line name`` of every private name one package takes from another (a package: a
    directory under ``src/limelight``, or a top-level module): ``import``/``from ... import``
    of a module or symbol starting with ``_`` (``limelight.retrieval._kernels``,
    ``from limelight.retrieval.index_dir import _budget``), anywhere in a file, and
    ``alias._name`` on a ``limelight`` module bound by an import (``import
    limelight.retrieval.bm25 as b; b._invert``). ``SHARED_INTERNALS`` are exempt by module name."""
    mods = modules(root)
    out = []
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out += _file_private_imports(path, name, package, mods)
    return sorted(set(out))


def experiment_private_imports(root: Path = EXPERIMENTS, src: Path = SRC) -> list[str]:
    """``experiments/...py:line name`` of every private ``limelight`` name a script under
    ``root`` takes (the rules of ``private_imports``, the scripts being outside every package):
    experiments use the public API (and the shared internals' public names)."""
    mods = modules(src)
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        out += [f"{rel}:{hit.split(':', 1)[1]}"
                for hit in _file_private_imports(path, "<experiments>", "<experiments>", mods)]
    return sorted(set(out))


def _file_private_imports(path: Path, name: str, package: str, mods: dict[str, Path]) -> list[str]:
    """``name:line target`` of each private ``limelight`` name the file at ``path`` (the module
    ``name`` of ``package``) imports or reads through an imported module's alias."""
    out = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases: dict[str, str] = {}  # local name -> limelight module it is bound to
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "limelight":
                    targets.append(a.name)
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else "limelight"
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            if base.split(".")[0] != "limelight":
                continue
            for a in node.names:
                targets.append(f"{base}.{a.name}")
                if f"{base}.{a.name}" in mods:
                    aliases[a.asname or a.name] = f"{base}.{a.name}"
        for t in targets:
            bad = _crossing(name, t.split("."))
            if bad:
                out.append(f"{name}:{node.lineno} {bad}")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr)
                and isinstance(node.value, ast.Name) and node.value.id in aliases):
            bad = _crossing(name, f"{aliases[node.value.id]}.{node.attr}".split("."))
            if bad:
                out.append(f"{name}:{node.lineno} {bad}")
    return out


def script_imports(folder: Path) -> dict[str, dict[str, int]]:
    """``{script: {sibling script it imports: first line}}`` for the scripts of one folder (an
    experiment's modules import their siblings by bare name, anywhere in a file)."""
    names = {p.stem: p for p in sorted(folder.glob("*.py"))}
    graph: dict[str, dict[str, int]] = {}
    for name, path in names.items():
        edges = graph.setdefault(name, {})
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = ([a.name.split(".")[0] for a in node.names] if isinstance(node, ast.Import)
                       else [node.module.split(".")[0]] if isinstance(node, ast.ImportFrom)
                       and node.module and not node.level else [])
            for t in targets:
                if t in names and t != name:
                    edges.setdefault(t, node.lineno)
    return graph


#: the kinds' own modules: where a kind may be named
KIND_MODULES = ("limelight/retrieval/kinds/", "limelight/rerank/kind.py")
#: comparisons with a kind's name that are not about a kind: ``(file, string) -> (count, why)``
NOT_KINDS = {
    ("limelight/retrieval/spec.py", "dense"): (1, "an index directory's part (meta['built'])"),
}
#: an ASGI scope's or message's ``x["type"]`` compared with these is not about a kind (``http``)
ASGI_TYPES = frozenset({"http", "websocket", "lifespan"})
#: kind names still compared outside the kinds' modules (issue 55 item 1 emptied it; it may only
#: stay empty): ``(file, string) -> count``
KIND_NAME_DEBT: dict[tuple[str, str], int] = {}


def kind_name_comparisons(names: set[str], root: Path = SRC) -> dict[tuple[str, str], list[int]]:
    """``{(file, kind name): [lines]}`` of every comparison with a string constant that is a kind's
    name, whatever is compared with it, outside the kinds' own modules (``KIND_MODULES``):
    ``==``, ``!=``, ``in``, ``not in``, ``is``, ``is not`` (the name alone or in a tuple, list or
    set, on either side), a ``case "bm25":`` of a ``match`` (or ``case "dense" | "hybrid":``),
    and ``x.startswith("dense")`` / ``endswith``. An ASGI ``scope["type"] != "http"`` is no kind
    test (``ASGI_TYPES``)."""
    def strings(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return [s for e in node.elts for s in strings(e)]
        if isinstance(node, ast.MatchValue):
            return strings(node.value)
        if isinstance(node, ast.MatchOr):
            return [s for p in node.patterns for s in strings(p)]
        if isinstance(node, ast.MatchAs) and node.pattern is not None:
            return strings(node.pattern)
        return []

    def compared(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Compare):
            sides = (node.left, *node.comparators)
            found = [s for side in sides for s in strings(side)]
            asgi = any(isinstance(x, ast.Subscript) and isinstance(x.slice, ast.Constant)
                       and x.slice.value == "type" for x in sides)
            return [s for s in found if not (asgi and s in ASGI_TYPES)]
        if isinstance(node, ast.match_case):
            return strings(node.pattern)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("startswith", "endswith") and node.args):
            return strings(node.args[0])
        return []

    out: dict[tuple[str, str], list[int]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        if rel.startswith(KIND_MODULES):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for s in sorted(set(compared(node)) & names):
                line = node.pattern.lineno if isinstance(node, ast.match_case) else node.lineno
                out.setdefault((rel, s), []).append(line)
    return out


def unexpected_kind_names(found: dict[tuple[str, str], list[int]]) -> list[str]:
    """The comparisons of ``found`` beyond ``NOT_KINDS`` and ``KIND_NAME_DEBT``."""
    allowed = {k: n for k, (n, _) in NOT_KINDS.items()}
    for k, n in KIND_NAME_DEBT.items():
        allowed[k] = allowed.get(k, 0) + n
    return [f"{f}:{','.join(map(str, lines))} compares with {s!r}"
            for (f, s), lines in sorted(found.items()) if len(lines) > allowed.get((f, s), 0)]


def long_functions(root: Path = SRC) -> list[str]:
    """``file:line name (n lines)`` of every function (methods and nested ones too) longer than
    ``MAX_LINES`` whose docstring gives no reason (a sentence starting "Long because")."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_LINES and not REASON.search(ast.get_docstring(node) or ""):
                    out.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({n} lines)")
    return out


def plant(tmp_path: Path, files: dict[str, str]) -> Path:
    """A small ``limelight`` tree of ``files`` (path → text) under ``tmp_path``; its root."""
    pkg = tmp_path / "limelight"
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


# ---- the rules ----------------------------------------------------------------------------------
def test_every_module_has_a_layer():
    """A new top-level module or package goes into ``LAYERS`` (and docs/architecture.md)."""
    unplaced = sorted({m.split(".")[1] for m in modules() if "." in m} - set(LAYER))
    assert unplaced == []


def test_no_module_imports_a_higher_layer():
    bad = upward_imports(import_graph())
    assert not bad, "\n".join(bad)


def test_no_import_loops():
    bad = cycles(import_graph())
    assert not bad, "\n".join(" <-> ".join(c) for c in bad)


def test_nothing_outside_the_cli_imports_it():
    bad = cli_importers(import_graph())
    assert not bad, "\n".join(bad)


def test_no_private_name_crosses_a_package():
    """What one package uses of another is public: a private module or symbol (``_name``) stays
    in its package, but for the shared internals (``SHARED_INTERNALS``, by module name)."""
    bad = private_imports()
    assert not bad, "make these public (and document them) or keep them in their package:\n" + "\n".join(bad)


def test_the_private_import_check_catches_a_crossing(tmp_path):
    """Each way of taking a private name from another package is caught on a planted tree; what
    stays in its package, the shared internals' public names and dunders pass."""
    pkg = plant(tmp_path, {
        "__init__.py": "from limelight.data import __doc__\n",
        "_io.py": "def atomic_path(): ...\ndef _tmp(): ...\n",
        "data/__init__.py": "",
        "retrieval/__init__.py": "",
        "retrieval/_kernels.py": "def hash_(): ...\n",
        "retrieval/bm25.py": ("from . import _kernels\nfrom limelight.retrieval._kernels import hash_\n"
                              "from limelight._io import atomic_path\n"),
        "retrieval/index_dir.py": "def _budget(): ...\n",
        "exposure/__init__.py": "",
        "exposure/eqi/__init__.py": "",
        "exposure/eqi/lexicon.py": ("from limelight.retrieval._kernels import hash_\n"
                                    "import limelight.retrieval._kernels as K\n"
                                    "from limelight.exposure.eqi import _inner\n"),
        "scale/__init__.py": "",
        "scale/index.py": ("from limelight.retrieval.index_dir import _budget\n"
                           "from limelight._io import _tmp, atomic_path\n"
                           "def f():\n    import limelight.retrieval.index_dir as ix\n"
                           "    return ix._budget() + ix.__name__\n"),
    })
    assert private_imports(pkg) == [
        "limelight.exposure.eqi.lexicon:1 limelight.retrieval._kernels.hash_",
        "limelight.exposure.eqi.lexicon:2 limelight.retrieval._kernels",
        "limelight.scale.index:1 limelight.retrieval.index_dir._budget",
        "limelight.scale.index:2 limelight._io._tmp",
        "limelight.scale.index:5 limelight.retrieval.index_dir._budget",
    ]


def test_no_kind_is_named_outside_its_module():
    """Code outside a kind's own module asks the registered kind for a capability or a declared
    parameter; it never compares a string with a kind's name (``kind == "bm25"``, ``model in
    ("dense", "hybrid")``, whatever the variable is called). ``NOT_KINDS`` lists the same
    strings compared for another meaning; ``KIND_NAME_DEBT`` what is left to remove (it may only
    shrink: an entry no longer found fails too, so that the list follows the code)."""
    from limelight.retrieval.systems import kind_names

    found = kind_name_comparisons(set(kind_names()))
    bad = unexpected_kind_names(found)
    assert not bad, "ask the kind (get_kind(k).has(CAPABILITY), its params) instead:\n" + "\n".join(bad)
    stale = [f"{f} {s!r}" for (f, s), n in KIND_NAME_DEBT.items() if len(found.get((f, s), [])) < n]
    assert not stale, "remove from KIND_NAME_DEBT (fixed):\n" + "\n".join(stale)


def test_the_kind_name_check_sees_every_comparison(tmp_path):
    """Whatever the variable is called, a comparison with a kind's name is found (``==``,
    ``!=``, ``is``, ``in`` a tuple or set, the name on either side, a ``match`` case, a
    ``startswith``); a kind's own module and other strings pass."""
    pkg = plant(tmp_path, {
        "audit/x.py": ('def f(spec, m, settings, engine):\n    if spec.kind == "bm25": pass\n'
                       '    if m in ("dense", "hybrid"): pass\n    if "reranked" != settings.get("model"): pass\n'
                       '    if engine == "ray" or m not in {"run"}: pass\n'),
        "service/y.py": ('def g(model, name):\n    if model == "bm25":\n        return 1\n'
                         '    match name:\n        case "dense" | "hybrid":\n            return 2\n'
                         '        case "other":\n            return 3\n'
                         '    if scope["type"] != "http" or settings["type"] == "bm25": pass\n'
                         '    return model is "run" or name.startswith("reranked")\n'),
        "retrieval/kinds/bm25.py": 'def g(kind):\n    return kind == "bm25"\n',
    })
    found = kind_name_comparisons({"bm25", "dense", "hybrid", "reranked", "run", "http"}, pkg)
    assert found == {("limelight/audit/x.py", "bm25"): [2], ("limelight/audit/x.py", "dense"): [3],
                     ("limelight/audit/x.py", "hybrid"): [3], ("limelight/audit/x.py", "reranked"): [4],
                     ("limelight/audit/x.py", "run"): [5],
                     ("limelight/service/y.py", "bm25"): [2, 9], ("limelight/service/y.py", "dense"): [5],
                     ("limelight/service/y.py", "hybrid"): [5], ("limelight/service/y.py", "run"): [10],
                     ("limelight/service/y.py", "reranked"): [10]}
    assert len(unexpected_kind_names(found)) == 10


def test_the_kind_name_check_fails_on_a_planted_model_test(tmp_path):
    """The real check over a copy of ``src/limelight`` with one ``if model == "bm25"`` planted in
    a module above the kinds: the copy fails where the source passes."""
    import shutil

    from limelight.retrieval.systems import kind_names

    copy = tmp_path / "limelight"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    names = set(kind_names())
    assert unexpected_kind_names(kind_name_comparisons(names, copy)) == []
    target = copy / "service" / "core.py"
    target.write_text(target.read_text(encoding="utf-8")
                      + '\n\ndef planted(model):\n    return 1 if model == "bm25" else 0\n', encoding="utf-8")
    bad = unexpected_kind_names(kind_name_comparisons(names, copy))
    assert len(bad) == 1 and bad[0].startswith("limelight/service/core.py:") and "'bm25'" in bad[0]


def defined_functions(name: str, root: Path = SRC) -> list[str]:
    """``file:line`` of every function called ``name`` defined at a module's top level."""
    return [f"{p.relative_to(root.parent).as_posix()}:{node.lineno}" for p in sorted(root.rglob("*.py"))
            for node in ast.parse(p.read_text(encoding="utf-8")).body
            if isinstance(node, ast.FunctionDef) and node.name == name]


def test_one_run_audit():
    """One front door runs an audit as a library call (``limelight.report.run_audit``, audit and
    report, what ``limelight audit`` runs); a second ``run_audit`` fails (issue 55)."""
    assert [h.split(":")[0] for h in defined_functions("run_audit")] == ["limelight/report/runner.py"]


def test_the_run_audit_check_finds_a_second_one(tmp_path):
    pkg = plant(tmp_path, {"report/runner.py": "def run_audit(): ...\n",
                           "audit/runner.py": "import os\n\n\ndef run_audit(cfg): ...\n"})
    assert defined_functions("run_audit", pkg) == ["limelight/audit/runner.py:4",
                                                   "limelight/report/runner.py:1"]


#: what only an exposure job's one assembler calls (``limelight.audit.job``: ``ExposureJob.run``
#: computes or resumes a store; the job checks its query set as it fingerprints it,
#: ``queries_fingerprint(..., check=True)``, and ``job_queries`` checks the audit's), outside the
#: ``exposure`` package that defines them
JOB_CALLS = ("compute_exposure", "validate_queries")
JOB_ASSEMBLER = "limelight/audit/job.py"


def _checks(call: ast.Call) -> bool:
    """Whether a call passes ``check=`` anything but a literal false (``queries_fingerprint``'s
    check of a job's query set)."""
    return any(k.arg == "check" and not (isinstance(k.value, ast.Constant) and not k.value.value)
               for k in call.keywords)


def job_assemblers(root: Path = SRC) -> dict[str, list[str]]:
    """``{file: [name:line, ...]}`` of every call of a ``JOB_CALLS`` name (``f(...)`` or
    ``module.f(...)``), or of ``queries_fingerprint`` with ``check=``, in a module outside
    ``limelight/exposure/``: the places that assemble an exposure job (a store computed from a
    system, its fingerprint and its queries)."""
    out: dict[str, list[str]] = {}
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root.parent).as_posix()
        if rel.startswith("limelight/exposure/"):
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name in JOB_CALLS or (name == "queries_fingerprint" and _checks(node)):
                    out.setdefault(rel, []).append(f"{name}:{node.lineno}")
    return out


def test_one_job_assembler():
    """One exposure job assembler (issue 55, "one door"): ``limelight exposure compute``, the
    audit's exposure stage and its CtrlQGen stage build an ``ExposureJob``
    (``limelight.audit.job``), the only module outside the ``exposure`` package that computes a
    store (``compute_exposure``) or checks a job's queries (``validate_queries``, or
    ``queries_fingerprint`` with ``check=``); a second assembler, calling any itself, fails."""
    found = job_assemblers()
    assert list(found) == [JOB_ASSEMBLER], found
    assert sorted(c.split(":")[0] for c in found[JOB_ASSEMBLER]) == sorted(
        [*JOB_CALLS, "queries_fingerprint"])


def test_the_job_assembler_check_finds_a_second_one(tmp_path):
    pkg = plant(tmp_path, {
        "audit/job.py": "from limelight.exposure.compute import compute_exposure\n\n\n"
                        "def run(job):\n    return compute_exposure(job)\n",
        "exposure/compute.py": "def compute_exposure(r): ...\n\n\ndef f(r):\n    return compute_exposure(r)\n",
        "cli/exposure.py": "import limelight.exposure.fingerprints as fp\n\n\n"
                           "def compute(qs):\n    fp.validate_queries(qs)\n",
        "audit/inputs.py": "from limelight.exposure.fingerprints import queries_fingerprint as q\n\n\n"
                           "def f(qs):\n    return q(qs), queries_fingerprint(qs, check=True)\n",
        "audit/stages/ctrlqgen.py": "def body(a):\n    from limelight.exposure.compute import compute_exposure\n"
                                    "    return compute_exposure(a.retriever(), a.queries, a.dir)\n"})
    assert job_assemblers(pkg) == {"limelight/audit/inputs.py": ["queries_fingerprint:5"],
                                   "limelight/audit/job.py": ["compute_exposure:5"],
                                   "limelight/audit/stages/ctrlqgen.py": ["compute_exposure:3"],
                                   "limelight/cli/exposure.py": ["validate_queries:5"]}


# ---- the walk of a query log through `limelight exposure compute` (issue 55) --------------------
#: its stops, in call order, from the option ``--queries FILE`` to the query table handed to the
#: engine (inside the ``ShardJob`` it computes) and to the store (the function that writes its
#: ``queries.parquet``): docs/architecture.md, "The walk of a query log"
LOG_WALK = [
    "cli/exposure.compute",
    "audit/job.ExposureJob (made)",  # (its __post_init__ reads, checks and fingerprints the log)
    "data/loaders.load_queries_file",
    "exposure/fingerprints.queries_fingerprint",
    "audit/job.ExposureJob.run",
    "exposure/compute.compute_exposure",
    "exposure/engine.ShardJob (made)",
    "exposure/store._write_inputs",
]
#: the engine's and the store's own stops after the hand-over (a batch's texts to the retriever;
#: the rows of ``queries.parquet``)
LOG_WALK_INSIDE = ["exposure/engine.LocalEngine.compute", "exposure/shards._search_topk",
                   "exposure/store._queries_table"]
#: what a query set's own class answers without reading its rows
_NOT_ROWS = {"__len__", "__init__", "__repr__", "__bool__", "name", "on_disk", "has_field"}


class _Walk:
    """The stops of a query log through one ``limelight`` command, traced with ``sys.setprofile``
    (and ``threading.setprofile``: the store's writer thread). A stop is a function or method
    of ``src/limelight`` the log passes through, where a reader jumps to another definition:
    one handed the log's path, its query table (or a query set made from it) or a batch of its
    texts, as an argument, as ``self`` or in a closure, or a job object holding the table when
    its code names ``queries``; and which reads the table's rows (calls one of its methods
    other than ``_NOT_ROWS``), hands it on to a stop, or is a class made with it
    (``Class (made)``). Functions nested in one are that one; the reader inside ``data``
    (and ``_io``) is one stop, the outermost; the query set's own methods and the system (the
    retriever under ``retrieval``) are not stops. ``inside``: the stops beneath the engine (a
    ``ShardEngine``'s method) or beneath the store's writer (the first store function handed
    the table)."""

    def __init__(self, log: Path):
        from limelight.data.queries import Queries
        from limelight.exposure.engine import ShardEngine

        self.src = str(_imported_src()) + "/"
        self.log, self.queries_cls, self.engine_cls = str(log), Queries, ShardEngine
        self.tracked: dict[int, object] = {}  # id → the table, a query set made from it, texts
        self.handed: dict = {}  # frame → its stop's name
        self.first: dict[str, int] = {}  # stop → the order of its first call
        self.stops: dict[str, bool] = {}  # stop → whether it is inside the engine or store
        self.checks: list[str] = []  # the checks of the query set made
        self.texts: set = set()  # frames of ``texts_between`` (the texts they return are tracked)

    def name(self, code) -> str:
        rel = code.co_filename[len(self.src):].removesuffix(".py")
        return f"{rel}.{code.co_qualname.split('.<locals>')[0]}"

    def carries(self, v) -> bool:
        if isinstance(v, str | Path):
            return str(v) == self.log
        return id(v) in self.tracked

    def holds(self, v) -> bool:  # a job object holding the table
        q = getattr(v, "__dict__", {}).get("queries") if hasattr(type(v), "__dataclass_fields__") else None
        return q is not None and id(q) in self.tracked

    def stop(self, frame, name: str) -> None:
        if name not in self.stops:
            self.first.setdefault(name, len(self.first))
            self.stops[name] = self._beneath(frame)
        self.mark(frame.f_back)

    def _beneath(self, frame) -> bool:
        """Whether ``frame`` runs inside the engine, or beneath the store's writer."""
        up = frame
        while up is not None:
            if isinstance(up.f_locals.get("self"), self.engine_cls):
                return True
            if up is not frame and self.handed.get(up, "").startswith("exposure/store."):
                return True
            up = up.f_back
        return False

    def mark(self, frame) -> None:
        """The nearest stop up the stack from ``frame`` passes the log on."""
        while frame is not None and frame not in self.handed:
            frame = frame.f_back
        if frame is not None:
            self.stop(frame, self.handed[frame])

    def __call__(self, frame, event, arg):
        code = frame.f_code
        if event == "return":
            if (frame in self.handed and isinstance(arg, self.queries_cls)) or frame in self.texts:
                self.tracked[id(arg)] = arg
            self.handed.pop(frame, None)
            self.texts.discard(frame)
            return
        if event != "call":
            return
        args = frame.f_locals
        me = args.get("self")
        if isinstance(me, self.queries_cls) and id(me) in self.tracked:
            if code.co_name == "texts_between":  # (the texts it returns are tracked on return)
                self.texts.add(frame)
            if code.co_name not in _NOT_ROWS:
                self.mark(frame.f_back)
            return
        if code.co_name in ("queries_fingerprint", "validate_queries") and any(
                self.carries(v) for v in args.values()):
            self.checks.append(f"{code.co_name}(check={args['check']})" if "check" in args else code.co_name)
        if not (any(self.carries(v) for v in args.values())
                or ("queries" in code.co_names and any(self.holds(v) for v in args.values()))):
            return
        if code.co_name == "__init__" and me is not None and type(me).__module__.startswith("limelight."):
            mod = type(me).__module__.removeprefix("limelight.").replace(".", "/")
            self.stop(frame, f"{mod}.{type(me).__qualname__} (made)")
            return
        if not code.co_filename.startswith(self.src) or code.co_filename.startswith(self.src + "retrieval/"):
            return
        up = frame.f_back
        if (code.co_filename.startswith((self.src + "data/", self.src + "_io")) and up is not None
                and up.f_code.co_filename.startswith(self.src + "data/")):
            return  # the reader's own calls
        self.handed[frame] = self.name(code)
        self.first.setdefault(self.handed[frame], len(self.first))  # (call order)
        if code.co_filename.startswith(self.src + "data/"):  # the reader: the stop returning the table
            self.stop(frame, self.handed[frame])

    def order(self) -> list[str]:
        return sorted(self.stops, key=self.first.get)


def _imported_src() -> Path:
    """The folder of the limelight being imported (the installed wheel's under `make test`, not
    ``SRC``): where the tracer looks for the library's own frames."""
    import limelight

    return Path(limelight.__file__).parent


def log_walk(tmp_path: Path, data_dir: Path) -> _Walk:
    """The walk of a 200-line query log through ``limelight exposure compute`` over adi, BM25."""
    import gzip
    import threading

    from _inproc import run_cli

    log = tmp_path / "log.tsv"
    with gzip.open(data_dir / "querylogs" / "queries.tsv.gz", "rt", encoding="utf-8") as f:
        log.write_text("".join(next(f) for _ in range(201)), encoding="utf-8")
    assert run_cli("index", "--collection", "adi", "--out", tmp_path / "idx").returncode == 0
    walk = _Walk(log)
    sys.setprofile(walk)
    threading.setprofile(walk)
    try:
        res = run_cli("exposure", "compute", "--queries", log, "--index", tmp_path / "idx",
                      "--out", tmp_path / "store", "--depth", 10)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    assert res.returncode == 0, res.stderr
    return walk


def test_the_query_log_walk_of_exposure_compute(tmp_path, data_dir):
    """Issue 55: following the query log through ``limelight exposure compute``, from the option
    to the query table handed to the engine and to the store, takes at most 8 stops, those of
    ``LOG_WALK`` in that order (docs/architecture.md), and the engine's and store's own stops
    are ``LOG_WALK_INSIDE``; the log is checked once (``queries_fingerprint(check=True)``, its
    one pass). A layer that grows back on the path (a helper handed the table, a second check)
    fails here."""
    walk = log_walk(tmp_path, data_dir)
    to_handover = [s for s in walk.order() if not walk.stops[s]]
    assert to_handover == LOG_WALK, walk.order()
    assert len(to_handover) <= 8
    assert sorted(s for s in walk.order() if walk.stops[s]) == sorted(LOG_WALK_INSIDE), walk.order()
    assert walk.checks == ["queries_fingerprint(check=True)"]


def test_the_walk_sees_a_layer_that_grows_back(tmp_path, data_dir, monkeypatch):
    """The tracer sees a pass-through layer put back on the path: ``compute_exposure`` reached
    through a helper of ``src/limelight`` (planted: compiled under a file name there) that checks
    the queries again, one stop for the helper and one for the second check."""
    from limelight.exposure import compute as compute_mod

    ns: dict = {}
    exec(compile("from limelight.exposure.fingerprints import validate_queries\n\n\n"
                 "def through(real):\n"
                 "    def f(retriever, queries, out, *args, **kw):\n"
                 "        validate_queries(queries)\n"
                 "        return real(retriever, queries, out, *args, **kw)\n"
                 "    return f\n", str(_imported_src() / "exposure" / "planted.py"), "exec"), ns)
    monkeypatch.setattr(compute_mod, "compute_exposure", ns["through"](compute_mod.compute_exposure))
    walk = log_walk(tmp_path, data_dir)
    grown = [s for s in walk.order() if not walk.stops[s]]
    assert grown == [*LOG_WALK[:5], "exposure/planted.through", "exposure/fingerprints.validate_queries",
                     *LOG_WALK[5:]], grown
    assert walk.checks == ["queries_fingerprint(check=True)", "validate_queries"]


def test_experiments_use_only_public_names():
    """The scripts under ``experiments/`` take no private ``limelight`` name (the rules of
    ``private_imports``; the shared internals' public names are allowed)."""
    bad = experiment_private_imports()
    assert not bad, "use (or make) a public name:\n" + "\n".join(bad)


def test_no_import_loops_in_experiments():
    """No two scripts of an experiment import each other, directly or through others."""
    bad = [f"{folder.name}: " + " <-> ".join(c) for folder in sorted(EXPERIMENTS.iterdir())
           if folder.is_dir() for c in cycles(script_imports(folder))]
    assert not bad, "\n".join(bad)


def test_the_experiment_checks_catch_a_violation(tmp_path):
    """A planted experiment with a private import (a from-import, a module alias) and a loop of
    three scripts is caught; the shared internals' public names and a loop-free folder pass."""
    exp = tmp_path / "experiments"
    (exp / "study").mkdir(parents=True)
    (exp / "study" / "pipeline.py").write_text("import sys\nfrom stages import run\n")
    (exp / "study" / "stages.py").write_text("def run():\n    from evals import score\n")
    (exp / "study" / "evals.py").write_text(
        "from limelight.exposure.plots import _save\nfrom limelight._io import atomic_path\n"
        "import limelight.evaluation.searchers as S\nimport pipeline\nkey = S._natural\n")
    (exp / "other").mkdir()
    (exp / "other" / "run.py").write_text("import report\nfrom limelight._io import _tmp\n")
    (exp / "other" / "report.py").write_text("import json\n")
    assert experiment_private_imports(exp) == [
        "experiments/other/run.py:2 limelight._io._tmp",
        "experiments/study/evals.py:1 limelight.exposure.plots._save",
        "experiments/study/evals.py:5 limelight.evaluation.searchers._natural",
    ]
    assert cycles(script_imports(exp / "study")) == [["evals", "pipeline", "stages"]]
    assert cycles(script_imports(exp / "other")) == []


def test_no_long_function_without_a_reason():
    bad = long_functions()
    assert not bad, "split these, or say why in the docstring (\"Long because ...\"):\n" + "\n".join(bad)


def test_the_checks_catch_a_violation(tmp_path):
    """Each rule fails on a tree that breaks it (a copy of a small tree, not the source)."""
    pkg = plant(tmp_path, {
        "__init__.py": "",
        "errors.py": "",
        "data/__init__.py": "from limelight.data.run import Run\n",
        "data/run.py": "def f():\n    from limelight.data import Run\n\n\nclass Run: ...\n",
        "retrieval/__init__.py": "",
        "retrieval/bm25.py": "def f():\n    from limelight.exposure import gini\n",
        "exposure/__init__.py": "",
        "audit/__init__.py": "import limelight.cli.root\n",
        "cli/__init__.py": "",
        "cli/root.py": "",
        "service/long.py": "def f():\n" + "    x = 1\n" * MAX_LINES,
        "service/reasoned.py": 'def g():\n    """Long because it must be."""\n' + "    x = 1\n" * MAX_LINES,
    })
    graph = import_graph(pkg)
    assert upward_imports(graph) == [
        "limelight.audit (layer 7) imports limelight.cli.root (layer 10), line 1",
        "limelight.retrieval.bm25 (layer 2) imports limelight.exposure (layer 4), line 2"]
    assert cycles(graph) == [["limelight.data", "limelight.data.run"]]
    assert cli_importers(graph) == ["limelight.audit imports limelight.cli.root, line 1"]
    assert long_functions(pkg) == [f"limelight/service/long.py:1 f ({MAX_LINES + 1} lines)"]


# ---- the public API -----------------------------------------------------------------------------
PACKAGES = sorted(m for m, p in modules().items() if p.name == "__init__.py")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_export_resolves(package):
    """Each name of a package's ``__all__`` (written once, in its ``__init__``) imports."""
    import importlib

    if package == "limelight.scale":
        pytest.importorskip("ray", reason="the scale extra")
    mod = importlib.import_module(package)
    missing = [name for name in mod.__all__ if not hasattr(mod, name)]
    assert missing == [] and len(set(mod.__all__)) == len(mod.__all__)


def test_the_deprecated_exposure_names_warn():
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "import limelight.exposure as e\n"
            "assert not {'Cutoff', 'DCG', 'Exhaustive', 'RBP'} & (set(e.__all__) | set(dir(e)))\n"
            "for name in ('Cutoff', 'DCG', 'Exhaustive', 'RBP'):\n"
            "    try:\n        getattr(e, name)\n    except DeprecationWarning:\n        pass\n"
            "    else:\n        raise SystemExit(name + ' does not warn')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_the_front_door_and_the_cli_start_light():
    """``import limelight`` and the CLI's import load no heavy library (the lazy exports); not
    even numpy, which alone costs ~0.2 s of ``limelight --help`` (issue 46: ≤ 0.5 s)."""
    code = ("import sys, limelight, limelight.cli, limelight.data, limelight.retrieval\n"
            "print(sorted(m for m in ('numpy', 'pandas', 'torch', 'scipy', 'numba', 'sentence_transformers',"
            " 'fastapi', 'matplotlib') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"
