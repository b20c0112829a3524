"""What a callback URL must look like before anything resolves it: http(s), a host, no
credentials, a sane length. Pure string checks, so the job config can run them."""

from urllib.parse import urlsplit

__all__ = ["MAX_CALLBACK_URL_LENGTH", "callback_url_problem"]

MAX_CALLBACK_URL_LENGTH = 2048


def callback_url_problem(url: str) -> str | None:
    """Why `url` cannot be a callback URL (a sentence saying what would work), or None.

    >>> callback_url_problem("ftp://example.com/hook")
    "the scheme must be http or https, not 'ftp'"
    """
    if len(url) > MAX_CALLBACK_URL_LENGTH:
        return f"is {len(url)} characters long; at most {MAX_CALLBACK_URL_LENGTH} are accepted"
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        return "contains whitespace or control characters; percent-encode them"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return f"the scheme must be http or https, not {parts.scheme or 'none'!r}"
    if parts.username is not None or parts.password is not None:
        # Credentials in a URL end up in logs and in the job's JSON: the signature
        # authenticates FuseForge to the receiver instead.
        return ("must not carry credentials (user:password@); verify the FuseForge-Signature "
                "header in the receiver instead")
    if not parts.hostname:
        return "has no host; give a full URL such as https://hooks.example.com/fuseforge"
    try:
        parts.port  # noqa: B018 - raises on a port out of range or not a number
    except ValueError as err:
        return f"has an invalid port ({err})"
    if parts.fragment:
        return "must not have a #fragment (it is never sent to the receiver)"
    return None
