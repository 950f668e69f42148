"""Lazy package exports (PEP 562), so that ``import limelight.x.cli`` does not load torch or numba."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable


class _LazyPackage(types.ModuleType):
    """A package module whose exported names win over same-named submodules.

    Importing ``pkg.train`` makes Python set the attribute ``pkg.train`` to the submodule; when
    ``train`` is also an exported function (as an eager ``from .train import train`` would have
    made it), the export must stay what the package attribute resolves to.
    """

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and name in self.__dict__.get("_EXPORTS", ()):
            return
        super().__setattr__(name, value)


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for a package whose public names live in submodules.

    ``exports`` (kept as the package's ``_EXPORTS``) maps each public name to the module that
    defines it; the module is imported on first access and the attribute cached on the package.
    """
    pkg = sys.modules[package]
    pkg.__class__ = _LazyPackage

    def __getattr__(name: str):
        try:
            module = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), name)
        types.ModuleType.__setattr__(pkg, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(pkg)) | set(exports))

    return __getattr__, __dir__
