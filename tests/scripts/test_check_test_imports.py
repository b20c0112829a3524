"""scripts/check_test_imports.py: it finds a test module imported by another module of a test tree
in every spelling, lets tests/support and helper modules through, and passes on this tree."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_test_imports.py"


@pytest.fixture(scope="module")
def check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_test_imports", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def plant(root: Path, files: dict[str, str]) -> Path:
    """A package `root`/tests holding `files` (paths relative to it), each folder a package."""
    package = root / "tests"
    for relative, text in files.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        folder = path.parent
        while folder != package.parent:
            (folder / "__init__.py").touch()
            folder = folder.parent
        path.write_text(text)
    return package


def test_the_check_finds_each_spelling_of_a_test_module_import(check: ModuleType,
                                                                tmp_path: Path) -> None:
    package = plant(tmp_path, {
        "api/test_jobs.py": "def helper(): ...\n",
        "api/conftest.py": "",
        "api/test_absolute.py": "from tests.api.test_jobs import helper\n",
        "api/test_module.py": "import tests.api.test_jobs\n",
        "api/test_from_package.py": "from tests.api import test_jobs\n",
        "api/test_relative.py": "from .test_jobs import helper\n",
        "api/test_conftest.py": "from tests.api.conftest import fixture\n",
        "api/test_bare_conftest.py": "from conftest import fixture\n",
        "api/test_inside.py": "def test_x():\n    from tests.api.test_jobs import helper\n",
    })
    found = [(p.importer.relative_to(package).as_posix(), p.imported)
             for p in check.forbidden_imports(package)]
    assert found == [
        ("api/test_absolute.py", "tests.api.test_jobs"),
        ("api/test_bare_conftest.py", "conftest"),
        ("api/test_conftest.py", "tests.api.conftest"),
        ("api/test_from_package.py", "tests.api.test_jobs"),
        ("api/test_inside.py", "tests.api.test_jobs"),
        ("api/test_module.py", "tests.api.test_jobs"),
        ("api/test_relative.py", "tests.api.test_jobs"),
    ]


def test_the_check_lets_support_and_helper_modules_through(check: ModuleType,
                                                            tmp_path: Path) -> None:
    package = plant(tmp_path, {
        "support/npz_files.py": "def npz_bytes(): ...\n",
        "e2e/stacks.py": "from tests.support.npz_files import npz_bytes\n",
        "e2e/test_flow.py": ("from tests.e2e.stacks import npz_bytes\n"
                             "from tests.support import npz_files\n"
                             "from tests.e2e.stacks import test_like_name\n"
                             "import numpy.testing\n"),
    })
    assert check.forbidden_imports(package) == []


def test_the_check_fails_naming_the_file_line_and_fix(check: ModuleType, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    package = plant(tmp_path, {"test_a.py": "", "test_b.py": "\nfrom tests.test_a import x\n"})
    assert check.main([str(package)]) == 1
    out = capsys.readouterr().out
    assert f"{package / 'test_b.py'}:2: imports tests.test_a" in out
    assert "move the shared helper into" in out


def test_no_test_module_of_this_tree_imports_another(check: ModuleType) -> None:
    problems = check.forbidden_imports(SCRIPT.parents[1] / "tests")
    assert problems == [], "\n".join(map(str, problems))
