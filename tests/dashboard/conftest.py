"""The dashboard on the test database: the site (API + pages) as a browser without a session
(`site`), and one signed in with a key of its own project (`signed_in_site`), that project and
a model row in it; for the browser tests, a running stack and Chromium
(tests/dashboard/browser_stack.py)."""

import uuid
from collections.abc import Iterator
from contextlib import nullcontext

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from api.deps import get_api_settings, get_read_sessions, get_session
from core.browser_sessions import SESSION_COOKIE
from core.settings import Settings
from dashboard.site import create_site
from tests.dashboard.browser_stack import (  # noqa: F401 (the browser tests' fixtures, test_browser_*.py)
    dashboard_browser,
    dashboard_stack,
    fresh_project,
    open_page,
    pytest_terminal_summary,
    seeded,
)
from tests.dashboard.job_documents import insert_model


@pytest.fixture
def site(db_session: Session, settings: Settings, broker: redis.Redis) -> Iterator[TestClient]:
    app = create_site()
    app.dependency_overrides[get_session] = lambda: db_session
    app.dependency_overrides[get_read_sessions] = lambda: lambda: nullcontext(db_session)
    app.dependency_overrides[get_api_settings] = lambda: settings
    with TestClient(app, follow_redirects=False) as test_client:
        yield test_client


@pytest.fixture
def signed_in_site(site: TestClient, api_key: tuple[uuid.UUID, str]) -> TestClient:
    site.cookies.set(SESSION_COOKIE, api_key[1])
    return site



@pytest.fixture
def project(api_key: tuple[uuid.UUID, str]) -> uuid.UUID:
    return api_key[0]


@pytest.fixture
def model_id(db_session: Session, project: uuid.UUID) -> uuid.UUID:
    return insert_model(db_session, project)
