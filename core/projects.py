"""A project's own settings (its keys are core/api_keys.py's): the default webhook, the callback
URL of its jobs submitted without a `callback_url` of their own.

Set by `PATCH /v1/project` (the key's project) and `fuseforge project set-webhook`; both check
the URL as a job's callback URL is checked (core/callbacks/checks.py) before storing it.
"""

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.callbacks.checks import callback_url_refusal
from core.db.models import Project
from core.settings import WebhookSettings

__all__ = ["InvalidCallbackUrl", "default_callback_url", "project_named",
           "set_default_callback_url"]


class InvalidCallbackUrl(ValueError):
    """The URL cannot be a callback URL; the message says why and what would work."""


def project_named(*, session: Session, name: str) -> Project | None:
    return session.scalars(select(Project).where(Project.name == name)).one_or_none()


def default_callback_url(*, session: Session, project_id: uuid.UUID) -> str | None:
    """The project's default webhook; None when it has none (or there is no such project)."""
    return session.scalar(select(Project.default_callback_url).where(Project.id == project_id))


def set_default_callback_url(*, session: Session, project: Project, url: str | None,
                             webhooks: WebhookSettings) -> None:
    """Give `project` the default webhook `url` (None: clear it). Does not commit.

    Raises:
        InvalidCallbackUrl: `url` is malformed, or its host does not resolve or is not a public
            address (nor allowed by `webhooks`); nothing is changed.
    """
    if url is not None:
        problem = callback_url_refusal(url, webhooks)
        if problem is not None:
            raise InvalidCallbackUrl(problem)
    project.default_callback_url = url
