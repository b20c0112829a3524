"""Listings bound their paging parameters: an offset past what the databases' drivers take was
a 500 (OverflowError), found by the API fuzz run."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient


@pytest.mark.parametrize("listing", ["/v1/models", "/v1/datasets", "/v1/jobs"])
def test_an_offset_past_the_bound_is_a_422_naming_it(client: TestClient, listing: str) -> None:
    response = client.get(listing, params={"offset": 2**70})

    assert response.status_code == 422
    assert response.json()["error"] == "ValidationError"
    assert "offset" in response.json()["detail"]


def test_the_largest_offset_allowed_answers_an_empty_page(client: TestClient) -> None:
    response = client.get("/v1/models", params={"offset": 10**9})

    assert response.status_code == 200
    assert response.json()["items"] == []
