"""/v1/uploads: model uploads in pieces over tus 1.0 (core, creation, termination, checksum),
resumed after a lost connection or an API restart; api/services/uploads/resumable.py.

    POST /v1/uploads          Upload-Length, Upload-Metadata: filename <base64>  → 201 Location
    HEAD /v1/uploads/{id}     → Upload-Offset, Upload-Length
    PATCH /v1/uploads/{id}    Upload-Offset, [Upload-Checksum: sha256 <base64>], the next bytes
    DELETE /v1/uploads/{id}   → 204: the upload and its pieces are gone
    POST /v1/models?upload_id={id}  the whole upload, checked and kept as a model
"""

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request, Response

from api.deps import CurrentProject, SessionDep, SettingsDep, StoreDep, get_current_project
from api.schemas.common import ErrorBody
from api.services.errors import UploadNotFound
from api.services.uploads import resumable

router = APIRouter(prefix="/v1/uploads", tags=["uploads"],
                   dependencies=[Depends(get_current_project)])

_TUS = {"Tus-Resumable": resumable.TUS_VERSION}


async def _upload_id(upload_id: str) -> uuid.UUID:
    try:
        return uuid.UUID(upload_id)
    except ValueError as err:
        raise UploadNotFound(f"upload {upload_id[:64]!r} does not exist: ids are UUIDs") from err


UploadIdPath = Annotated[uuid.UUID, Depends(_upload_id)]


@router.options("", status_code=204, response_class=Response)
def tus_options(settings: SettingsDep) -> Response:
    """What this server speaks of tus: its version, extensions, size limit and checksums."""
    return Response(status_code=204, headers={
        **_TUS, "Tus-Version": resumable.TUS_VERSION, "Tus-Extension": resumable.TUS_EXTENSIONS,
        "Tus-Max-Size": str(settings.max_upload_bytes), "Tus-Checksum-Algorithm": "sha256"})


@router.post("", status_code=201, response_class=Response,
             responses={201: {"description": "Created; its URL is in Location"},
                        413: {"model": ErrorBody, "description": "Over the upload limit"}})
def create_upload(
    request: Request, session: SessionDep, settings: SettingsDep, project: CurrentProject,
    upload_length: Annotated[str | None, Header()] = None,
    upload_metadata: Annotated[str | None, Header()] = None,
) -> Response:
    """Start an upload of `Upload-Length` bytes (tus creation); `Upload-Metadata` may name it
    (`filename <base64>`). Send its bytes with PATCH, then POST /v1/models?upload_id=<id>."""
    upload = resumable.create_upload(session, project_id=project, length=upload_length,
                                     metadata=upload_metadata, settings=settings)
    return Response(status_code=201, headers={
        **_TUS, "Location": str(request.url_for("upload_offset", upload_id=str(upload.id))),
        "Upload-Expires": upload.expires_at.strftime("%a, %d %b %Y %H:%M:%S GMT")})


@router.head("/{upload_id}", name="upload_offset", response_class=Response,
             responses={404: {"description": "No such upload (or it expired)"}})
def upload_offset(upload_id: UploadIdPath, session: SessionDep,
                  project: CurrentProject) -> Response:
    """How far the upload got: resume with a PATCH from `Upload-Offset`."""
    upload = resumable.find_upload(session, project, upload_id)
    return Response(status_code=200, headers={
        **_TUS, "Upload-Offset": str(upload.offset), "Upload-Length": str(upload.length),
        "Cache-Control": "no-store"})


@router.patch("/{upload_id}", status_code=204, response_class=Response,
              responses={409: {"model": ErrorBody, "description": "Upload-Offset is not the "
                               "upload's: HEAD it and send from there"},
                         460: {"model": ErrorBody, "description": "Upload-Checksum mismatch"}})
async def send_piece(
    upload_id: UploadIdPath, request: Request, session: SessionDep, store: StoreDep,
    settings: SettingsDep, project: CurrentProject,
    upload_offset: Annotated[str | None, Header()] = None,
    upload_checksum: Annotated[str | None, Header()] = None,
    content_type: Annotated[str | None, Header()] = None,
) -> Response:
    """The upload's next bytes, at `Upload-Offset` (Content-Type
    application/offset+octet-stream); answers the new offset."""
    length = request.headers.get("content-length")
    offset = await resumable.append_piece(
        session=session, store=store, project_id=project, upload_id=upload_id,
        offset=upload_offset, checksum=upload_checksum, content_type=content_type,
        chunks=request.stream(),
        content_length=int(length) if length and length.isdigit() else None,
        settings=settings)
    return Response(status_code=204, headers={**_TUS, "Upload-Offset": str(offset)})


@router.delete("/{upload_id}", status_code=204, response_class=Response)
def delete_upload(upload_id: UploadIdPath, session: SessionDep, store: StoreDep,
                  project: CurrentProject) -> Response:
    """Give the upload up (tus termination): it and its pieces are removed."""
    resumable.terminate_upload(session, store, resumable.find_upload(session, project, upload_id))
    return Response(status_code=204, headers=_TUS)
