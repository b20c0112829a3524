"""Malformed HTTP gets 400 MalformedRequest, a well-formed upload with unusable contents 422
InvalidUpload; in every case the API's JSON shape and nothing stored (no row, no file)."""

import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.http.json_depth import MAX_JSON_DEPTH
from api.services.uploads.form import MAX_PARTS, MAX_TEXT_FIELD_BYTES
from core.db.models import Dataset, Model
from core.settings import Settings
from optimizer.testing.models import model_bytes, small_cnn

BOUNDARY = "fuseforge-test-boundary"
UPLOAD_ROUTES = ["/v1/models", "/v1/datasets"]


def _part(name: str, data: bytes, filename: bytes | None = None) -> bytes:
    disposition = f'form-data; name="{name}"'.encode()
    if filename is not None:
        disposition += b'; filename="' + filename + b'"'
    return (f"--{BOUNDARY}\r\n".encode() + b"Content-Disposition: " + disposition
            + b"\r\n\r\n" + data + b"\r\n")


def _form(*parts: bytes, closed: bool = True) -> bytes:
    return b"".join(parts) + (f"--{BOUNDARY}--\r\n".encode() if closed else b"")


def _post_form(client: TestClient, body: bytes, route: str = "/v1/models",
               content_type: str = f"multipart/form-data; boundary={BOUNDARY}",
               **headers: str):
    return client.post(route, content=body, headers={"Content-Type": content_type, **headers})


def _assert_nothing_stored(db_session: Session, settings: Settings) -> None:
    for kind in (Model, Dataset):
        assert db_session.scalar(select(func.count()).select_from(kind)) == 0
    assert [p for p in settings.data_dir.rglob("*") if p.is_file()] == []


def _assert_error(response, status: int, error: str, *fragments: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["error"] == error
    for fragment in fragments:
        assert fragment in body["detail"]


MODEL = model_bytes(small_cnn())

MALFORMED_BODIES = {
    "no-boundary": (_form(_part("file", MODEL, b"m.onnx")), "multipart/form-data", "no boundary"),
    "1001-distinct-fields": (
        _form(*[_part(f"field{i}", b"x") for i in range(1001)], _part("file", MODEL, b"m.onnx")),
        None, f"more than {MAX_PARTS} parts"),
    "1001-name-fields": (
        _form(*[_part("name", b"x") for _ in range(1001)], _part("file", MODEL, b"m.onnx")),
        None, f"more than {MAX_PARTS} parts"),
    "huge-name-field": (_form(_part("name", b"n" * 1_000_000), _part("file", MODEL, b"m.onnx")),
                        None, f"longer than {MAX_TEXT_FIELD_BYTES} bytes"),
    "huge-unknown-field": (_form(_part("file", MODEL, b"m.onnx"), _part("x", b"n" * 100_000)),
                           None, f"longer than {MAX_TEXT_FIELD_BYTES} bytes"),
    "huge-part-header": (
        f"--{BOUNDARY}\r\nX-Padding: {'p' * 100_000}\r\n\r\nx\r\n".encode() + _form(),
        None, "header size"),
    "many-part-headers": (
        f"--{BOUNDARY}\r\n".encode() + b"X-A: b\r\n" * 1000 + b"\r\nx\r\n" + _form(), None,
        "multipart body is malformed"),
    "no-closing-boundary": (_form(_part("file", MODEL, b"m.onnx"), closed=False), None,
                            "before its closing boundary"),
    "broken-framing": (f"--{BOUNDARY}\r\nno colon in this header\r\n\r\n".encode() + _form(),
                       None, "multipart body is malformed"),
}


@pytest.mark.parametrize("route", UPLOAD_ROUTES)
@pytest.mark.parametrize("case", list(MALFORMED_BODIES))
def test_malformed_multipart_body_is_400_and_nothing_is_stored(
    client: TestClient, db_session: Session, settings: Settings, route: str, case: str
) -> None:
    body, content_type, fragment = MALFORMED_BODIES[case]
    kwargs = {"content_type": content_type} if content_type else {}
    response = _post_form(client, body, route, **kwargs)
    _assert_error(response, 400, "MalformedRequest", fragment)
    _assert_nothing_stored(db_session, settings)


@pytest.mark.parametrize(("declared", "fragment"), [
    (lambda size: size - 100, "longer than its Content-Length"),
    (lambda size: size + 100, "ended after"),
    (lambda size: "12abc", "not a byte count"),
])
@pytest.mark.parametrize("content_type", [f"multipart/form-data; boundary={BOUNDARY}",
                                          "application/octet-stream"])
def test_a_lying_content_length_is_400_and_nothing_is_stored(
    client: TestClient, db_session: Session, settings: Settings, declared, fragment: str,
    content_type: str,
) -> None:
    body = _form(_part("file", MODEL, b"m.onnx")) if "multipart" in content_type else MODEL
    response = _post_form(client, body, content_type=content_type,
                          **{"Content-Length": str(declared(len(body)))})
    _assert_error(response, 400, "MalformedRequest", fragment)
    _assert_nothing_stored(db_session, settings)


@pytest.mark.parametrize("filename", [b"a\x00b.onnx", b"model\n.onnx", b"\x1b[31mred.onnx"])
def test_a_filename_with_a_control_character_is_422_and_nothing_is_stored(
    client: TestClient, db_session: Session, settings: Settings, filename: bytes
) -> None:
    response = _post_form(client, _form(_part("file", MODEL, filename)))
    _assert_error(response, 422, "InvalidUpload", "the upload's filename", "control character")
    _assert_nothing_stored(db_session, settings)


def test_a_name_field_or_query_with_a_control_character_is_422(
    client: TestClient, db_session: Session, settings: Settings
) -> None:
    form = _post_form(client, _form(_part("name", b"a\x00b"), _part("file", MODEL, b"m.onnx")))
    _assert_error(form, 422, "InvalidUpload", "form field 'name'", "'\\x00'")
    query = client.post("/v1/models?name=a%00b", content=MODEL,
                        headers={"Content-Type": "application/octet-stream"})
    _assert_error(query, 422, "InvalidUpload", "query parameter 'name'")
    _assert_nothing_stored(db_session, settings)


def test_unexpected_text_fields_are_422_naming_them(
    client: TestClient, db_session: Session, settings: Settings
) -> None:
    response = _post_form(client, _form(_part("file", MODEL, b"m.onnx"), _part("nmae", b"x"),
                                        _part("name", b"a"), _part("name", b"b")))
    _assert_error(response, 422, "InvalidUpload", "unexpected form field 'nmae'",
                  "more than one 'name' field")
    _assert_nothing_stored(db_session, settings)


def test_a_well_formed_multipart_upload_still_works(client: TestClient) -> None:
    response = _post_form(client, _form(_part("name", b"cnn"), _part("file", MODEL, b"m.onnx")))
    assert response.status_code == 201, response.text
    assert response.json()["name"] == "cnn"


def test_json_nested_a_little_is_still_a_422_naming_the_field(client: TestClient) -> None:
    response = client.post("/v1/jobs", content=json.dumps({"model_id": [[[]]]}),
                           headers={"Content-Type": "application/json"})
    _assert_error(response, 422, "ValidationError", "model_id")


def test_a_truncated_json_body_is_422_saying_where_it_breaks(client: TestClient) -> None:
    body = '{"model_id": "00000000-0000-0000-0000-000000000000", "precision": "fp16"'
    response = client.post("/v1/jobs", content=body, headers={"Content-Type": "application/json"})
    _assert_error(response, 422, "ValidationError",
                  f"not valid JSON: Expecting ',' delimiter at character {len(body)}")


def test_a_filename_too_long_for_a_part_header_is_422_naming_it(
    client: TestClient, db_session: Session, settings: Settings
) -> None:
    response = _post_form(client, _form(_part("file", MODEL, b"m" * 100_000 + b".onnx")))
    _assert_error(response, 422, "InvalidUpload", "filename is too long", "form field 'name'")
    _assert_nothing_stored(db_session, settings)
    # a filename that fits the header is kept, cut to the name column's 255 characters
    fits = _post_form(client, _form(_part("file", MODEL, b"m" * 3000 + b".onnx")))
    assert fits.status_code == 201, fits.text
    assert fits.json()["name"] == "m" * 255


def test_json_nested_10000_deep_is_422_naming_the_field_where_it_nests_too_deep(
        client: TestClient) -> None:
    body = ('{"model_id": "00000000-0000-0000-0000-000000000000", "input_ranges": {"x": '
            + "[" * 10_000 + "]" * 10_000 + "}}")
    response = client.post("/v1/jobs", content=body,
                           headers={"Content-Type": "application/json"})
    _assert_error(response, 422, "ValidationError", "input_ranges.x.0.0",
                  f"nested more than {MAX_JSON_DEPTH} levels deep")
