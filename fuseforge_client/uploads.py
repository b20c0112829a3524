"""A file object that reports how much of it has been read, so an upload streamed from disk
(httpx reads the file in chunks as it sends) can show its progress without holding the file in
memory."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import BinaryIO

from fuseforge_client.model_archive import ArchiveBody

__all__ = ["ProgressReader", "UploadProgress"]

UploadProgress = Callable[[int, int], None]  # (bytes sent, total bytes)


class ProgressReader:
    """Wraps a binary file open for reading; each read calls `on_progress(read, total)`. A seek
    to the start (httpx does one before each try of a request) starts the count again."""

    def __init__(self, file: BinaryIO | ArchiveBody, on_progress: UploadProgress | None
                 ) -> None:
        self._file = file
        self._on_progress = on_progress
        # An archive made as it is sent (model_archive.py) knows its size; a file, its own.
        self.total = (file.total if isinstance(file, ArchiveBody)
                      else os.fstat(file.fileno()).st_size)
        self.sent = 0

    def read(self, size: int = -1) -> bytes:
        chunk = self._file.read(size)
        if chunk:
            self.sent += len(chunk)
            if self._on_progress is not None:
                self._on_progress(self.sent, self.total)
        return chunk

    def fileno(self) -> int:  # httpx sizes the body (Content-Length) from it
        if isinstance(self._file, ArchiveBody):  # httpx then sizes it by seeking to its end
            raise OSError("an archive made as it is sent has no file descriptor")
        return self._file.fileno()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        position = self._file.seek(offset, whence)
        self.sent = position
        return position

    def tell(self) -> int:
        return self._file.tell()
