"""The CLI defers sympy (imported by onnx_ir) until a symbolic dim is computed with, and onnx's
reference ops (imported by onnxscript) until an op is looked up."""

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


SUBMODULE_SCRIPT = textwrap.dedent("""
    import sys
    from fuseforge_cli.deferred_imports import defer_import
    defer_import("onnx.reference.ops")
    import optimizer.passes  # onnxscript's constant folder runs `import onnx.reference.ops`
    import onnx
    print("loaded after import:", "onnx.reference.ops._op_list" in sys.modules)
    print("op:", onnx.reference.ops.load_op("", "Add", 13).__name__)
    print("loaded after use:", "onnx.reference.ops._op_list" in sys.modules)
""")


def test_onnx_reference_ops_load_only_when_an_op_is_looked_up() -> None:
    # A submodule imported as `import onnx.reference.ops` is bound on its package, so the
    # dotted name works where it is used.
    run = subprocess.run([sys.executable, "-c", SUBMODULE_SCRIPT], capture_output=True,
                         text=True, check=True)
    assert run.stdout.splitlines() == [
        "loaded after import: False",
        "op: Add",
        "loaded after use: True",
    ]
