"""Lazy package exports (PEP 562), so that ``import limelight.x.cli`` does not load torch or numba.

A package's exports are written once, as ordinary imports in its ``__init__.py``::

    from typing import TYPE_CHECKING

    from limelight._lazy import lazy_exports

    if TYPE_CHECKING:  # the exports: resolved on first use (lazy_exports reads this block)
        from limelight.data.run import Run

    __all__, __getattr__, __dir__ = lazy_exports(__name__)

Type checkers and IDEs read the block as imports; at run time ``lazy_exports`` reads the same
statements from the file and imports a name's module on first access. A ``from limelight... import``
at the top level of the file (outside the block) is an eager export: it runs as usual and is part
of ``__all__`` too. (ruff's F401, unused import, is off for package ``__init__`` files: their
imports are their exports.)
"""

from __future__ import annotations

import _ast  # built in: parsing a package's own ``__init__`` without loading the ast module
import sys
import types

TYPE_CHECKING = False  # typing's, without importing typing or collections at start-up
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


class _LazyPackage(types.ModuleType):
    """A package module whose exported names win over same-named submodules.

    Importing ``pkg.train`` makes Python set the attribute ``pkg.train`` to the submodule; when
    ``train`` is also an exported function (as an eager ``from .train import train`` would have
    made it), the export must stay what the package attribute resolves to.
    """

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and name in self.__dict__.get("__all__", ()):
            return
        super().__setattr__(name, value)


def _is_type_checking(test: _ast.expr) -> bool:
    return ((isinstance(test, _ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, _ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _exported_imports(path: str) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """``(eager names, {lazy name: (module, name in module)})`` of an ``__init__.py``: its
    ``from limelight... import`` statements at the top level and in ``if TYPE_CHECKING:``."""
    with open(path, encoding="utf-8") as f:
        tree = compile(f.read(), path, "exec", _ast.PyCF_ONLY_AST)

    def imports(body: list[_ast.stmt]):
        for stmt in body:
            if (isinstance(stmt, _ast.ImportFrom) and not stmt.level and stmt.module
                    and stmt.module.startswith("limelight.") and stmt.module != __name__):
                for alias in stmt.names:
                    yield alias.asname or alias.name, stmt.module, alias.name

    eager = [name for name, _, _ in imports(tree.body)]
    lazy = {name: (module, attr) for node in tree.body
            if isinstance(node, _ast.If) and _is_type_checking(node.test)
            for name, module, attr in imports(node.body)}
    return eager, lazy


def lazy_exports(package: str, deprecated: Mapping[str, str] | None = None
                 ) -> tuple[list[str], Callable, Callable]:
    """``(__all__, __getattr__, __dir__)`` of a package, from the imports in its ``__init__.py``.

    ``__all__`` is every name the file imports from a ``limelight`` module (at the top level, eager,
    or in ``if TYPE_CHECKING:``, lazy); a lazy name's module is imported on first access and the
    value cached on the package. ``deprecated`` maps former names, still importable (resolved the
    same way) but neither in ``__all__`` nor in ``dir()``, to the module that defines them (and
    warns, when first resolved).
    """
    pkg = sys.modules[package]
    if pkg.__file__ is None:
        raise ImportError(f"{package}: lazy exports need the package's __init__.py source")
    eager, lazy = _exported_imports(pkg.__file__)
    deprecated = dict(deprecated or {})
    exports = eager + [name for name in lazy if name not in eager]
    pkg.__class__ = _LazyPackage

    def __getattr__(name: str):
        try:
            module, attr = lazy[name] if name in lazy else (deprecated[name], name)
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        try:
            __import__(module)  # importlib.import_module's work, without importing importlib
        except ModuleNotFoundError as e:  # a package of an extra: one line naming the extra
            from limelight._extras import missing_extra

            err = missing_extra(e)
            if err is None:
                raise
            raise err from None
        value = getattr(sys.modules[module], attr)
        types.ModuleType.__setattr__(pkg, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(pkg)) | set(exports))

    return exports, __getattr__, __dir__
