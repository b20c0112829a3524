"""The dashboard's sign-in, as the API sees it: a browser holds its API key in an HttpOnly
session cookie, and every request that may change something carries a CSRF token derived
from that key.

The token is an HMAC of the key under the server secret: a page can only have it if the server
rendered it for this key, and a cross-site form (which sends the cookie, SameSite aside) cannot
read it. The cookie is SameSite=Strict as well; the token is the defence that does not depend on
the browser.
"""

import hashlib
import hmac

__all__ = ["ANONYMOUS", "CSRF_FIELD", "CSRF_HEADER", "SESSION_COOKIE", "csrf_matches", "csrf_token"]

SESSION_COOKIE = "fuseforge_session"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"  # the hidden field of the dashboard's own forms
# With auth off (dev only) there is no key: forms still carry a token, derived from this.
ANONYMOUS = "anonymous"


def csrf_token(secret: bytes, key: str) -> str:
    """The CSRF token of a browser signed in with `key` (ANONYMOUS with auth off)."""
    return hmac.new(secret, b"csrf\0" + key.encode(), hashlib.sha256).hexdigest()


def csrf_matches(secret: bytes, key: str, token: str | None) -> bool:
    return token is not None and hmac.compare_digest(csrf_token(secret, key), token)
