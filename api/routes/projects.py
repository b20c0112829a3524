"""/v1/project: the project of the request's API key, and its default webhook."""

from fastapi import APIRouter, Depends

from api.deps import CurrentProject, SessionDep, SettingsDep, get_current_project
from api.schemas.projects import ProjectRead, ProjectUpdate
from api.services import projects

router = APIRouter(prefix="/v1/project", tags=["project"],
                   dependencies=[Depends(get_current_project)])


@router.get("", response_model=ProjectRead)
def read_project(session: SessionDep, project: CurrentProject) -> ProjectRead:
    """The key's project: its id, name and default webhook."""
    return ProjectRead.model_validate(projects.get_project(session=session, project_id=project))


@router.patch("", response_model=ProjectRead)
def update_project(body: ProjectUpdate, session: SessionDep, settings: SettingsDep,
                   project: CurrentProject) -> ProjectRead:
    """Change the key's project: `default_callback_url` is the webhook of its jobs submitted
    without a `callback_url` field (checked like a job's: 422 when malformed, when its host
    does not resolve or is not a public address). A field left out stays as it is; null
    clears it."""
    return ProjectRead.model_validate(projects.update_project(
        session=session, project_id=project, update=body, webhooks=settings.webhooks))
