"""Uploaded datasets (.npz validation inputs): check, store once per project and content hash,
list, fetch, each within the caller's project (another project's dataset is "not found")."""

import uuid
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.services.errors import DatasetNotFound, InvalidDatasetFile
from api.services.stored_uploads import display_name, store_upload
from api.services.uploads import ReceivedFile
from core.db.models import Dataset
from core.storage import ArtifactStore
from optimizer.errors import DatasetError
from optimizer.validation.datasets import inspect_dataset

__all__ = ["get_dataset", "list_datasets", "register_upload"]


def register_upload(
    *, session: Session, store: ArtifactStore, received: ReceivedFile, project_id: uuid.UUID
) -> tuple[Dataset, bool]:
    """Turn a received .npz into a Dataset row of the project; (dataset, created). Same bytes in
    the same project → its existing one.

    The file is checked on its own (no model is known yet); jobs naming the dataset check it
    against their model's inputs. The temporary file is always consumed: moved in or deleted.

    Raises:
        InvalidDatasetFile: see `optimizer.validation.datasets.inspect_dataset`; nothing is
            stored.
    """
    name = display_name(received, "dataset.npz")

    def describe(path: Path) -> Dataset:
        try:
            contents = inspect_dataset(path, name=name)
        except DatasetError as err:
            raise InvalidDatasetFile(f"the uploaded file is not a usable dataset: {err}") from err
        return Dataset(
            name=name,
            sha256=received.sha256,
            size_bytes=received.size_bytes,
            samples=contents.samples,
            arrays=[spec.to_dict() for spec in contents.arrays],
            has_labels=contents.has_labels,
        )

    return store_upload(session=session, store=store, received=received, project_id=project_id,
                        kind=Dataset,
                        key=f"datasets/{received.sha256}.npz", describe=describe)


def get_dataset(*, session: Session, project_id: uuid.UUID, dataset_id: uuid.UUID,
                share_lock: bool = False) -> Dataset:
    """The project's dataset; DatasetNotFound for an unknown id and another project's alike.
    `share_lock`: as for `get_model`."""
    query = select(Dataset).where(Dataset.id == dataset_id, Dataset.project_id == project_id)
    if share_lock:
        query = query.with_for_update(key_share=True)
    dataset = session.scalars(query).one_or_none()
    if dataset is None:
        raise DatasetNotFound(
            f"dataset {dataset_id} does not exist; GET /v1/datasets lists the uploaded ones")
    return dataset


def list_datasets(*, session: Session, project_id: uuid.UUID, limit: int,
                  offset: int) -> tuple[list[Dataset], int]:
    mine = Dataset.project_id == project_id
    total = session.scalar(select(func.count()).select_from(Dataset).where(mine)) or 0
    rows = session.scalars(
        select(Dataset)
        .where(mine)
        .order_by(Dataset.created_at.desc(), Dataset.id.desc())
        .limit(limit)
        .offset(offset)
    ).all()
    return list(rows), total
