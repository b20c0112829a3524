"""`FuseForgeClient.find_job`: a job named by a unique prefix of its id, found through the pages
of GET /v1/jobs; a prefix several ids share, or none, is refused naming them. A scripted server
serves the pages, since ids that share a prefix cannot be made on demand."""

from __future__ import annotations

from typing import Any

import pytest

from fuseforge_client import FuseForgeClient, NotFoundError
from tests.support.scripted_http import Answer, scripted_server

FIRST = "abcd1234-0000-4000-8000-000000000001"
SECOND = "abcd5678-0000-4000-8000-000000000002"
OTHER = "ef012345-0000-4000-8000-000000000003"


def _job(job_id: str) -> dict[str, Any]:
    return {"id": job_id, "model_id": "11111111-0000-4000-8000-000000000000",
            "status": "succeeded", "stage": "done", "progress": 1.0}


def _page(ids: list[str], *, total: int, offset: int) -> Answer:
    return Answer(200, {"items": [_job(i) for i in ids], "total": total, "limit": 500,
                        "offset": offset})


def test_a_unique_prefix_reads_that_job() -> None:
    with scripted_server([_page([FIRST, OTHER], total=2, offset=0), Answer(200, _job(OTHER))]
                         ) as server, FuseForgeClient(server.base_url) as client:
        job = client.find_job("EF01-23")  # case and dashes as a user might copy them

        assert job.id == OTHER
        assert [r.path for r in server.received] == ["/v1/jobs?limit=500&offset=0",
                                                     f"/v1/jobs/{OTHER}"]


def test_a_prefix_two_jobs_share_across_pages_is_refused_naming_both() -> None:
    with scripted_server([_page([FIRST], total=2, offset=0),
                          _page([SECOND], total=2, offset=1)]
                         ) as server, FuseForgeClient(server.base_url) as client:
        with pytest.raises(ValueError, match="several jobs' ids start with 'abcd'") as refused:
            client.find_job("abcd")

        assert FIRST in str(refused.value) and SECOND in str(refused.value)
        assert [r.path for r in server.received][-1] == "/v1/jobs?limit=500&offset=1"


def test_a_full_id_is_read_directly_and_no_match_is_not_found() -> None:
    with scripted_server([Answer(200, _job(FIRST)), _page([OTHER], total=1, offset=0)]
                         ) as server, FuseForgeClient(server.base_url) as client:
        assert client.find_job(FIRST).id == FIRST
        with pytest.raises(NotFoundError, match="no job's id starts with 'abcd9'"):
            client.find_job("abcd9")
        assert [r.path for r in server.received] == [f"/v1/jobs/{FIRST}",
                                                     "/v1/jobs?limit=500&offset=0"]


@pytest.mark.parametrize("text", ["ab", "not-hex!", "a" * 33])
def test_what_is_no_id_prefix_is_refused_before_any_request(text: str) -> None:
    with FuseForgeClient("http://127.0.0.1:9") as client, pytest.raises(
            ValueError, match="is not a job id"):
        client.find_job(text)
