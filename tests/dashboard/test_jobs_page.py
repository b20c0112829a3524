"""The jobs page: the project's jobs newest first, status in words and colour class, filters
that narrow the rows, paging, the row fragment the live table swaps in, and the cancel form."""

import re
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from html.parser import HTMLParser

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from core.db.models import BenchmarkRecord, Job, JobStatus, Model, ValidationResult
from core.db.types import utc_now
from core.job_config import JobConfig
from core.outcome import job_outcome
from core.settings import Settings
from tests.support.api_keys import new_key


@dataclass
class Row:
    attrs: dict[str, str]
    status_class: str = ""  # the class of the status cell's span.status
    status_text: str = ""
    has_progress: bool = False
    links: list[str] = field(default_factory=list)
    html: str = ""


class _Page(HTMLParser):
    """The jobs table's rows (`tr[data-job-id]`), and the page's `a[rel]` links by rel."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.rows: list[Row] = []
        self.rel: dict[str, str] = {}
        self._row: Row | None = None
        self._in_status = False
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "tr" and "data-job-id" in a:
            self._row = Row(attrs=a)
            self.rows.append(self._row)
        elif tag == "a" and "rel" in a:
            self.rel[a["rel"]] = a["href"]
        if self._row is None:
            return
        if tag == "span" and "status" in a.get("class", "").split():
            self._row.status_class, self._in_status = a["class"], True
        elif tag == "progress":
            self._row.has_progress = True
        elif tag == "a":
            self._row.links.append(a["href"])

    def handle_endtag(self, tag: str) -> None:
        if tag == "span":
            self._in_status = False
        elif tag == "tr":
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._row is not None and self._in_status:
            self._row.status_text += data.strip()


def _rows(response_text: str) -> list[Row]:
    return _Page(response_text).rows


def _ids(response_text: str) -> list[str]:
    return [row.attrs["data-job-id"] for row in _rows(response_text)]


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([0-9a-f]+)"', html)
    assert match, "the page carries no CSRF token"
    return match.group(1)


def _model(session: Session, project_id: uuid.UUID, name: str = "resnet50.onnx") -> Model:
    model = Model(project_id=project_id, name=name, sha256=uuid.uuid4().hex * 2, size_bytes=1,
                  storage_uri=f"store://models/{name}", ir_version=10, opset=17,
                  producer="test", inputs=[], outputs=[])
    session.add(model)
    session.flush()
    return model


def _job(session: Session, model: Model, status: JobStatus = JobStatus.QUEUED, *,
         backend: str = "onnxruntime", precision: str = "fp32", minutes_ago: float = 0,
         progress: float = 0.0, stage: str | None = None) -> Job:
    """A job of the model's project, written as the API and the worker would leave it."""
    created = utc_now() - timedelta(minutes=minutes_ago)
    started = created + timedelta(seconds=5) if status != JobStatus.QUEUED else None
    job = Job(project_id=model.project_id, model_id=model.id, status=status.value,
              config=JobConfig(backend=backend, precision=precision).model_dump(mode="json"),
              created_at=created, started_at=started, stage=stage, progress=progress,
              finished_at=created + timedelta(seconds=65) if status.is_final else None)
    session.add(job)
    session.commit()
    return job


@pytest.fixture
def project(api_key: tuple[uuid.UUID, str]) -> uuid.UUID:
    return api_key[0]


def test_rows_are_newest_first_with_status_as_text_and_class(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID) -> None:
    model = _model(db_session, project)
    done = _job(db_session, model, JobStatus.SUCCEEDED, minutes_ago=30)
    running = _job(db_session, model, JobStatus.RUNNING, minutes_ago=20, stage="optimize",
                   progress=0.4)
    queued = _job(db_session, model, minutes_ago=10)

    response = signed_in_site.get("/ui/jobs")

    assert response.status_code == 200, response.text
    rows = _rows(response.text)
    assert [r.attrs["data-job-id"] for r in rows] == [str(queued.id), str(running.id), str(done.id)]
    for row, status in zip(rows, ("queued", "running", "succeeded"), strict=True):
        assert row.attrs["data-status"] == status
        assert row.status_text == status
        assert row.status_class.split() == ["status", f"status-{status}"]
        assert f"/ui/jobs/{row.attrs['data-job-id']}" in row.links
    assert [r.has_progress for r in rows] == [False, True, False]
    assert 'aria-label="Progress of job' in response.text
    assert "optimize" in response.text


def _row_html(html: str, job: Job) -> str:
    match = re.search(rf'<tr data-job-id="{job.id}".*?</tr>', html, re.S)
    assert match, f"no row of job {job.id}"
    return match.group(0)


def _benchmarked(session: Session, job: Job, speedup: float) -> None:
    session.add(BenchmarkRecord(job_id=job.id, suite="comparison", variant="engine",
                                backend="tensorrt", batch_size=1, iterations=100, warmup=10,
                                latency_ms_p50=1.0, latency_ms_p90=1.1, latency_ms_p99=1.2,
                                latency_ms_mean=1.0, throughput_per_s=1000.0, peak_memory_mb=None,
                                speedup_vs_reference=speedup))
    session.commit()


def _validated(session: Session, job: Job, passed: bool) -> None:
    session.add(ValidationResult(job_id=job.id, output_name="logits", samples=8, max_abs_err=1e-3,
                                 max_rel_err=1e-3, mean_abs_err=1e-4, cosine_similarity=0.9999,
                                 atol=1e-2, rtol=1e-2, min_cosine=0.99, passed=passed, metrics=None))
    session.commit()


def test_rows_name_model_and_say_the_outcomes_headline_and_duration(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID) -> None:
    model = _model(db_session, project, "vit-b16.onnx")
    fast = _job(db_session, model, JobStatus.SUCCEEDED, backend="onnxruntime", precision="int8",
                minutes_ago=2)
    _benchmarked(db_session, fast, 2.5)
    _validated(db_session, fast, passed=True)
    fast.outcome = job_outcome(
        config=fast.config, status="succeeded",
        reports={"accuracy_report": {"quantization": {"shipped": "fp32", "why": "not faster"}}},
        engine_record={"speedup_vs_reference": 1.04, "speedup_ci_low": 0.92,
                       "speedup_ci_high": 1.09, "speedup_verdict": "no measurable difference"},
        validation={"passed": True, "outputs": []}).model_dump(mode="json")
    db_session.commit()
    old = _job(db_session, model, JobStatus.SUCCEEDED, backend="tensorrt", precision="fp16",
               minutes_ago=1.5)  # ended before outcomes were recorded
    _benchmarked(db_session, old, 2.5)
    _validated(db_session, old, passed=True)
    wrong = _job(db_session, model, JobStatus.FAILED, minutes_ago=1)
    _validated(db_session, wrong, passed=False)
    fresh = _job(db_session, model, precision="fp16")

    page = signed_in_site.get("/ui/jobs").text

    row = _row_html(page, fast)
    # The outcome's headline, as the API, the CLI and the job page say it (issue 45).
    for shown in ("vit-b16.onnx", "60.0 s",
                  "Shipped the onnxruntime fp32 engine (int8 asked): no measurable difference "
                  "in speed (1.04x, 0.92-1.09), accuracy passed."):
        assert shown in row, shown
    assert "faster" not in row
    assert f'href="/ui/models/{model.id}"' in row
    assert "tensorrt fp16, 2.50×" in _row_html(page, old)
    assert '<span class="verdict verdict-passed">passed</span>' in _row_html(page, old)
    assert '<span class="verdict verdict-failed">failed</span>' in _row_html(page, wrong)
    assert "onnxruntime fp16 asked" in _row_html(page, fresh)
    # Backend, precision, speed-up, validation and finished merged into Outcome and Status:
    # six columns, every row with as many cells as the header.
    header = re.search(r"<thead>.*?</thead>", page, re.S)
    assert header is not None
    assert re.findall(r'<th scope="col"[^>]*>(\w[\w-]*)', header.group(0)) == [
        "Job", "Status", "Model", "Outcome", "Created", "Duration"]
    for job in (fast, old, wrong, fresh):
        cells = re.findall(r"<t[hd][ >]", _row_html(page, job))
        assert len(cells) == 6, _row_html(page, job)


def test_every_filter_control_is_labelled(signed_in_site: TestClient) -> None:
    form = re.search(r'<form id="job-filters"[^>]*method="get".*?</form>',
                     signed_in_site.get("/ui/jobs").text, re.S)
    assert form, "no GET form#job-filters"
    controls = re.findall(r'<(?:select|input) id="([^"]+)" name="([^"]+)"', form.group(0))
    assert {name for _, name in controls} == {"status", "backend", "model_id", "q"}
    for control_id, _ in controls:
        assert f'<label for="{control_id}">' in form.group(0), control_id


def test_status_filter_narrows_the_rows_and_stays_selected(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID) -> None:
    model = _model(db_session, project)
    failed = _job(db_session, model, JobStatus.FAILED, minutes_ago=2)
    _job(db_session, model, JobStatus.SUCCEEDED, minutes_ago=1)

    response = signed_in_site.get("/ui/jobs", params={"status": "failed"})

    assert _ids(response.text) == [str(failed.id)]
    assert '<option value="failed" selected>' in response.text


def test_empty_filter_values_from_the_form_mean_all(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID) -> None:
    model = _model(db_session, project)
    jobs = [_job(db_session, model, minutes_ago=2), _job(db_session, model, JobStatus.FAILED)]

    response = signed_in_site.get("/ui/jobs?status=&backend=&model_id=&q=")

    assert response.status_code == 200, response.text
    assert set(_ids(response.text)) == {str(j.id) for j in jobs}


def test_model_filter_lists_the_projects_models_and_narrows(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID) -> None:
    resnet, bert = _model(db_session, project, "resnet50.onnx"), _model(db_session, project, "bert.onnx")
    _job(db_session, resnet, minutes_ago=1)
    bert_job = _job(db_session, bert)

    response = signed_in_site.get("/ui/jobs", params={"model_id": str(bert.id)})

    assert _ids(response.text) == [str(bert_job.id)]
    assert f'<option value="{bert.id}" selected>bert.onnx' in response.text
    assert f'<option value="{resnet.id}">resnet50.onnx' in response.text


def test_backend_filter_narrows_the_rows(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID) -> None:
    model = _model(db_session, project)
    trt = _job(db_session, model, backend="tensorrt", precision="fp16", minutes_ago=1)
    _job(db_session, model, backend="onnxruntime")

    response = signed_in_site.get("/ui/jobs", params={"backend": "tensorrt"})

    assert _ids(response.text) == [str(trt.id)]
    [row] = _rows(response.text)
    assert row.attrs["data-backend"] == "tensorrt"
    assert '<option value="tensorrt" selected>' in response.text


def test_search_by_model_name_narrows_the_rows(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID) -> None:
    bert_job = _job(db_session, _model(db_session, project, "bert-base.onnx"), minutes_ago=1)
    _job(db_session, _model(db_session, project, "resnet50.onnx"))

    response = signed_in_site.get("/ui/jobs", params={"q": "bert"})

    assert _ids(response.text) == [str(bert_job.id)]
    assert "bert-base.onnx" in response.text
    assert 'value="bert"' in response.text


def test_an_unknown_status_is_the_apis_422_shown_as_the_error_page(signed_in_site: TestClient) -> None:
    response = signed_in_site.get("/ui/jobs", params={"status": "exploded"})
    assert response.status_code == 422
    assert "status" in response.text and "Something went wrong" in response.text


def test_pages_of_fifty_link_to_each_other_keeping_the_filters(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID) -> None:
    model = _model(db_session, project)
    jobs = [_job(db_session, model, minutes_ago=60 - i) for i in range(55)]  # jobs[-1] newest
    _job(db_session, model, JobStatus.FAILED, minutes_ago=90)

    first = signed_in_site.get("/ui/jobs", params={"status": "queued"})
    links = _Page(first.text).rel
    assert _ids(first.text) == [str(j.id) for j in reversed(jobs[5:])]
    assert links == {"next": "/ui/jobs?status=queued&offset=50"}
    assert "Jobs 1–50 of" in first.text and ">55<" in first.text

    second = signed_in_site.get(links["next"])
    assert _ids(second.text) == [str(j.id) for j in reversed(jobs[:5])]
    assert _Page(second.text).rel == {"prev": "/ui/jobs?status=queued"}


def test_past_the_last_page_links_back_to_the_first(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID) -> None:
    _job(db_session, _model(db_session, project))
    response = signed_in_site.get("/ui/jobs", params={"offset": 100})
    assert 'class="empty"' in response.text and 'href="/ui/jobs"' in response.text
    assert _ids(response.text) == []


def test_no_jobs_shows_the_empty_state(signed_in_site: TestClient) -> None:
    response = signed_in_site.get("/ui/jobs")
    assert response.status_code == 200
    assert re.search(r'<p class="empty">No jobs yet', response.text)
    assert re.search(r'<table id="jobs"[^>]* hidden>', response.text)  # jobs.js fills it live


def test_filters_matching_nothing_say_so(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID) -> None:
    _job(db_session, _model(db_session, project))
    response = signed_in_site.get("/ui/jobs", params={"status": "failed"})
    assert '<p class="empty">No jobs match these filters' in response.text


def test_row_fragment_is_the_row_the_page_renders(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID) -> None:
    job = _job(db_session, _model(db_session, project), JobStatus.RUNNING, stage="build",
               progress=0.25)
    page_row = re.search(r'<tr data-job-id=.*?</tr>', signed_in_site.get("/ui/jobs").text, re.S)
    assert page_row

    response = signed_in_site.get(f"/ui/jobs/{job.id}/row")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    fragment = response.text.strip()
    assert fragment.startswith(f'<tr data-job-id="{job.id}" data-status="running"')
    assert "<html" not in fragment and fragment.endswith("</tr>")
    assert fragment == page_row.group(0)


def test_another_projects_jobs_are_never_shown(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID,
        settings: Settings) -> None:
    other_project, _ = new_key(db_session, settings)
    theirs = _job(db_session, _model(db_session, other_project, "secret-model.onnx"))
    ours = _job(db_session, _model(db_session, project), minutes_ago=1)

    page = signed_in_site.get("/ui/jobs")
    assert _ids(page.text) == [str(ours.id)]
    assert "secret-model.onnx" not in page.text
    fragment = signed_in_site.get(f"/ui/jobs/{theirs.id}/row")
    assert fragment.status_code == 404
    assert str(theirs.id) not in _ids(fragment.text)


def test_cancel_form_without_the_page_token_is_refused_and_cancels_nothing(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID) -> None:
    job = _job(db_session, _model(db_session, project))

    response = signed_in_site.post(f"/ui/jobs/{job.id}/cancel", data={"csrf_token": "0" * 64})

    assert response.status_code == 403
    db_session.refresh(job)
    assert job.status == JobStatus.QUEUED


def test_cancel_form_cancels_a_queued_job_and_returns_to_its_page(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID) -> None:
    job = _job(db_session, _model(db_session, project))
    token = _csrf(signed_in_site.get("/ui/jobs").text)

    response = signed_in_site.post(f"/ui/jobs/{job.id}/cancel", data={"csrf_token": token})

    assert response.status_code == 303
    assert response.headers["location"] == f"/ui/jobs/{job.id}"
    db_session.refresh(job)
    assert job.status == JobStatus.CANCELLED
    [row] = _rows(signed_in_site.get(f"/ui/jobs/{job.id}/row").text)
    assert row.status_text == "cancelled"


def test_cancelling_a_finished_job_shows_the_apis_409(
        signed_in_site: TestClient, db_session: Session, project: uuid.UUID) -> None:
    job = _job(db_session, _model(db_session, project), JobStatus.SUCCEEDED)
    token = _csrf(signed_in_site.get("/ui/jobs").text)

    response = signed_in_site.post(f"/ui/jobs/{job.id}/cancel", data={"csrf_token": token})

    assert response.status_code == 409
    assert "JobNotCancellable" in response.text and "already succeeded" in response.text
