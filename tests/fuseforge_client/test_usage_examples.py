"""The client's usage examples (client.py's module docstring, the README's client section) call
FuseForgeClient as it is: every call binds to the real signature, and what an `on_progress`
callback reads of the job is a field or property of Job. So an example cannot drift from a
renamed parameter again (it once passed `timeout=` to `wait(..., timeout_s=...)`)."""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from pathlib import Path

import pytest

from fuseforge_client import FuseForgeClient, client
from fuseforge_client.resources import Job

README = Path(__file__).resolve().parents[2] / "README.md"


def _docstring_example() -> str:
    """The indented block of client.py's module docstring."""
    doc = client.__doc__ or ""
    lines = [line for line in doc.splitlines() if line.startswith("    ") or not line.strip()]
    return textwrap.dedent("\n".join(lines)).strip()


def _readme_example() -> str:
    """The README's python block that uses FuseForgeClient."""
    [block] = [b for b in re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
               if "FuseForgeClient(" in b]
    return str(block)


EXAMPLES = {"client.py docstring": _docstring_example, "README.md": _readme_example}


def _client_calls(tree: ast.AST) -> list[ast.Call]:
    """Calls of FuseForgeClient(...) and of methods on the name `client`."""
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and (
        (isinstance(node.func, ast.Name) and node.func.id == "FuseForgeClient")
        or (isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "client"))]


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_each_call_in_the_example_binds_to_the_clients_signature(example: str) -> None:
    calls = _client_calls(ast.parse(EXAMPLES[example]()))
    assert len(calls) >= 4, f"the {example} example no longer calls the client"
    for call in calls:
        if isinstance(call.func, ast.Name):
            name, function = "FuseForgeClient", FuseForgeClient.__init__
        else:
            name = call.func.attr  # type: ignore[attr-defined]
            function = getattr(FuseForgeClient, name, None)
            assert callable(function), f"{example}: FuseForgeClient has no method {name}"
        arguments = [object() for _ in call.args]
        keywords = {k.arg: object() for k in call.keywords if k.arg is not None}
        try:
            inspect.signature(function).bind(object(), *arguments, **keywords)
        except TypeError as err:
            raise AssertionError(f"{example}: {ast.unparse(call)} does not fit "
                                 f"{name}{inspect.signature(function)}: {err}") from None


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_what_the_examples_progress_callback_reads_is_on_the_job(example: str) -> None:
    calls = [c for c in _client_calls(ast.parse(EXAMPLES[example]()))
             if isinstance(c.func, ast.Attribute) and c.func.attr == "wait"]
    [callback] = [k.value for c in calls for k in c.keywords if k.arg == "on_progress"]
    assert isinstance(callback, ast.Lambda)
    [job] = [a.arg for a in callback.args.args]
    read = {n.attr for n in ast.walk(callback.body)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == job}
    known = set(inspect.get_annotations(Job)) | {n for n, _ in inspect.getmembers(Job)}
    assert read and read <= known, f"{example}: Job has no {sorted(read - known)}"
