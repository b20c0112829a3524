"""After reuse_freed_memory a freed 100 MB block is reused by the next one, whose pages then
cost no page faults (where the C library is glibc; elsewhere nothing changes)."""

import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc",
                                reason="reuse_freed_memory leaves other C libraries' malloc as it is")

SCRIPT = textwrap.dedent("""
    import resource, sys
    from fuseforge_cli.memory_reuse import reuse_freed_memory
    if sys.argv[1] == "reuse":
        assert reuse_freed_memory()
    size, page = 100 * 2**20, 4096

    def faults_of_a_block():
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        block = bytearray(size)
        block[::page] = b"x" * (size // page)  # touch every page
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    faults_of_a_block()
    print(faults_of_a_block() / (size // page))
""")


def _second_block_faults_per_page(mode: str) -> float:
    run = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True,
                         check=True)
    return float(run.stdout)


def test_a_freed_block_is_reused_without_page_faults() -> None:
    assert _second_block_faults_per_page("reuse") < 0.05


def test_without_it_a_freed_block_comes_back_as_fresh_pages() -> None:
    # What the call changes: glibc unmaps a freed 100 MB block, the next one faults every page.
    assert _second_block_faults_per_page("default") > 0.9
