"""`fuseforge --help` (and a command's --help) is instant because it loads none of the heavy
libraries the commands use: the README's "--help 0.07 s" rests on this, checked by what is
imported rather than by a clock."""

import subprocess
import sys
import textwrap

import pytest

HEAVY = ("onnx", "onnxruntime", "numpy", "sqlalchemy", "pydantic_settings", "celery", "httpx",
         "fastapi", "onnxscript", "onnx_ir")

SCRIPT = textwrap.dedent("""
    import sys
    from fuseforge_cli.main import main
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
    heavy = {heavy!r}
    print("LOADED:" + ",".join(sorted(name for name in heavy if name in sys.modules)))
""")


@pytest.mark.parametrize("argv", [["--help"], ["submit", "--help"], ["optimize", "--help"]])
def test_help_imports_none_of_the_heavy_libraries(argv: list[str]) -> None:
    run = subprocess.run([sys.executable, "-c", SCRIPT.format(heavy=HEAVY), *argv],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    loaded = run.stdout.strip().splitlines()[-1].removeprefix("LOADED:")
    assert loaded == "", f"--help loaded {loaded}"
