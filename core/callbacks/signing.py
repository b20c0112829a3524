"""The FuseForge-Signature header: HMAC-SHA256 over "<unix time>.<body>".

    FuseForge-Signature: t=1733091552,v1=5f2b...e0

Signing the time with the body lets a receiver refuse a replayed delivery whose time lies
outside its window; fuseforge_client.webhooks.verify_signature checks both.
"""

import hashlib
import hmac

__all__ = ["SIGNATURE_HEADER", "signature_header"]

SIGNATURE_HEADER = "FuseForge-Signature"


def signature_header(secret: str, body: bytes, timestamp: int) -> str:
    """The header's value for `body` sent at `timestamp` (Unix seconds)."""
    message = str(timestamp).encode() + b"." + body
    digest = hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"
