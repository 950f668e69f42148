"""Lazy package exports (PEP 562), so that ``import limelight.x.cli`` does not load torch or numba."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for a package whose public names live in submodules.

    ``exports`` maps each public name to the module that defines it; the module is imported on
    first access and the attribute cached on the package.
    """
    pkg = importlib.import_module(package)

    def __getattr__(name: str):
        try:
            module = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), name)
        setattr(pkg, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(pkg)) | set(exports))

    return __getattr__, __dir__
