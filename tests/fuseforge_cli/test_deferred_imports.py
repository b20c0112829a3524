"""The CLI defers sympy (imported by onnx_ir) until a symbolic dim is computed with."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys
    from fuseforge_cli.deferred_imports import defer_import
    for name in ("sympy", "onnx_ir._symbolic_shapes", "no_such_module_here"):
        defer_import(name)
    import onnx_ir
    import optimizer.optimize
    print("loaded after import:", "sympy.core" in sys.modules)
    print("sum:", onnx_ir.SymbolicDim("N") + 1)
    print("loaded after use:", "sympy.core" in sys.modules)
    try:
        import no_such_module_here
    except ModuleNotFoundError:
        print("missing module: still missing")
""")


def test_sympy_loads_only_when_a_symbolic_dim_is_computed_with() -> None:
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    assert run.stdout.splitlines() == [
        "loaded after import: False",
        "sum: N + 1",
        "loaded after use: True",
        "missing module: still missing",
    ]
