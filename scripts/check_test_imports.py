"""Fail when a module of the test tree imports a test module (test_*.py) or a conftest.py.

Helpers two test modules share belong in tests/support/ (or in a helper module beside them, such
as tests/e2e/stacks.py), and model builders in optimizer/testing/: a test module imported by
another runs its collection-time code twice, ties one test file's edits to another's, and hides
a helper where nobody looks for it. Import-linter cannot say this (the tests are no root
package of the contracts), so `make lint` runs this script.

    python scripts/check_test_imports.py [TESTS_FOLDER]   # default: tests
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ForbiddenImport", "forbidden_imports", "main"]


@dataclass(frozen=True)
class ForbiddenImport:
    """`importer` (a file) imports the test module or conftest `imported` (a dotted name)."""

    importer: Path
    line: int
    imported: str

    def __str__(self) -> str:
        return f"{self.importer}:{self.line}: imports {self.imported}"


def forbidden_imports(folder: Path) -> list[ForbiddenImport]:
    """Every import, in any module under `folder` (a package), of a test module or conftest."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        importer = _module_name(folder, path)
        for line, imported in _imported_modules(folder, path, importer):
            if _is_test_module(imported) and imported != importer:
                found.append(ForbiddenImport(path, line, imported))
    return found


def main(argv: list[str]) -> int:
    folder = Path(argv[0] if argv else "tests")
    found = forbidden_imports(folder)
    for problem in found:
        print(problem)
    if found:
        print(f"{len(found)} import(s) of a test module or conftest: move the shared helper into "
              f"{folder}/support/ (or a builder into optimizer/testing/) and import it from there.")
        return 1
    return 0


def _module_name(folder: Path, path: Path) -> str:
    parts = [folder.name, *path.relative_to(folder).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(folder: Path, path: Path, importer: str) -> list[tuple[int, str]]:
    """(line, dotted module) for each module `path` imports from inside `folder`'s package."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    imported: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(package, node.module, node.level)
            for alias in node.names:
                # `from tests.api import test_jobs` imports a module; `from x import name` a name.
                candidate = f"{base}.{alias.name}"
                is_module = _inside(folder, base) and _module_file(folder, candidate) is not None
                imported.append((node.lineno, candidate if is_module else base))
    # pytest puts each test folder on sys.path, so `from conftest import x` finds one too.
    return sorted({(line, name) for line, name in imported
                   if _inside(folder, name) or name.split(".")[0] == "conftest"})


def _inside(folder: Path, dotted: str) -> bool:
    return dotted == folder.name or dotted.startswith(folder.name + ".")


def _absolute(package: str, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    parts = package.split(".")
    base = ".".join(parts[:len(parts) - (level - 1)])
    return f"{base}.{module}" if module else base


def _module_file(folder: Path, dotted: str) -> Path | None:
    relative = Path(*dotted.split(".")[1:])
    for candidate in (folder / relative.with_suffix(".py"), folder / relative / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _is_test_module(dotted: str) -> bool:
    parts = dotted.split(".")
    if len(parts) > 1 and parts[1] == "support" and parts[-1] != "conftest":
        return False
    return parts[-1] == "conftest" or parts[-1].startswith("test_")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
