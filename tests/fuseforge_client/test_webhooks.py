"""The receiver's check: a FuseForge signature over the body, within the replay window."""

import pytest

from core.callbacks.signing import signature_header
from fuseforge_client.webhooks import SignatureError, verify_signature

SECRET = "s3cr3t-" + "x" * 40
BODY = b'{"id": "8c1a", "status": "succeeded"}'
NOW = 1_764_000_000


def test_a_signature_the_service_made_verifies_and_gives_its_timestamp() -> None:
    header = signature_header(SECRET, BODY, NOW)
    assert verify_signature(SECRET, header, BODY, now=NOW + 10) == NOW


def test_a_tampered_body_is_rejected() -> None:
    header = signature_header(SECRET, BODY, NOW)
    with pytest.raises(SignatureError, match="does not match the body"):
        verify_signature(SECRET, header, BODY.replace(b"succeeded", b"failed"), now=NOW)


def test_another_secret_is_rejected() -> None:
    header = signature_header("another-secret", BODY, NOW)
    with pytest.raises(SignatureError, match="does not match"):
        verify_signature(SECRET, header, BODY, now=NOW)


def test_an_old_timestamp_is_rejected_as_a_replay() -> None:
    header = signature_header(SECRET, BODY, NOW)
    with pytest.raises(SignatureError, match="301 s old, outside the 300 s tolerance"):
        verify_signature(SECRET, header, BODY, now=NOW + 301)


def test_a_timestamp_from_the_future_is_rejected() -> None:
    header = signature_header(SECRET, BODY, NOW + 3600)
    with pytest.raises(SignatureError, match="in the future"):
        verify_signature(SECRET, header, BODY, now=NOW)


def test_a_rewritten_timestamp_breaks_the_signature() -> None:
    digest = signature_header(SECRET, BODY, NOW).split(",v1=")[1]
    with pytest.raises(SignatureError, match="does not match"):
        verify_signature(SECRET, f"t={NOW + 500},v1={digest}", BODY, now=NOW + 500)


@pytest.mark.parametrize("header", [None, "", "garbage", "t=abc,v1=00", "v1=00", "t=1"])
def test_a_missing_or_malformed_header_is_rejected(header: str | None) -> None:
    with pytest.raises(SignatureError, match="FuseForge-Signature"):
        verify_signature(SECRET, header, BODY, now=NOW)


def test_one_matching_signature_among_several_is_enough_while_rotating_secrets() -> None:
    old = signature_header("old-secret", BODY, NOW).split(",v1=")[1]
    new = signature_header(SECRET, BODY, NOW).split(",v1=")[1]
    assert verify_signature(SECRET, f"t={NOW},v1={old},v1={new}", BODY, now=NOW) == NOW
