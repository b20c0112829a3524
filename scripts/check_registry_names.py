"""Fail when product code names a backend, precision or quantization flavour by its enum member
(`Backend.TENSORRT`, `Precision.FP8`, `QuantFlavour.ORT_U8S8`) outside the places that declare it.

Every other layer reads the member's spec (optimizer/registries/), so a new backend or precision
is its package plus one registration, not a hunt for `if precision == Precision.FP8` branches
(docs/ARCHITECTURE.md, "Where to add"). A member may be named, by path from the root:

- in the registries: `optimizer/registries/`, and the worker's registration of each backend's
  strategy, `worker/pipeline/backends/registry.py`;
- in pass declarations, `optimizer/passes/` (a pass says which backends' rules it carries);
- in a backend's own files: below `optimizer/backends/` or `worker/pipeline/backends/`, a
  package or module named for the backend, that is, whose name is the backend's value ("-" read
  as "_") or starts with it and "_": `optimizer/backends/tensorrt/`,
  `worker/pipeline/backends/onnxruntime.py`, `worker/pipeline/backends/openvino_profile.py`.
  There any precision or flavour may be named (the backend's per-type tables), and its own
  `Backend` member, but no other backend's. (A helper named by an abbreviation, `ort_*.py`,
  `trt_*.py`, is no backend's file: it names no member.)
- in `ALLOWED` below: one file and member each, with the reason no spec can say it.

Only product code is read (`PRODUCT_FOLDERS`); tests and benches compare against members freely.
A member is found where the enum is named as imported (aliases of `from ... import Backend as B`
included) or through its module (`backends.Backend.TENSORRT`); `Backend("tensorrt")` and string
comparisons are not found here (the stand-in backend test catches those: tests/registries/).

    python scripts/check_registry_names.py [ROOT]   # default: the repository this script is in
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ALLOWED", "PRODUCT_FOLDERS", "NamedMember", "main", "named_members"]

ENUMS = frozenset({"Backend", "Precision", "QuantFlavour"})
PRODUCT_FOLDERS = ("api", "core", "worker", "optimizer", "dashboard", "fuseforge_cli",
                   "fuseforge_client")
_REGISTRIES = ("optimizer/registries/", "worker/pipeline/backends/registry.py")
_PASS_DECLARATIONS = ("optimizer/passes/",)
_BACKEND_FOLDERS = ("optimizer/backends/", "worker/pipeline/backends/")
_BACKEND_ENUM_FILE = "optimizer/registries/backends.py"

# (path, "Enum.MEMBER") -> why the fact cannot live on the member's spec.
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class NamedMember:
    """`path` (relative to the root) names `member` ("Backend.TENSORRT") at `line`."""

    path: str
    line: int
    member: str

    def __str__(self) -> str:
        return (f"{self.path}:{self.line}: names {self.member} outside its registry, pass "
                "declarations and its backend's own files")


def named_members(root: Path) -> list[NamedMember]:
    """Every member named where this script's rules (module docstring) do not allow it."""
    values = _backend_values(root)
    found = []
    for folder in PRODUCT_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            for line, member in _members_in(path):
                if not _allowed(relative, member, values):
                    found.append(NamedMember(relative, line, member))
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent
    found = named_members(root)
    for problem in found:
        print(problem)
    if found:
        print(f"{len(found)} backend/precision member(s) named outside their registry: move "
              "the fact onto the spec (optimizer/registries/) and read it there, or, where no "
              "spec can say it, add the file and member to ALLOWED in "
              "scripts/check_registry_names.py with the reason.")
        return 1
    return 0


def _allowed(path: str, member: str, backend_values: dict[str, str]) -> bool:
    if path.startswith(_REGISTRIES + _PASS_DECLARATIONS) or (path, member) in ALLOWED:
        return True
    owner = _owner(path)
    if owner is None:
        return False
    enum, _, name = member.partition(".")
    if enum != "Backend":
        return any(_named_for(owner, value) for value in backend_values.values())
    return _named_for(owner, backend_values.get(name, name.lower()))


def _owner(path: str) -> str | None:
    """The package or module name right below a backend folder, for a file there."""
    for folder in _BACKEND_FOLDERS:
        if path.startswith(folder):
            first = path[len(folder):].split("/")[0]
            return first.removesuffix(".py")
    return None


def _named_for(owner: str, backend_value: str) -> bool:
    name = backend_value.replace("-", "_")
    return owner == name or owner.startswith(f"{name}_")


def _backend_values(root: Path) -> dict[str, str]:
    """`Backend`'s member names -> values, as the registry declares them (empty without it)."""
    path = root / _BACKEND_ENUM_FILE
    if not path.is_file():
        return {}
    values = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef) and node.name == "Backend":
            for item in node.body:
                if (isinstance(item, ast.Assign) and len(item.targets) == 1
                        and isinstance(item.targets[0], ast.Name)
                        and isinstance(item.value, ast.Constant)
                        and isinstance(item.value.value, str)):
                    values[item.targets[0].id] = item.value.value
    return values


def _members_in(path: Path) -> list[tuple[int, str]]:
    """(line, "Enum.MEMBER") for each member `path` names."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    aliases = {name: name for name in ENUMS}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "optimizer.registries"):
            for alias in node.names:
                if alias.name in ENUMS and alias.asname:
                    aliases[alias.asname] = alias.name
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _is_member_name(node.attr):
            continue
        enum = None
        if isinstance(node.value, ast.Name):
            enum = aliases.get(node.value.id)
        elif isinstance(node.value, ast.Attribute) and node.value.attr in ENUMS:
            enum = node.value.attr
        if enum is not None:
            found.append((node.lineno, f"{enum}.{node.attr}"))
    return sorted(found)


def _is_member_name(name: str) -> bool:
    # Members are UPPER_CASE; `Backend.__members__` and methods are not.
    return name[:1].isalpha() and name == name.upper()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
