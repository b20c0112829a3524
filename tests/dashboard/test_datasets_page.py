"""The datasets page: each uploaded dataset of the project with its role, arrays and value
ranges; a filter by role; the upload drop zone with its role select."""

import uuid

import numpy as np
import pytest
from fastapi.testclient import TestClient

from core.settings import Settings
from tests.dashboard.html_tree import Element, parse
from tests.dashboard.uploads import browser_headers
from tests.support.npz_files import npz_bytes


@pytest.fixture
def headers(settings: Settings, api_key: tuple[uuid.UUID, str]) -> dict[str, str]:
    return browser_headers(settings, api_key[1])


def _upload(site: TestClient, headers: dict[str, str], role: str, seed: int,
            filename: str) -> str:
    images = np.random.default_rng(seed).standard_normal((2, 1, 3, 4, 4)).astype(np.float32)
    response = site.post(f"/v1/datasets?role={role}", headers=headers,
                         files={"file": (filename, npz_bytes(input=images))})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def _roles(page: Element) -> dict[str, str]:
    return {row.attrs["data-dataset-id"]: row.one("td", class_="role").text
            for row in page.by_id("datasets").find_all("tr", data_dataset_id=True)}


def test_table_lists_each_datasets_role_and_arrays(
        signed_in_site: TestClient, headers: dict[str, str]) -> None:
    calibration = _upload(signed_in_site, headers, "calibration", 0, "calib.npz")
    validation = _upload(signed_in_site, headers, "validation", 1, "val.npz")

    page = parse(signed_in_site.get("/ui/datasets").text)

    assert _roles(page) == {calibration: "calibration", validation: "validation"}
    row = page.by_id("datasets").one("tr", data_dataset_id=calibration)
    assert "calib.npz" in row.one("th", class_="dataset-name").text
    assert row.one("td", class_="arrays").one("li").text.startswith("input float32 [1, 3, 4, 4]")
    assert row.one("td", class_="samples").text == "2"


def test_the_role_filter_lists_only_that_roles_datasets(
        signed_in_site: TestClient, headers: dict[str, str]) -> None:
    calibration = _upload(signed_in_site, headers, "calibration", 0, "calib.npz")
    _upload(signed_in_site, headers, "validation", 1, "val.npz")

    page = parse(signed_in_site.get("/ui/datasets?role=calibration").text)

    assert _roles(page) == {calibration: "calibration"}
    assert page.one("a", href="/ui/datasets?role=calibration").attrs["aria-current"] == "page"
    assert signed_in_site.get("/ui/datasets?role=training").status_code == 422


def test_no_datasets_shows_the_empty_state_and_the_upload_zone_with_its_role(
        signed_in_site: TestClient) -> None:
    page = parse(signed_in_site.get("/ui/datasets").text)

    assert "No datasets yet" in page.one("p", class_="empty").text
    zone = page.by_id("upload-dropzone")
    assert zone.attrs["data-upload-url"] == "/v1/datasets"
    select = zone.one("select", id="upload-role")
    assert [option.attrs["value"] for option in select.find_all("option")] == [
        "validation", "calibration"]
    assert zone.one("label", **{"for": "upload-role"}).text == "Role"
    assert ".npz" in zone.one("input", id="upload-file").attrs["accept"]
    main_nav = page.one("nav", **{"aria-label": "Main"})
    assert main_nav.one("a", href="/ui/datasets").attrs["aria-current"] == "page"
