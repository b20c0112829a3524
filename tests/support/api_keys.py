"""Projects and API keys for tests: a key made the way `fuseforge apikey create` makes one."""

import uuid
from datetime import timedelta

from sqlalchemy.orm import Session

from core.api_keys import create_key, get_or_create_project, server_secret
from core.settings import AuthSettings, Settings

__all__ = ["TEST_AUTH", "bearer", "new_key"]

# A fixed secret, so tests leave no generated secret file in their data dirs.
TEST_AUTH = AuthSettings(secret="test-secret-" + "0123456789abcdef" * 3)


def new_key(session: Session, settings: Settings, project: str | None = None, *,
            expires_in: timedelta | None = None) -> tuple[uuid.UUID, str]:
    """(project id, key) of a new key of `project` (default: a new project), committed."""
    row, _ = get_or_create_project(session=session, name=project or f"p-{uuid.uuid4().hex[:8]}")
    created = create_key(session=session, secret=server_secret(settings), project=row,
                         name="test", expires_in=expires_in)
    session.commit()
    return row.id, created.key


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
