"""`S3ObjectWriter`: an object streamed into S3 as its bytes arrive, in bounded memory.

Bytes are sent as multipart parts of `part_bytes`, at most `parts_in_flight` at a time on
threads of the writer's own, so the caller's event loop never waits on the network: it waits
for `room()` instead, which is how a slow store slows the upload down (backpressure) rather
than the API buffering it. Memory is at most (parts_in_flight + 2) parts (the last one sent is
kept for `keep_fresh`). An object that ends within one part is sent with one PUT at commit,
never as a multipart upload. S3 shows the
object only once `CompleteMultipartUpload` succeeds: no reader ever sees part of it, and an
aborted or crashed write leaves only parts, which `abort` (or the janitor, through
`S3ArtifactStore.remove_abandoned_writes`) removes.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import suppress
from typing import Any

from core.artifact_refs import URI_PREFIX

__all__ = ["S3ObjectWriter"]

PART_BYTES = 8 * 1024 * 1024  # S3's parts are 5 MiB at least, but for the last
PARTS_IN_FLIGHT = 3

# The store's call: (what it does, the key, the boto3 method, its arguments) -> the answer,
# its errors turned into ArtifactStoreUnavailable naming the store.
StoreCall = Callable[..., Any]


class S3ObjectWriter:
    def __init__(self, *, call: StoreCall, client: Any, bucket: str, object_key: str, key: str,
                 describe: str, part_bytes: int = PART_BYTES,
                 parts_in_flight: int = PARTS_IN_FLIGHT) -> None:
        self.key = key
        self.describe = describe
        self._call = call
        self._client = client
        self._bucket = bucket
        self._object_key = object_key
        self._part_bytes = part_bytes
        self._parts_in_flight = parts_in_flight
        self._buffer = bytearray()
        self._pool: ThreadPoolExecutor | None = None
        self._created: Future[str] | None = None  # the multipart upload's id, once begun
        self._parts: list[Future[dict[str, Any]]] = []
        self._last_sent = b""  # sent again by keep_fresh, where no short part is left to send
        self._finished = False  # keep_fresh was called: no more bytes
        self._in_flight: deque[Future[dict[str, Any]]] = deque()
        self._state = "open"  # then "committed" or "aborted"
        self._lock = threading.Lock()  # abort may come from another thread than the writes

    def write(self, data: bytes) -> None:
        self._require_open()
        if self._finished:
            raise ValueError(f"the write of {self.key!r} was marked complete by keep_fresh")
        self._buffer += data
        while len(self._buffer) >= self._part_bytes:
            while len(self._pending()) >= self._parts_in_flight:
                wait([self._in_flight[0]])  # only a caller that did not wait for room()
            part = bytes(self._buffer[:self._part_bytes])
            del self._buffer[:self._part_bytes]
            self._send(part)

    def room(self) -> Future[None] | None:
        pending = self._pending()
        if len(pending) < self._parts_in_flight:
            return None
        oldest = pending[0]
        ready: Future[None] = Future()

        def settle(done: Future[dict[str, Any]]) -> None:
            error = done.exception()
            if error is not None:
                ready.set_exception(error)
            else:
                ready.set_result(None)

        oldest.add_done_callback(settle)
        return ready

    def keep_fresh(self) -> None:
        """Send a part now, so the upload's latest part is recent (the janitor goes by it):
        the short last part if one is waiting, else the last part again under its number
        (S3 keeps the latest); returns once it is stored. Nothing before the first part: no
        multipart upload exists."""
        self._require_open()
        self._finished = True
        if self._created is None or self._pool is None:
            return
        if self._buffer:
            self._send(bytes(self._buffer))
            self._buffer = bytearray()
        else:
            wait([self._parts[-1]])  # two sends of one part number must not race
            self._parts[-1] = self._pool.submit(self._upload_part, len(self._parts),
                                                self._last_sent, self._created)
        self._parts[-1].result()  # stored when this returns; its error is the store's

    def commit(self) -> str:
        self._require_open()
        try:
            if self._created is None:  # within one part: one PUT, no multipart upload
                self._call("store", self.key, self._client.put_object, Bucket=self._bucket,
                           Key=self._object_key, Body=bytes(self._buffer))
            else:
                if self._buffer:
                    self._send(bytes(self._buffer))  # the last part may be short
                self._buffer = bytearray()
                parts = [part.result() for part in self._parts]
                self._call("store", self.key, self._client.complete_multipart_upload,
                           Bucket=self._bucket, Key=self._object_key,
                           UploadId=self._created.result(), MultipartUpload={"Parts": parts})
        except BaseException:
            self.abort()
            raise
        with self._lock:
            self._state = "committed"
        self._close_pool()
        return URI_PREFIX + self.key

    def abort(self) -> None:
        with self._lock:
            if self._state != "open":
                return
            self._state = "aborted"
        self._buffer = bytearray()
        for part in self._parts:
            part.cancel()  # those not yet started; the running ones end on their own
        if self._created is not None and self._pool is not None:
            # After the parts still being sent: S3 may keep a part that lands after the abort.
            self._pool.submit(self._abort_upload, list(self._parts), self._created)
        self._close_pool()

    def _require_open(self) -> None:
        if self._state != "open":
            raise ValueError(f"the write of {self.key!r} is over: it was {self._state}")

    def _pending(self) -> deque[Future[dict[str, Any]]]:
        """The parts still being sent; a part that failed raises its error here."""
        while self._in_flight and self._in_flight[0].done():
            self._in_flight.popleft().result()
        return self._in_flight

    def _send(self, data: bytes) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._parts_in_flight,
                                            thread_name_prefix="s3-part")
        if self._created is None:
            self._created = self._pool.submit(self._create_upload)
        part = self._pool.submit(self._upload_part, len(self._parts) + 1, data, self._created)
        self._last_sent = data
        self._parts.append(part)
        self._in_flight.append(part)

    def _create_upload(self) -> str:
        answer = self._call("store", self.key, self._client.create_multipart_upload,
                            Bucket=self._bucket, Key=self._object_key)
        return str(answer["UploadId"])

    def _upload_part(self, number: int, data: bytes, created: Future[str]) -> dict[str, Any]:
        answer = self._call("store", self.key, self._client.upload_part, Bucket=self._bucket,
                            Key=self._object_key, UploadId=created.result(), PartNumber=number,
                            Body=data)
        return {"PartNumber": number, "ETag": answer["ETag"]}

    def _abort_upload(self, parts: list[Future[dict[str, Any]]], created: Future[str]) -> None:
        wait(parts)
        with suppress(Exception):  # the store down: the janitor aborts it later
            self._call("abort the upload of", self.key, self._client.abort_multipart_upload,
                       Bucket=self._bucket, Key=self._object_key, UploadId=created.result())

    def _close_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)  # queued work (an abort) still runs
