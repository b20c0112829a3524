"""Settings.plugins: each "module:function" is called to register its backends and precisions;
one that cannot be loaded stops the process saying which setting and path."""

from __future__ import annotations

import pytest

from core.plugins import load_plugins
from optimizer.errors import InternalError
from optimizer.registries.backends import BACKENDS
from tests.support.stand_in import PLUGIN, STAND_IN, unregister


def test_a_plug_in_is_registered_by_its_function_and_loading_it_twice_is_harmless() -> None:
    load_plugins([PLUGIN, PLUGIN])
    try:
        assert STAND_IN in BACKENDS
    finally:
        unregister()


@pytest.mark.parametrize("path", ["tests.support.no_such_module:register",
                                  "tests.support.stand_in:no_such_function", "no-colon"])
def test_a_plug_in_that_cannot_be_loaded_is_named(path: str) -> None:
    with pytest.raises(InternalError, match=f"FUSEFORGE_PLUGINS: cannot load '{path}'"):
        load_plugins([path])
