"""Each stage's peak resident memory: the job process's high-water mark, reset as each stage
starts, so a stage that held a large model shows it and the next stage does not inherit it."""

from __future__ import annotations

import mmap
import sys

import pytest

from optimizer.testing.models import large_model, model_bytes, small_cnn
from tests.support.embedded_worker import EmbeddedWorker
from worker.pipeline.stage_memory import PeakMemory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="peak memory per stage is read from Linux's /proc")

FAST_BENCHMARK = {"warmup": 1, "iterations": 3, "measure_memory": False}
_MB = 2**20


def _touched(megabytes: int) -> mmap.mmap:
    """Fresh resident memory: an anonymous mapping with every page written (a bytearray
    could reuse heap pages this long-lived test process already holds)."""
    block = mmap.mmap(-1, megabytes * _MB)
    for offset in range(0, len(block), mmap.PAGESIZE):
        block[offset] = 1
    return block


def test_a_stage_that_held_memory_shows_it_and_the_next_starts_from_what_is_left() -> None:
    memory = PeakMemory()
    memory.enter("load")
    _touched(200).close()
    memory.enter("optimize")
    small = _touched(10)

    peaks = memory.peak_rss_mb()

    assert peaks is not None and set(peaks) == {"load", "optimize"}
    assert peaks["load"] >= peaks["optimize"] + 150  # reset: optimize did not inherit load's
    small.close()


def test_a_stage_entered_again_keeps_its_higher_peak() -> None:
    memory = PeakMemory()
    memory.enter("optimize")
    _touched(150).close()
    memory.enter("validate")
    memory.enter("optimize")  # a fallback round, holding little

    peaks = memory.peak_rss_mb()

    assert peaks is not None and peaks["optimize"] >= peaks["validate"] + 100


def test_a_jobs_document_holds_each_stages_peak_and_a_large_model_shows_in_load(
        embedded: EmbeddedWorker) -> None:
    small_id = embedded.upload(model_bytes(small_cnn(seed=3)), "small.onnx")
    large_id = embedded.upload(model_bytes(large_model(160, seed=1)), "large.onnx")

    small = embedded.wait(embedded.submit(small_id, benchmark=FAST_BENCHMARK))
    large = embedded.wait(embedded.submit(large_id, benchmark=FAST_BENCHMARK))

    for job in (small, large):
        assert job["status"] == "succeeded", job["error"]
        memory = job["stage_memory"]
        assert set(memory["peak_rss_mb"]) >= {"load", "optimize", "validate", "benchmark",
                                              "store"}
        assert all(peak > 10 for peak in memory["peak_rss_mb"].values())
        assert "VmHWM" in memory["method"]
    # 160 MB of weights are read in the load stage: its peak stands above the small model's.
    assert large["stage_memory"]["peak_rss_mb"]["load"] >= (
        small["stage_memory"]["peak_rss_mb"]["load"] + 120)
