"""Uploaded models: check, store once per content hash, list and fetch."""

import uuid
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from api.db.models import Model
from api.services.errors import InvalidModelFile, ModelNotFound
from api.services.uploads import ReceivedFile
from api.storage import ArtifactStore
from optimizer.errors import InvalidModelError, UnsupportedModelError
from optimizer.model_check import check_model_file

__all__ = ["get_model", "list_models", "register_upload"]


def _display_name(received: ReceivedFile) -> str:
    if received.name:
        return received.name[:255]
    if received.filename:
        return Path(received.filename).name[:255] or "model.onnx"
    return "model.onnx"


def register_upload(
    *, session: Session, store: ArtifactStore, received: ReceivedFile
) -> tuple[Model, bool]:
    """Turn a received file into a Model row; (model, created). Same bytes again → existing model.

    The temporary file is always consumed: moved into the store or deleted.
    """
    try:
        existing = session.scalars(select(Model).where(Model.sha256 == received.sha256)).first()
        if existing is not None:
            return existing, False
        try:
            summary = check_model_file(received.path)
        except (InvalidModelError, UnsupportedModelError) as err:
            raise InvalidModelFile(f"the uploaded file is not a usable ONNX model: {err}") from err
        uri = store.move_in(received.path, f"models/{received.sha256}.onnx")
    finally:
        received.path.unlink(missing_ok=True)

    model = Model(
        name=_display_name(received),
        sha256=received.sha256,
        size_bytes=received.size_bytes,
        storage_uri=uri,
        ir_version=summary.ir_version,
        opset=summary.opset,
        producer=summary.producer,
        inputs=[spec.to_dict() for spec in summary.inputs],
        outputs=[spec.to_dict() for spec in summary.outputs],
    )
    session.add(model)
    try:
        session.commit()
    except IntegrityError:
        # The same bytes were uploaded concurrently and won the race; the stored file is
        # identical (same content address), so keep it and return the winner's row.
        session.rollback()
        return session.scalars(select(Model).where(Model.sha256 == received.sha256)).one(), False
    except BaseException:
        session.rollback()
        if session.scalars(select(Model.id).where(Model.storage_uri == uri)).first() is None:
            store.delete(uri)
        raise
    return model, True


def get_model(*, session: Session, model_id: uuid.UUID) -> Model:
    model = session.get(Model, model_id)
    if model is None:
        raise ModelNotFound(f"model {model_id} does not exist; GET /v1/models lists the uploaded ones")
    return model


def list_models(*, session: Session, limit: int, offset: int) -> tuple[list[Model], int]:
    total = session.scalar(select(func.count()).select_from(Model)) or 0
    rows = session.scalars(
        select(Model).order_by(Model.created_at.desc(), Model.id.desc()).limit(limit).offset(offset)
    ).all()
    return list(rows), total
