"""The API's cache of job documents: an ended job's document is kept a while, not for ever (a
delete in another API process, or retention, changes it), and a delete forgets it at once."""

import time
import uuid

from api.services.jobs.documents import JobDocumentCache, job_key


def test_an_ended_jobs_document_is_kept_only_final_s() -> None:
    cache = JobDocumentCache(fresh_s=0, final_s=0.05)
    key = job_key(project_id=uuid.uuid4(), job_id=uuid.uuid4())
    cache.put(key, b"{}", final=True)
    assert cache.get(key) == b"{}"
    time.sleep(0.06)
    assert cache.get(key) is None


def test_forgetting_deleted_jobs_drops_their_documents_and_the_list_pages() -> None:
    cache = JobDocumentCache(fresh_s=60)
    project, deleted, kept = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    for job_id in (deleted, kept):
        cache.put(job_key(project_id=project, job_id=job_id), b"{}", final=True)
    cache.put("a page", b"[]", final=False)

    cache.forget_jobs(project, [deleted])

    assert cache.get(job_key(project_id=project, job_id=deleted)) is None
    assert cache.get(job_key(project_id=project, job_id=kept)) == b"{}"
    assert cache.get("a page") is None
