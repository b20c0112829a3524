"""Uploaded models: check, store once per project and content hash, list and fetch, each within
the caller's project (another project's model is "not found")."""

import posixpath
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.services.errors import InvalidModelFile, ModelNotFound
from api.services.uploads.model_checks import ModelCheckAborted, ModelChecker
from api.services.uploads.receive import ReceivedFile, shown_name
from api.services.uploads.stored import display_name, store_upload
from core.db.models import Job, Model
from core.storage import ArtifactStore
from optimizer.errors import InvalidModelError, ModelLimitError, UnsupportedModelError
from optimizer.model.archive import ModelArchive
from optimizer.model.external_data import ExternalData
from optimizer.model.limits import ModelLimits

__all__ = ["get_model", "list_models", "new_upload_key", "register_upload"]


def new_upload_key() -> str:
    """The store key a model upload is written under while it arrives: its content hash is
    known only at its end, and objects are never renamed (S3 cannot)."""
    return f"models/{uuid.uuid4().hex}.onnx"


def register_upload(
    *, session: Session, store: ArtifactStore, received: ReceivedFile, limits: ModelLimits,
    checker: ModelChecker, project_id: uuid.UUID, scratch: Path, fresh_every_s: float = 1.0,
) -> tuple[Model, bool]:
    """Turn a received upload into a Model row of the project; (model, created). Same bytes
    again in the same project → its existing model.

    The model is checked (its skeleton, in a folder under `scratch`) against `limits`
    (FUSEFORGE_MODEL_LIMITS__*) besides the ONNX rules. What was received is always
    consumed: its object committed, or dropped; kept fresh every `fresh_every_s` while it is
    checked, so the janitor does not take it for a dead upload's.

    Raises:
        InvalidModelFile: see `optimizer.model_check.check_model_file`; a limit's message names
            the variable that sets it; also when the check itself runs out of memory or time
            (FUSEFORGE_MODEL_CHECK__*). Nothing is stored.
    """

    archive = received.archive
    name = _model_name(received)

    def describe() -> Model:
        try:
            # The skeleton built while the upload arrived: the check reads none of the weights.
            summary = checker.check_skeleton(received.skeleton(), scratch, limits, name=name,
                                             data_files=_data_files(archive))
        except ModelCheckAborted as err:
            raise InvalidModelFile(
                f"the uploaded model could not be checked: {err} (the limits are "
                "FUSEFORGE_MODEL_CHECK__MAX_RSS_GIB and FUSEFORGE_MODEL_CHECK__TIMEOUT_S)") from err
        except ModelLimitError as err:
            raise InvalidModelFile(
                f"the uploaded file is not a usable ONNX model: {err} (the limit is "
                f"FUSEFORGE_MODEL_LIMITS__{err.limit.upper()})") from err
        except (InvalidModelError, UnsupportedModelError) as err:
            raise InvalidModelFile(f"the uploaded file is not a usable ONNX model: {err}") from err
        return Model(
            name=name,
            sha256=received.sha256,
            size_bytes=received.size_bytes,
            ir_version=summary.ir_version,
            opset=summary.opset,
            producer=_cut(summary.producer, Model.producer.type.length),
            inputs=[spec.to_dict() for spec in summary.inputs],
            outputs=[spec.to_dict() for spec in summary.outputs],
            warnings=list(summary.warnings) or None,
            external_data=(None if archive is None
                           else _archive_contents(archive, summary.external_data)),
        )

    return store_upload(session=session, store=store, received=received, project_id=project_id,
                        kind=Model, describe=describe, fresh_every_s=fresh_every_s)


def _model_name(received: ReceivedFile) -> str:
    """An archive's model is called by its `name` field, else by its .onnx file's name."""
    if received.archive is None:
        return display_name(received, "model.onnx")
    return shown_name(posixpath.basename(received.archive.model.name), received.name,
                      "model.onnx")


def _data_files(archive: ModelArchive | None) -> list[tuple[str, int]] | None:
    if archive is None:
        return None
    return [(archive.relative_to_model(member), member.size) for member in archive.data_files]


def _archive_contents(archive: ModelArchive, external: ExternalData | None) -> dict[str, Any]:
    """The row's record of an archive (Model.external_data), once every file in it is one
    the model reads.

    Raises:
        InvalidModelFile: the archive holds a file no tensor of the model names.
    """
    read = {file.location: file for file in external.files} if external else {}
    members = {archive.relative_to_model(member): member for member in archive.data_files}
    unread = [location for location in members if location not in read]
    if unread:
        shown = ", ".join(repr(location) for location in unread[:5])
        raise InvalidModelFile(
            f"the uploaded archive holds {len(unread)} file(s) no tensor of its model "
            f"{archive.model.name!r} reads ({shown}{', ...' if len(unread) > 5 else ''}); "
            "pack only the .onnx file and the data files it names")
    return {"model_file": archive.model.name,
            "files": [{"location": location, "size": member.size, "sha256": member.sha256,
                       "tensors": read[location].tensors}
                      for location, member in members.items()],
            "tensor_bytes": external.tensor_bytes if external else 0,
            "file_bytes": sum(member.size for member in members.values())}


def _cut(text: str, length: int | None) -> str:
    """`text` fitted to a column of `length` characters, marking a cut with an ellipsis."""
    if length is None or len(text) <= length:
        return text
    return text[: length - 1] + "…"


def get_model(*, session: Session, project_id: uuid.UUID, model_id: uuid.UUID,
              share_lock: bool = False) -> Model:
    """The project's model; ModelNotFound for an unknown id and for another project's alike.

    `share_lock`: hold the row (FOR KEY SHARE on PostgreSQL) until the transaction ends, so a
    job created for it and a delete of it (api/services/deletions.py) take turns."""
    query = select(Model).where(Model.id == model_id, Model.project_id == project_id)
    if share_lock:
        query = query.with_for_update(key_share=True)
    model = session.scalars(query).one_or_none()
    if model is None:
        raise ModelNotFound(f"model {model_id} does not exist; GET /v1/models lists the uploaded ones")
    return model


def job_counts(*, session: Session, model_ids: list[uuid.UUID]) -> dict[uuid.UUID, int]:
    """How many jobs each of `model_ids` has (absent: none), in one grouped query."""
    if not model_ids:
        return {}
    rows = session.execute(select(Job.model_id, func.count()).where(Job.model_id.in_(model_ids))
                           .group_by(Job.model_id)).all()
    return {model_id: count for model_id, count in rows}


def list_models(*, session: Session, project_id: uuid.UUID, limit: int,
                offset: int) -> tuple[list[Model], int]:
    mine = Model.project_id == project_id
    total = session.scalar(select(func.count()).select_from(Model).where(mine)) or 0
    rows = session.scalars(
        select(Model).where(mine).order_by(Model.created_at.desc(), Model.id.desc())
        .limit(limit).offset(offset)
    ).all()
    return list(rows), total
