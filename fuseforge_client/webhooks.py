"""Check that a webhook came from your FuseForge deployment, and recently.

FuseForge signs each delivery with the deployment's webhook secret (FUSEFORGE_WEBHOOKS__SECRET):

    FuseForge-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>

A receiver verifies the raw body (before parsing it) and refuses a timestamp outside its
tolerance, so a captured delivery cannot be replayed later:

    from fuseforge_client.webhooks import SignatureError, verify_signature

    try:
        verify_signature(SECRET, request.headers["FuseForge-Signature"], raw_body)
    except SignatureError as err:
        return 400, str(err)
    job = json.loads(raw_body)

Deliveries are retried, so the same event may arrive twice: the FuseForge-Delivery header is
the same on every attempt of one event; skip an id already handled.
"""

import hashlib
import hmac
import time

__all__ = ["DEFAULT_TOLERANCE_S", "SignatureError", "verify_signature"]

DEFAULT_TOLERANCE_S = 300


class SignatureError(ValueError):
    """The delivery's signature header is missing, malformed, wrong, or too old (or new)."""


def verify_signature(secret: str, header: str | None, body: bytes,
                     tolerance_s: float = DEFAULT_TOLERANCE_S, now: float | None = None) -> int:
    """Check `header` (the FuseForge-Signature value) against the raw `body`; return its
    timestamp. `now` defaults to the current time; a timestamp more than `tolerance_s` away
    from it is refused.

    Raises:
        SignatureError: saying what is wrong (missing, malformed, mismatched, stale).
    """
    if not header:
        raise SignatureError("no FuseForge-Signature header: the request was not sent by FuseForge")
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise SignatureError(f"malformed FuseForge-Signature header {header!r}: expected "
                                 "t=<unix seconds>,v1=<hex digest>")
        fields.setdefault(key, []).append(value)
    stamps, digests = fields.get("t", []), fields.get("v1", [])
    if len(stamps) != 1 or not stamps[0].isdigit() or not digests:
        raise SignatureError(f"malformed FuseForge-Signature header {header!r}: expected "
                             "t=<unix seconds>,v1=<hex digest>")
    timestamp = int(stamps[0])
    expected = hmac.new(secret.encode(), stamps[0].encode() + b"." + body,
                        hashlib.sha256).hexdigest()
    # Several v1 values may come while a secret is being rotated: any one matching will do.
    if not any(hmac.compare_digest(expected, digest) for digest in digests):
        raise SignatureError("the signature does not match the body: it was altered, or signed "
                             "with another secret (check FUSEFORGE_WEBHOOKS__SECRET)")
    age = (time.time() if now is None else now) - timestamp
    if abs(age) > tolerance_s:
        raise SignatureError(f"the signature's timestamp is {abs(age):.0f} s "
                             f"{'old' if age > 0 else 'in the future'}, outside the "
                             f"{tolerance_s:g} s tolerance: a replayed or delayed delivery")
    return timestamp
