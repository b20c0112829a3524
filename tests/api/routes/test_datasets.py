"""Uploading datasets: described per sample, stored once per content, bad files refused with
nothing left behind and no pickle ever loaded."""

import hashlib
import io
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.db.models import Dataset
from core.settings import Settings
from tests.support.npz_files import npz_bytes


def _images(samples: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((samples, 1, 3, 32, 32)).astype(np.float32)


def _stored_files(settings: Settings) -> list[Path]:
    return [p for p in settings.data_dir.rglob("*") if p.is_file()]


def _assert_nothing_stored(db_session: Session, settings: Settings) -> None:
    assert db_session.scalar(select(func.count()).select_from(Dataset)) == 0
    assert _stored_files(settings) == []


class _RunsOnUnpickle:
    """Unpickling this calls os.mkdir(marker): proof that a pickle was loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (str(self.marker),))


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array)
    return buffer.getvalue()


def _npz_with_truncated_member() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("input.npy", _npy_bytes(_images(4))[:-100])
    return buffer.getvalue()


def test_upload_returns_201_describing_one_sample_of_each_array(
    client: TestClient, settings: Settings
) -> None:
    labels = np.random.default_rng(1).integers(0, 10, size=5)
    data = npz_bytes(input=_images(5), labels=labels)
    response = client.post("/v1/datasets", files={"file": ("cifar.npz", data)})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["name"] == "cifar.npz"
    assert body["sha256"] == hashlib.sha256(data).hexdigest()
    assert body["size_bytes"] == len(data)
    assert body["samples"] == 5
    images = _images(5)
    assert body["arrays"] == [{"name": "input", "dtype": "float32", "shape": [1, 3, 32, 32],
                               "min": float(images.min()), "max": float(images.max())}]
    assert body["has_labels"] is True
    assert body["role"] == "validation"
    assert client.get(f"/v1/datasets/{body['id']}").json() == body
    stored = settings.artifacts_dir / "datasets" / f"{body['sha256']}.npz"
    assert stored.read_bytes() == data
    assert _stored_files(settings) == [stored]


def test_compressed_npz_with_several_inputs_and_no_labels_is_accepted(client: TestClient) -> None:
    data = npz_bytes(
        compressed=True,
        input_ids=np.arange(24, dtype=np.int64).reshape(3, 1, 8),
        attention_mask=np.ones((3, 1, 8), dtype=bool),
    )
    response = client.post("/v1/datasets?name=tokens", content=data,
                           headers={"Content-Type": "application/octet-stream"})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["name"] == "tokens"
    assert (body["samples"], body["has_labels"]) == (3, False)
    assert body["arrays"] == [
        {"name": "input_ids", "dtype": "int64", "shape": [1, 8], "min": 0.0, "max": 23.0},
        {"name": "attention_mask", "dtype": "bool", "shape": [1, 8], "min": 1.0, "max": 1.0},
    ]


def test_labels_may_hold_one_class_id_per_prediction_of_a_sample(client: TestClient) -> None:
    """A sample of batch 2 makes 2 predictions, so it carries 2 labels: labels [samples, 2]."""
    images = np.random.default_rng(0).standard_normal((3, 2, 3, 32, 32)).astype(np.float32)
    labels = np.random.default_rng(1).integers(0, 10, size=(3, 2))
    response = client.post("/v1/datasets", files={"file": ("batch2.npz", npz_bytes(
        input=images, labels=labels))})
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["samples"], body["has_labels"]) == (3, True)
    assert body["arrays"] == [{"name": "input", "dtype": "float32", "shape": [2, 3, 32, 32],
                               "min": float(images.min()), "max": float(images.max())}]


def test_same_bytes_again_returns_200_with_existing_dataset(
    client: TestClient, settings: Settings
) -> None:
    data = npz_bytes(input=_images(2))
    first = client.post("/v1/datasets", files={"file": ("a.npz", data)})
    again = client.post("/v1/datasets", files={"file": ("b.npz", data)})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["name"] == "a.npz"
    assert len(_stored_files(settings)) == 1


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"", "empty"),
        (np.random.default_rng(1).bytes(4096), "not a zip archive"),
        (_npy_bytes(_images(2)), "a single .npy array"),
        (npz_bytes(input=_images(3))[:500], "cannot be read"),
        (_npz_with_truncated_member(), "'input' is truncated"),
        (npz_bytes(), "holds no arrays"),
        (npz_bytes(input=np.array([{"a": 1}, None], dtype=object)), "pickles are refused"),
        (npz_bytes(input=np.array(["cat", "dog"])), "dtype '<U3'"),
        (npz_bytes(input=np.zeros(3, dtype=">f4")), "big-endian"),
        (npz_bytes(input=np.float32(1.0)), "'input' is a scalar"),
        (npz_bytes(input=np.zeros((0, 3), np.float32)), "holds no values"),
        (npz_bytes(input=np.zeros((3, 0), np.float32)), "holds no values"),
        (npz_bytes(a=np.zeros((3, 2), np.float32), b=np.zeros((4, 2), np.float32)),
         "'a' has 3, 'b' has 4"),
        (npz_bytes(input=_images(3), labels=np.arange(4)), "'input' has 3, 'labels' has 4"),
        (npz_bytes(input=_images(3), labels=np.zeros(3, np.float32)), "integer class indices"),
        (npz_bytes(input=_images(3), labels=np.array([0, -1, 2])), "negative"),
        (npz_bytes(labels=np.arange(3)), "holds only 'labels'"),
    ],
    ids=["empty", "random-bytes", "npy-not-npz", "truncated-zip", "truncated-member",
         "no-arrays", "object-array", "strings", "big-endian", "scalar", "no-samples",
         "empty-sample", "sample-counts-differ", "label-count-differs", "labels-float",
         "labels-negative", "only-labels"],
)
def test_invalid_dataset_is_422_and_nothing_is_stored(
    client: TestClient, db_session: Session, settings: Settings, payload: bytes, expected: str
) -> None:
    response = client.post("/v1/datasets", files={"file": ("bad.npz", payload)})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "InvalidDatasetFile"
    assert expected in body["detail"]
    _assert_nothing_stored(db_session, settings)


def test_pickled_array_is_refused_without_being_unpickled(
    client: TestClient, db_session: Session, settings: Settings, tmp_path: Path
) -> None:
    marker = tmp_path / "unpickled"
    hostile = np.array([_RunsOnUnpickle(marker)], dtype=object)
    for payload in (npz_bytes(input=hostile), npz_bytes(input=_images(1), labels=hostile)):
        response = client.post("/v1/datasets", files={"file": ("evil.npz", payload)})
        assert response.status_code == 422, response.text
        assert "pickles are refused" in response.json()["detail"]
    assert not marker.exists()
    _assert_nothing_stored(db_session, settings)


def test_over_limit_upload_is_413_and_nothing_is_stored(
    client: TestClient, db_session: Session, settings: Settings
) -> None:
    settings.max_upload_bytes = 4096
    response = client.post("/v1/datasets", files={"file": ("big.npz", npz_bytes(input=_images(2)))})
    assert response.status_code == 413, response.text
    assert "FUSEFORGE_MAX_UPLOAD_BYTES" in response.json()["detail"]
    _assert_nothing_stored(db_session, settings)


def test_unknown_dataset_is_404(client: TestClient) -> None:
    response = client.get("/v1/datasets/00000000-0000-0000-0000-000000000000")
    assert response.status_code == 404
    assert response.json()["error"] == "DatasetNotFound"


def test_datasets_are_listed_newest_first_with_paging(client: TestClient) -> None:
    ids = [
        client.post("/v1/datasets", files={"file": ("d.npz", npz_bytes(input=_images(1, seed=s)))})
        .json()["id"]
        for s in range(3)
    ]
    page = client.get("/v1/datasets?limit=2&offset=0").json()
    rest = client.get("/v1/datasets?limit=2&offset=2").json()
    assert page["total"] == 3 and rest["total"] == 3
    assert [d["id"] for d in page["items"] + rest["items"]] == ids[::-1]
    assert client.get("/v1/datasets?limit=0").status_code == 422


def test_upload_with_role_calibration_is_a_calibration_dataset(client: TestClient) -> None:
    response = client.post("/v1/datasets?role=calibration",
                           files={"file": ("calib.npz", npz_bytes(input=_images(3)))})
    assert response.status_code == 201, response.text
    assert response.json()["role"] == "calibration"
    raw = client.post("/v1/datasets?role=calibration", content=npz_bytes(input=_images(3, 1)),
                      headers={"Content-Type": "application/octet-stream"})
    assert raw.status_code == 201, raw.text
    assert raw.json()["role"] == "calibration"


def test_unknown_role_is_422_naming_role_and_the_choices(
        client: TestClient, db_session: Session, settings: Settings) -> None:
    response = client.post("/v1/datasets?role=training",
                           files={"file": ("d.npz", npz_bytes(input=_images(2)))})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert "role" in detail and "'calibration'" in detail and "'validation'" in detail
    _assert_nothing_stored(db_session, settings)


def test_same_bytes_with_the_other_role_is_409_naming_the_existing_dataset(
        client: TestClient, settings: Settings) -> None:
    data = npz_bytes(input=_images(2))
    first = client.post("/v1/datasets?role=validation", files={"file": ("a.npz", data)})
    again = client.post("/v1/datasets?role=calibration", files={"file": ("a.npz", data)})
    same = client.post("/v1/datasets?role=validation", files={"file": ("a.npz", data)})

    assert (first.status_code, again.status_code, same.status_code) == (201, 409, 200)
    body = again.json()
    assert body["error"] == "DatasetRoleConflict"
    assert first.json()["id"] in body["detail"] and "'validation'" in body["detail"]
    assert "cannot both calibrate and judge" in body["detail"]
    assert len(_stored_files(settings)) == 1


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("role", ["calibration", "validation"])
def test_an_array_holding_nan_or_inf_is_422_naming_it(
        client: TestClient, db_session: Session, settings: Settings, bad: float,
        role: str) -> None:
    images = _images(2)
    images[1, 0, 0, 0, 0] = bad
    response = client.post(f"/v1/datasets?role={role}", files={"file": ("d.npz", npz_bytes(
        mask=np.ones((2, 4), np.float32), pixels=images))})
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "InvalidDatasetFile"
    assert "'pixels'" in response.json()["detail"] and "'mask'" not in response.json()["detail"]
    _assert_nothing_stored(db_session, settings)


def test_datasets_are_filtered_by_role(client: TestClient) -> None:
    ids = {}
    for seed, role in enumerate(["calibration", "validation", "calibration"]):
        response = client.post(f"/v1/datasets?role={role}",
                               files={"file": ("d.npz", npz_bytes(input=_images(2, seed)))})
        assert response.status_code == 201, response.text
        ids.setdefault(role, set()).add(response.json()["id"])

    for role, expected in ids.items():
        page = client.get(f"/v1/datasets?role={role}").json()
        assert page["total"] == len(expected)
        assert {item["id"] for item in page["items"]} == expected
        assert {item["role"] for item in page["items"]} == {role}
    assert client.get("/v1/datasets").json()["total"] == 3
    refused = client.get("/v1/datasets?role=training")
    assert refused.status_code == 422 and "role" in refused.json()["detail"]
