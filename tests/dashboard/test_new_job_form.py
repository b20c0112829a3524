"""The new-job form: built from the job configuration the API takes (every control names a
JobCreate field, every control has a label), the passes the API lists checked as its default,
shape and profile fields for the dynamic inputs, the project's datasets, the search a job may
run instead, and "Run again with…" filling every field from a job's stored config."""

import json
import typing
import uuid
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel
from sqlalchemy.orm import Session

from api.deps import get_api_settings
from api.schemas.jobs import JobCreate
from core.settings import Settings, WebhookSettings
from optimizer.registries.backends import BACKENDS
from optimizer.search.decision import Strategy
from optimizer.testing.models import model_bytes, small_cnn
from tests.dashboard.html_tree import Element, parse
from tests.dashboard.uploads import browser_headers, start_job, token_model, upload_model
from tests.support.api_keys import bearer, new_key
from tests.support.npz_files import npz_bytes
from tests.support.stand_in import registered


@pytest.fixture
def headers(settings: Settings, api_key: tuple[uuid.UUID, str]) -> dict[str, str]:
    return browser_headers(settings, api_key[1])


@pytest.fixture
def tokens(signed_in_site: TestClient, headers: dict[str, str]) -> dict[str, Any]:
    """A model with two dynamic inputs (input_ids, mask) and a static one (position)."""
    return upload_model(signed_in_site, headers, token_model(), name="tokens")


def _form(site: TestClient, model_id: str, from_job: str | None = None) -> Element:
    query = f"?from_job={from_job}" if from_job else ""
    response = site.get(f"/ui/models/{model_id}/new-job{query}")
    assert response.status_code == 200, response.text[:500]
    return parse(response.text)


def _control(form: Element, path: str) -> Element:
    return form.by_id("new-job").one(data_field=path)


def _selected(select: Element) -> str:
    [option] = select.find_all("option", selected=True)
    return option.attrs["value"]


def _group_fields(name: str) -> set[str] | None:
    """The fields of the option group JobCreate's `name` is (validation, search, ...); None for
    a field that is no group (a dict keyed by input name, a plain value)."""
    annotation = JobCreate.model_fields[name].annotation
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return set(candidate.model_fields)
    return None


def _names_a_field_of_the_job_body(path: str) -> bool:
    """Whether `path` starts with a JobCreate field and, where that field is an option group,
    one of the group's: "search.time_budget_s" does, "search.time_budget" does not."""
    head, _, rest = path.partition(".")
    if head not in JobCreate.model_fields:
        return False
    group = _group_fields(head)
    return not rest or group is None or rest.split(".")[0] in group


def _controls(form: Element) -> list[Element]:
    return [el for el in form.by_id("new-job").iter()
            if el.tag in ("input", "select", "textarea") and el.attrs.get("type") != "hidden"]


def test_every_control_is_labelled_and_names_a_field_of_the_job_body(
        signed_in_site: TestClient, tokens: dict[str, Any]) -> None:
    page = _form(signed_in_site, tokens["id"])

    controls = _controls(page)
    assert len(controls) > 30
    labelled = {label.attrs["for"] for label in page.find_all("label") if "for" in label.attrs}
    assert [c.attrs.get("id") for c in controls if c.attrs.get("id") not in labelled] == []
    for control in controls:
        path = control.attrs.get("data-field") or control.attrs["name"]
        assert _names_a_field_of_the_job_body(path), path
    assert page.by_id("new-job").one("button", type="submit").text == "Start job"
    errors = page.by_id("new-job-errors")
    assert errors.attrs["role"] == "alert" and "hidden" in errors.attrs
    assert page.one("script", src="/ui/static/new_job.js")
    assert "JavaScript is required" in page.one("noscript").text


def test_backend_and_precision_offer_what_the_job_config_accepts(
        signed_in_site: TestClient, tokens: dict[str, Any]) -> None:
    form = _form(signed_in_site, tokens["id"]).by_id("new-job")

    backend = form.one("select", name="backend")
    assert [o.attrs["value"] for o in backend.find_all("option")] == [
        "onnxruntime", "tensorrt", "openvino"]  # the registry's, in its order
    assert _selected(backend) == "onnxruntime"
    precision = form.one("select", name="precision")
    assert [o.attrs["value"] for o in precision.find_all("option")] == ["fp32", "fp16", "bf16",
                                                                        "int8", "fp8"]
    assert _selected(precision) == "fp32"


def test_passes_are_those_the_api_lists_checked_as_its_default(
        signed_in_site: TestClient, tokens: dict[str, Any]) -> None:
    listed = signed_in_site.get("/v1/passes").json()
    assert any("onnxruntime" in p["off_by_default"] for p in listed)  # else this proves little

    boxes = _form(signed_in_site, tokens["id"]).by_id("new-job").find_all("input", name="passes")

    assert [box.attrs["value"] for box in boxes] == [p["name"] for p in listed]
    for box, described in zip(boxes, listed, strict=True):
        assert box.attrs["type"] == "checkbox"
        checked = "checked" in box.attrs
        assert checked == ("onnxruntime" not in described["off_by_default"]), box.attrs["value"]
        assert box.attrs["data-off-on"].split() == list(described["off_by_default"])


def test_defaults_are_the_job_configs(signed_in_site: TestClient, tokens: dict[str, Any]) -> None:
    form = _form(signed_in_site, tokens["id"])

    assert _control(form, "validation.samples").attrs["value"] == "8"
    assert _control(form, "validation.seed").attrs["value"] == "0"
    assert _control(form, "validation.atol").attrs["value"] == ""
    assert _control(form, "validation.atol").attrs["placeholder"] == "0.0001"  # fp32's default
    assert _control(form, "benchmark.warmup").attrs["value"] == "5"
    assert _control(form, "benchmark.iterations").attrs["value"] == "30"
    assert "checked" in _control(form, "benchmark.measure_memory").attrs
    assert "checked" not in _control(form, "ablation").attrs
    assert "checked" not in _control(form, "precision_search").attrs
    assert _control(form, "accuracy_budget.min_cosine").attrs["value"] == "0.999"
    assert _selected(_control(form, "on_validation_failure")) == "fail"
    assert _selected(_control(form, "dataset_id")) == ""
    assert _control(form, "callback_url").attrs["value"] == ""
    assert "hidden" in form.by_id("profiles").attrs  # TensorRT only
    assert "hidden" not in form.by_id("onnxruntime-options").attrs


def test_dynamic_inputs_get_shape_and_profile_fields_static_ones_none(
        signed_in_site: TestClient, tokens: dict[str, Any]) -> None:
    form = _form(signed_in_site, tokens["id"])

    shapes = form.by_id("input-shapes").find_all("input", data_shape_input=True)
    assert [s.attrs["data-input"] for s in shapes] == ["input_ids", "mask"]
    assert shapes[1].attrs["placeholder"] == "batch, ?"
    profiles = form.by_id("profiles").find_all("fieldset", data_profile_input=True)
    assert [p.attrs["data-profile-input"] for p in profiles] == ["input_ids", "mask"]
    assert [i.attrs["data-bound"] for i in profiles[0].find_all("input")] == ["min", "opt", "max"]
    # every input, static or not, may be given a range for its random values
    ranges = form.by_id("input-ranges").find_all(data_range_input=True)
    assert [r.attrs["data-range-input"] for r in ranges] == ["input_ids", "mask", "position"]


def test_a_model_with_fixed_shapes_says_it_needs_none(
        signed_in_site: TestClient, headers: dict[str, str]) -> None:
    fixed = upload_model(signed_in_site, headers, small_cnn(batch=1))
    form = _form(signed_in_site, fixed["id"])
    assert not form.find_all("input", data_shape_input=True)
    assert "fixed shape" in form.by_id("input-shapes").text


def test_the_projects_datasets_are_offered(
        signed_in_site: TestClient, headers: dict[str, str]) -> None:
    model = upload_model(signed_in_site, headers, small_cnn())
    images = np.zeros((4, 1, 3, 32, 32), dtype=np.float32)
    dataset = signed_in_site.post("/v1/datasets", headers=headers,
                                  files={"file": ("images.npz", npz_bytes(input=images))}).json()

    select = _control(_form(signed_in_site, model["id"]), "dataset_id")

    options = {o.attrs["value"]: o.text for o in select.find_all("option")}
    assert options[dataset["id"]] == "images.npz (4 samples)"
    assert "" in options  # random inputs instead


def test_run_again_fills_every_field_from_a_tensorrt_jobs_config(
        signed_in_site: TestClient, headers: dict[str, str], tokens: dict[str, Any],
        settings: Settings) -> None:
    allowed = settings.model_copy(update={"webhooks": WebhookSettings(allowed_networks=["127.0.0.0/8"])})
    signed_in_site.app.dependency_overrides[get_api_settings] = lambda: allowed  # type: ignore[attr-defined]
    job = start_job(
        signed_in_site, headers, tokens["id"], backend="tensorrt", precision="fp16",
        target_gpu="9.0", passes=["cleanup", "fuse_gelu"],
        input_shapes={"input_ids": [2, 16], "mask": [2, 16]},
        profiles={"input_ids": {"min": [1, 8], "opt": [2, 16], "max": [4, 32]},
                  "mask": {"min": [1, 1], "opt": [2, 16], "max": [4, 64]}},
        validation={"samples": 3, "seed": 11, "atol": 0.02, "min_top1_agreement": 0.95},
        benchmark={"warmup": 2, "iterations": 7, "measure_memory": False},
        ablation=True, precision_search=True,
        accuracy_budget={"min_cosine": 0.99, "max_abs_err": 0.5},
        on_validation_failure="fallback", callback_url="http://127.0.0.1:9/hook")

    form = _form(signed_in_site, tokens["id"], from_job=job["id"])

    assert form.by_id("from-job").one("a").attrs["href"] == f"/ui/jobs/{job['id']}"
    assert _selected(_control(form, "backend")) == "tensorrt"
    assert _selected(_control(form, "precision")) == "fp16"
    assert _control(form, "target_gpu").attrs["value"] == "9.0"
    checked = [b.attrs["value"] for b in form.find_all("input", name="passes") if "checked" in b.attrs]
    assert checked == ["cleanup", "fuse_gelu"]
    assert form.by_id("passes").attrs["data-custom"] == "true"
    assert _control(form, "input_shapes.input_ids").attrs["value"] == "2, 16"
    assert _control(form, "input_shapes.mask").attrs["value"] == "2, 16"
    assert "hidden" not in form.by_id("profiles").attrs
    assert [_control(form, f"profiles.input_ids.{b}").attrs["value"] for b in ("min", "opt", "max")] == [
        "1, 8", "2, 16", "4, 32"]
    assert _control(form, "profiles.mask.max").attrs["value"] == "4, 64"
    assert _control(form, "validation.samples").attrs["value"] == "3"
    assert _control(form, "validation.seed").attrs["value"] == "11"
    assert _control(form, "validation.atol").attrs["value"] == "0.02"
    assert _control(form, "validation.min_top1_agreement").attrs["value"] == "0.95"
    assert _control(form, "validation.rtol").attrs["value"] == ""
    assert _control(form, "benchmark.warmup").attrs["value"] == "2"
    assert _control(form, "benchmark.iterations").attrs["value"] == "7"
    assert "checked" not in _control(form, "benchmark.measure_memory").attrs
    assert "checked" in _control(form, "ablation").attrs
    assert "checked" in _control(form, "precision_search").attrs
    assert _control(form, "accuracy_budget.min_cosine").attrs["value"] == "0.99"
    assert _control(form, "accuracy_budget.max_abs_err").attrs["value"] == "0.5"
    assert _control(form, "accuracy_budget.min_top1_agreement").attrs["value"] == ""
    assert _selected(_control(form, "on_validation_failure")) == "fallback"
    assert _control(form, "callback_url").attrs["value"] == "http://127.0.0.1:9/hook"
    assert "hidden" in form.by_id("onnxruntime-options").attrs


def test_run_again_fills_the_onnxruntime_options_ranges_and_dataset(
        signed_in_site: TestClient, headers: dict[str, str], tokens: dict[str, Any]) -> None:
    dataset = signed_in_site.post("/v1/datasets", headers=headers, files={"file": ("ids.npz", npz_bytes(
        input_ids=np.ones((2, 1, 6), np.int64), mask=np.zeros((2, 1, 6), np.float32),
        position=np.zeros((2, 1, 4), np.int64)))}).json()
    job = start_job(signed_in_site, headers, tokens["id"], passes="none",
                    ort_optimization_level="basic", ort_flush_denormals=False,
                    ort_intra_op_threads=2,
                    input_ranges={"input_ids": [0, 30522]}, dataset_id=dataset["id"])

    form = _form(signed_in_site, tokens["id"], from_job=job["id"])

    assert _selected(_control(form, "ort_optimization_level")) == "basic"
    assert _selected(_control(form, "ort_flush_denormals")) == "false"
    # A job stored with ONNX Runtime's name for the threads fills the CPU backends' field.
    assert _control(form, "intra_op_threads").attrs["value"] == "2"
    assert not [b for b in form.find_all("input", name="passes") if "checked" in b.attrs]
    assert _control(form, "input_ranges.input_ids.0").attrs["value"] == "0.0"
    assert _control(form, "input_ranges.input_ids.1").attrs["value"] == "30522.0"
    assert _control(form, "input_ranges.mask.0").attrs["value"] == ""
    assert "open" in form.by_id("input-ranges").attrs
    assert _selected(_control(form, "dataset_id")) == dataset["id"]
    # the dataset set the shapes the job ran at; they come back as they were stored
    assert _control(form, "input_shapes.input_ids").attrs["value"] == "1, 6"


def test_the_search_fieldset_offers_every_strategy_and_the_calibration_datasets(
        signed_in_site: TestClient, headers: dict[str, str], tokens: dict[str, Any]) -> None:
    calibration = signed_in_site.post(
        "/v1/datasets", headers=headers, params={"role": "calibration"},
        files={"file": ("calib.npz", npz_bytes(input_ids=np.ones((2, 1, 6), np.int64)))}).json()
    signed_in_site.post("/v1/datasets", headers=headers,
                        files={"file": ("judge.npz", npz_bytes(input_ids=np.ones((2, 1, 6), np.int64)))})

    form = _form(signed_in_site, tokens["id"])

    group = form.by_id("job-search")
    labelled = {label.attrs["for"]: label.text for label in group.find_all("label")}
    search = _control(form, "search")
    assert search.attrs["type"] == "checkbox" and "checked" not in search.attrs
    assert labelled[search.attrs["id"]].startswith("Search the configurations: try every precision")
    assert "hidden" in form.by_id("search-options").attrs  # until the box is checked
    paths = {"search.strategy": "Strategy", "search.time_budget_s": "Time budget (s)",
             "search.latency_budget_ms": "Latency budget (ms)",
             "search.pass_sets": "Also try fp32 without each pass family"}
    for path, label in paths.items():
        control = group.one(data_field=path)
        assert labelled[control.attrs["id"]] == label, path
        assert _names_a_field_of_the_job_body(path), path
    assert not _names_a_field_of_the_job_body("search.time_budget")  # the check can fail
    strategy = _control(form, "search.strategy")
    assert [o.attrs["value"] for o in strategy.find_all("option")] == list(Strategy)
    assert _selected(strategy) == Strategy.MIN_LATENCY
    assert _control(form, "search.time_budget_s").attrs["value"] == "600"
    latency = _control(form, "search.latency_budget_ms")
    assert latency.attrs["value"] == ""
    hint = form.by_id(latency.attrs["aria-describedby"]).text
    assert "Only with strategy min_latency_under_budget" in hint
    assert "checked" in _control(form, "search.pass_sets").attrs
    [calibration_select] = group.find_all("select", data_field="quantization.calibration")
    assert labelled[calibration_select.attrs["id"]] == "Calibration dataset for the int8 static candidates"
    offered = {o.attrs["value"] for o in calibration_select.find_all("option")}
    assert offered == {"", calibration["id"]}  # the calibration role only
    assert _selected(calibration_select) == ""
    # what the search picks itself stays on the page, disabled by the script while it is checked
    for path in ("precision", "on_validation_failure", "ort_optimization_level"):
        assert "data-search-picks" in _control(form, path).attrs, path
    assert "data-search-picks" in form.by_id("passes").attrs
    ids = [el.attrs["id"] for el in form.iter() if "id" in el.attrs]
    assert len(ids) == len(set(ids))


def test_run_again_from_a_search_job_checks_the_search_and_fills_it(
        signed_in_site: TestClient, headers: dict[str, str], tokens: dict[str, Any]) -> None:
    calibration = signed_in_site.post("/v1/datasets", headers=headers, params={"role": "calibration"},
                                      files={"file": ("calib.npz", npz_bytes(
                                          input_ids=np.ones((2, 1, 6), np.int64),
                                          mask=np.zeros((2, 1, 6), np.float32),
                                          position=np.zeros((2, 1, 4), np.int64)))}).json()
    job = start_job(signed_in_site, headers, tokens["id"],
                    search={"strategy": "max_throughput", "time_budget_s": 60, "pass_sets": False,
                            "precisions": ["fp32", "fp16"]},
                    quantization={"calibration": calibration["id"]})

    form = _form(signed_in_site, tokens["id"], from_job=job["id"])

    assert "checked" in _control(form, "search").attrs
    assert "hidden" not in form.by_id("search-options").attrs
    assert _selected(_control(form, "search.strategy")) == "max_throughput"
    assert _control(form, "search.time_budget_s").attrs["value"] == "60"
    assert _control(form, "search.latency_budget_ms").attrs["value"] == ""
    assert "checked" not in _control(form, "search.pass_sets").attrs
    [calibration_select] = form.by_id("job-search").find_all("select", data_field="quantization.calibration")
    assert _selected(calibration_select) == calibration["id"]
    # no control of its own: kept as the job searched, in a box that drops it when unchecked
    kept = _control(form, "search.precisions")
    assert "checked" in kept.attrs and json.loads(kept.attrs["data-values"]) == ["fp32", "fp16"]
    assert not form.find_all(data_field="search.ort_levels")
    assert _selected(_control(form, "precision")) == "fp32"


def test_run_again_from_an_unknown_job_starts_from_the_defaults_saying_so(
        signed_in_site: TestClient, tokens: dict[str, Any]) -> None:
    missing = uuid.uuid4()
    form = _form(signed_in_site, tokens["id"], from_job=str(missing))
    assert str(missing) in form.by_id("from-job-problem").text
    assert not form.find_all(id="from-job")
    assert _selected(_control(form, "backend")) == "onnxruntime"


def test_run_again_never_shows_another_projects_job(
        signed_in_site: TestClient, tokens: dict[str, Any], db_session: Session,
        settings: Settings) -> None:
    _, other_key = new_key(db_session, settings)
    model = signed_in_site.post("/v1/models", headers=bearer(other_key),
                                files={"file": ("x.onnx", model_bytes(small_cnn(seed=3)))}).json()
    theirs = signed_in_site.post("/v1/jobs", headers=bearer(other_key),
                                 json={"model_id": model["id"], "backend": "tensorrt",
                                       "target_gpu": "H200"}).json()

    form = _form(signed_in_site, tokens["id"], from_job=theirs["id"])

    assert "does not exist" in form.by_id("from-job-problem").text
    assert _control(form, "target_gpu").attrs["value"] == ""


def test_new_job_form_of_an_unknown_model_is_404(signed_in_site: TestClient) -> None:
    response = signed_in_site.get(f"/ui/models/{uuid.uuid4()}/new-job")
    assert response.status_code == 404
    assert "ModelNotFound" in response.text


def test_a_gpu_search_may_also_race_onnxruntime_and_run_again_keeps_that(
        signed_in_site: TestClient, headers: dict[str, str], tokens: dict[str, Any]) -> None:
    form = _form(signed_in_site, tokens["id"])
    also = _control(form, "search.backends")
    wrapper = form.by_id("job-search").one(data_backend_only="tensorrt")
    assert also.attrs["value"] == "onnxruntime" and "checked" not in also.attrs
    assert "hidden" in wrapper.attrs  # the default backend, onnxruntime, runs on CPU workers
    labelled = {label.attrs["for"]: label.text for label in form.find_all("label")}
    assert labelled[also.attrs["id"]] == "Also try ONNX Runtime on the same worker"

    job = start_job(signed_in_site, headers, tokens["id"], backend="tensorrt",
                    search={"backends": ["tensorrt", "onnxruntime"], "time_budget_s": 60})
    again = _form(signed_in_site, tokens["id"], from_job=job["id"])
    assert "checked" in _control(again, "search.backends").attrs
    assert "hidden" not in again.by_id("job-search").one(data_backend_only="tensorrt").attrs


def test_a_backend_and_precision_registered_by_a_plug_in_are_offered(
        signed_in_site: TestClient, tokens: dict[str, Any]) -> None:
    declared = [str(name) for name in BACKENDS]
    with registered():
        form = _form(signed_in_site, tokens["id"]).by_id("new-job")

    backend = form.one("select", name="backend")
    assert [o.attrs["value"] for o in backend.find_all("option")] == [*declared, "stand-in"]
    precision = form.one("select", name="precision")
    offered = {o.attrs["value"]: o.text.strip() for o in precision.find_all("option")}
    assert list(offered) == ["fp32", "fp16", "bf16", "int8", "fp8", "half"]
    assert offered["half"] == "half (Stand-in only)"
    assert offered["bf16"] == "bf16 (TensorRT, OpenVINO only)"
