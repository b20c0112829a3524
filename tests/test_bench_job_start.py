"""bench/job_start.py preloads what the worker's job template does (it may not import it)."""

from bench.job_start import JOB_PRELOAD as BENCH_PRELOAD
from worker.supervision.job_template import JOB_PRELOAD


def test_the_bench_template_preloads_what_the_workers_does() -> None:
    assert BENCH_PRELOAD == JOB_PRELOAD
