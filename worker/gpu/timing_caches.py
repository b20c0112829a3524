"""TensorRT timing caches kept in the artifact store, one per (GPU model, compute capability,
TensorRT version): loaded before a build, stored back after it, so the next build of a similar
model skips the kernel timings it already has.

A cache is a plain object under `timing-caches/<TimingCacheKey.file_name>`; a store write is
atomic, so two workers saving at once leave one complete cache (the later one), never a torn one.
"""

import logging
import tempfile
from pathlib import Path

from core.storage import ArtifactStore
from optimizer.backends.tensorrt import TimingCacheKey

__all__ = ["load_stored_cache", "save_cache", "timing_cache_store_key"]

logger = logging.getLogger(__name__)


def timing_cache_store_key(key: TimingCacheKey) -> str:
    return f"timing-caches/{key.file_name}"


def load_stored_cache(store: ArtifactStore, key: TimingCacheKey) -> bytes | None:
    """The stored cache for `key`, or None (none yet, or unreadable: the build starts cold)."""
    uri = store.uri_for(timing_cache_store_key(key))
    if not store.exists(uri):
        return None
    try:
        with store.open(uri) as handle:
            return handle.read() or None
    except OSError:
        logger.exception("timing cache %s could not be read; the build starts cold", uri)
        return None


def save_cache(store: ArtifactStore, key: TimingCacheKey, data: bytes) -> str | None:
    """Store `data` as the cache for `key`; its URI, or None when there was nothing to store."""
    if not data:
        return None
    with tempfile.TemporaryDirectory(prefix="fuseforge-timing-cache-") as folder:
        path = Path(folder) / key.file_name
        path.write_bytes(data)
        return store.put_file(path, timing_cache_store_key(key)).uri
