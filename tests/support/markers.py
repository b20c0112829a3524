"""The suite's tiers, as markers put on each collected test by where it lives and what it uses
(tests/conftest.py calls `mark_tiers`), so that no test module has to remember to mark itself.
pyproject.toml registers them (`--strict-markers`).

- e2e: starts the service's real processes (API server, worker, the CLI): tests/e2e, the
  modules in E2E_MODULES, and those marked e2e themselves.
- browser: drives Chromium against a running stack (the dashboard's browser tests).
- pipeline: runs jobs through an embedded Celery worker (tests/worker/pipeline's `embedded`).
- kernels: the Triton kernels and their launch layer (tests/gpu); the interpreter runs them
  where torch and triton are installed (.ci/run's kernel step), they skip elsewhere.
- slow: any of e2e, browser or pipeline: what `make test-fast` leaves out.
- second_dialect: the PostgreSQL copy of a test parametrized over both dialects.
- both_dialects: both copies of a dialect-parametrized test whose module tests SQL that
  behaves differently on SQLite and PostgreSQL (see BOTH_DIALECTS).

`make test` deselects `second_dialect and not both_dialects`: every test still runs on SQLite,
and on PostgreSQL where the dialect matters. `make test-all-dialects` runs every copy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["BOTH_DIALECTS", "TIERS", "mark_tiers"]

TESTS = Path(__file__).resolve().parents[1]

# The dialect fixtures' parameters (tests/conftest.py's `database_url` and the modules' own
# fresh-database fixtures all use these two values).
FIRST_DIALECT, SECOND_DIALECT = "sqlite", "postgresql"

# The rule for keeping the PostgreSQL copy: the module tests code whose SQL the two dialects
# run differently. That is: schema migrations (DDL); row locks and concurrent writers (FOR
# UPDATE, unique-constraint and foreign-key races, ON CONFLICT upserts); job state transitions
# committed for real (conditional UPDATEs, heartbeat cutoffs, bulk deletes); aggregates and
# JSON-path queries (queue depths, metrics, quotas, the backend filter); case-insensitive
# matching, paging bounds and reading back rows in id order while others commit. Tests that
# only store and read rows through the ORM (most route and page tests) run on SQLite alone.
BOTH_DIALECTS: dict[str, str] = {
    "core/db/": "migrations, job state transitions, ON CONFLICT upserts (idempotency keys, "
                "worker registry)",
    "api/test_idempotency_concurrency.py": "concurrent writers claiming one idempotency key",
    "api/routes/test_idempotency.py": "the ON CONFLICT claim behind Idempotency-Key",
    "api/services/test_deletions_race.py": "FOR UPDATE locks between a delete and a new job",
    "api/routes/test_deletes.py": "FOR UPDATE locks and cascading deletes",
    "api/routes/test_metrics.py": "queue depths and counts: GROUP BY over JSON paths",
    "api/routes/test_storage_quota.py": "SUM/COALESCE aggregates",
    "api/routes/test_job_list.py": "the JSON-path backend filter and case-insensitive search",
    "api/test_paging.py": "OFFSET bounds",
    "api/services/jobs/test_event_stream.py": "reading events in id order while jobs commit",
    "core/webhooks/test_deleted_job_delivery.py": "a foreign-key race with a deleted job",
    "worker/test_janitor.py": "heartbeat cutoffs and lost-job transitions, committed",
    "worker/test_janitor_retention.py": "bulk deletes of finished jobs and their rows",
    "worker/pipeline/test_run_job.py": "a job's state transitions and JSON reports, committed",
    "worker/pipeline/records/test_lost_jobs.py": "lost-job transitions, committed",
    "fuseforge_cli/test_apikey_command.py": "the CLI migrating and writing a database by URL",
    "fuseforge_cli/test_project_command.py": "the CLI migrating and writing a database by URL",
}

# Modules outside tests/e2e that start the API server, a worker or the CLI as processes of
# their own (a second or more each: they are what `make test-fast` leaves to `make test`).
E2E_MODULES = (
    "e2e/",
    "api/http/test_request_ids.py",
    "fuseforge_cli/test_apikey_command.py",
    "fuseforge_cli/test_project_command.py",
    "fuseforge_cli/test_submit_regression.py",
    "fuseforge_client/test_job_regression.py",
    "worker/test_worker_logs.py",
)

TIERS = ("e2e", "browser", "pipeline", "kernels", "slow", "second_dialect", "both_dialects")


def _where(item: pytest.Item) -> str:
    """The test's path relative to tests/, with forward slashes."""
    try:
        return item.path.resolve().relative_to(TESTS).as_posix()
    except ValueError:
        return item.path.as_posix()


def _dialect(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    values = {value for value in callspec.params.values()
              if isinstance(value, str) and value in (FIRST_DIALECT, SECOND_DIALECT)}
    return values.pop() if len(values) == 1 else None


def _tiers(item: pytest.Item, where: str) -> set[str]:
    names = set(getattr(item, "fixturenames", ()))
    tiers = {mark.name for mark in item.iter_markers()} & set(TIERS)
    if where.startswith(E2E_MODULES):
        tiers.add("e2e")
    if where.split("/")[-1].startswith("test_browser_") or "dashboard_browser" in names:
        tiers.add("browser")
    if "embedded" in names:
        tiers.add("pipeline")
    if where.startswith("gpu/"):
        tiers.add("kernels")
    if tiers & {"e2e", "browser", "pipeline"}:
        tiers.add("slow")
    dialect = _dialect(item)
    if dialect is not None and where.startswith(tuple(BOTH_DIALECTS)):
        tiers.add("both_dialects")
    if dialect == SECOND_DIALECT:
        tiers.add("second_dialect")
    return tiers


def _xdist_group(tiers: set[str], where: str) -> str:
    """Which pytest-xdist worker's share a test is in (`--dist loadgroup`): its module's, so a
    module-scoped stack starts once; the browser tests' stack is their package's, so theirs."""
    return "browser" if "browser" in tiers else where


def mark_tiers(items: list[pytest.Item]) -> None:
    for item in items:
        have = {mark.name for mark in item.iter_markers()}
        where = _where(item)
        tiers = _tiers(item, where)
        for name in sorted(tiers - have):
            item.add_marker(name)
        if item.config.pluginmanager.hasplugin("xdist"):  # not in make test-kernels' venv
            item.add_marker(pytest.mark.xdist_group(_xdist_group(tiers, where)))
