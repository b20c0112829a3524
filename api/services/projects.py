"""The caller's project: read it, change its default webhook (core/projects.py checks it)."""

import uuid

from sqlalchemy.orm import Session

from api.schemas.projects import ProjectUpdate
from api.services.errors import InvalidProjectSettings, ProjectNotFound
from core.db.models import Project
from core.projects import InvalidCallbackUrl, set_default_callback_url
from core.settings import WebhookSettings

__all__ = ["get_project", "update_project"]


def get_project(*, session: Session, project_id: uuid.UUID) -> Project:
    """The project of the request's key.

    Raises:
        ProjectNotFound: it was deleted after the key was checked (its keys go with it).
    """
    project = session.get(Project, project_id)
    if project is None:
        raise ProjectNotFound(f"project {project_id} no longer exists; its API keys went with it")
    return project


def update_project(*, session: Session, project_id: uuid.UUID, update: ProjectUpdate,
                   webhooks: WebhookSettings) -> Project:
    """Apply the fields `update` was sent with, and commit.

    Raises:
        ProjectNotFound: see get_project.
        InvalidProjectSettings: default_callback_url's host does not resolve or is not a public
            address (nor allowed by FUSEFORGE_WEBHOOKS__*); nothing is changed.
    """
    project = get_project(session=session, project_id=project_id)
    if "default_callback_url" in update.model_fields_set:
        try:
            set_default_callback_url(session=session, project=project,
                                     url=update.default_callback_url, webhooks=webhooks)
        except InvalidCallbackUrl as err:
            raise InvalidProjectSettings(f"default_callback_url: {err}") from err
    session.commit()
    return project
