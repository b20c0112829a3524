"""The FuseForge Python client's parts that stand alone (standard library only), so a webhook
receiver can install and import them without the service."""

from fuseforge_client.webhooks import SignatureError, verify_signature

__all__ = ["SignatureError", "verify_signature"]
