"""The tier markers (tests/support/markers.py) stay true to the tree they describe."""

import tomllib
from pathlib import Path

from tests.support.markers import BOTH_DIALECTS, E2E_MODULES, TESTS, TIERS


def test_every_path_the_tiers_name_is_a_test_module_or_folder_that_exists() -> None:
    """A renamed module would silently lose its PostgreSQL run or its tier."""
    missing = [where for where in [*BOTH_DIALECTS, *E2E_MODULES] if not (TESTS / where).exists()]
    assert not missing, f"tests/support/markers.py names paths under tests/ that are gone: {missing}"


def test_pyproject_registers_every_tier() -> None:
    pyproject = tomllib.loads((Path(TESTS).parent / "pyproject.toml").read_text())
    registered = {line.split(":")[0]
                  for line in pyproject["tool"]["pytest"]["ini_options"]["markers"]}
    assert set(TIERS) <= registered
