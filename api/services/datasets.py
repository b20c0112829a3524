"""Uploaded datasets (.npz calibration or validation inputs): check, store once per project and
content hash with its role, list, fetch, each within the caller's project (another project's
dataset is "not found")."""

import uuid

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.services.errors import DatasetNotFound, DatasetRoleConflict, InvalidDatasetFile
from api.services.uploads.receive import ReceivedFile
from api.services.uploads.stored import display_name, store_upload
from core.db.models import Dataset, DatasetRole
from core.storage import ArtifactStore
from optimizer.errors import DatasetError
from optimizer.validation.datasets import inspect_dataset, value_ranges

__all__ = ["get_dataset", "list_datasets", "register_upload"]


def register_upload(
    *, session: Session, store: ArtifactStore, received: ReceivedFile, project_id: uuid.UUID,
    role: DatasetRole = DatasetRole.VALIDATION,
) -> tuple[Dataset, bool]:
    """Turn a received .npz into a Dataset row of the project with `role`; (dataset, created).
    Same bytes in the same project with the same role → its existing one.

    The file is checked on its own (no model is known yet), and each input array's value range
    recorded; jobs naming the dataset check it against their model's inputs. The temporary file
    is always consumed: moved in or deleted.

    Raises:
        InvalidDatasetFile: see `optimizer.validation.datasets.inspect_dataset` and
            `value_ranges` (NaN or an infinity in an array); nothing is stored.
        DatasetRoleConflict: the project holds these bytes already with the other role (the
            samples that calibrate a model must not be the ones that judge it).
    """
    name = display_name(received, "dataset.npz")

    path = received.path  # a dataset is received into a temporary file: numpy reads it

    def describe() -> Dataset:
        if path is None:
            raise ValueError("a dataset upload is received into a temporary file")
        try:
            contents = inspect_dataset(path, name=name)
            ranges = {found.name: found for found in value_ranges(path, name=name)}
        except DatasetError as err:
            raise InvalidDatasetFile(f"the uploaded file is not a usable dataset: {err}") from err
        return Dataset(
            name=name,
            sha256=received.sha256,
            size_bytes=received.size_bytes,
            samples=contents.samples,
            arrays=[{**spec.to_dict(), "min": ranges[spec.name].min,
                     "max": ranges[spec.name].max} for spec in contents.arrays],
            has_labels=contents.has_labels,
            role=role,
        )

    dataset, created = store_upload(
        session=session, store=store, received=received, project_id=project_id, kind=Dataset,
        key=f"datasets/{received.sha256}.npz", describe=describe)
    if dataset.role != role:
        raise DatasetRoleConflict(
            f"these bytes are already dataset {dataset.id} with role '{dataset.role}'; the same "
            f"samples cannot both calibrate and judge a model, so they cannot also be a "
            f"{role.value} dataset. Upload different samples for {role.value}, or use dataset "
            f"{dataset.id} as a {dataset.role} dataset")
    return dataset, created


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


def list_datasets(*, session: Session, project_id: uuid.UUID, limit: int, offset: int,
                  role: DatasetRole | None = None) -> tuple[list[Dataset], int]:
    """A page of the project's datasets, newest first, and their total; only `role`'s if
    given."""
    mine = Dataset.project_id == project_id
    if role is not None:
        mine = mine & (Dataset.role == role)
    total = session.scalar(select(func.count()).select_from(Dataset).where(mine)) or 0
    rows = session.scalars(
        select(Dataset)
        .where(mine)
        .order_by(Dataset.created_at.desc(), Dataset.id.desc())
        .limit(limit)
        .offset(offset)
    ).all()
    return list(rows), total
