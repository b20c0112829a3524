"""A model and its external data files sent as one tar, made as it is sent.

A model over 2 GB is an .onnx file plus data files its tensors name by path relative to it;
the server takes the set as one uncompressed tar (the weights do not compress). `ArchiveBody`
is that tar as a file object httpx can stream and size (Content-Length) without it ever
existing on disk or in memory: a header, the file's bytes in chunks, its padding, in turn.
Headers are pax with no owner and time 0, so the same files give the same bytes.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["ArchiveBody", "archive_chunks"]

_BLOCK = 512
_CHUNK = 1024 * 1024


def archive_chunks(folder: Path, names: Sequence[str]) -> Iterator[bytes]:
    """The tar of the files `names` (paths relative to `folder`, "/" between folders)."""
    for name in names:
        path = folder.joinpath(*name.split("/"))
        size = path.stat().st_size
        yield _header(name, size)
        left = size
        with path.open("rb") as handle:
            while left and (chunk := handle.read(min(_CHUNK, left))):
                left -= len(chunk)
                yield chunk
        if left:
            raise OSError(f"{path} shrank while it was being sent")
        yield bytes(-size % _BLOCK)
    yield bytes(2 * _BLOCK)  # the end-of-archive blocks


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    return info.tobuf(format=tarfile.PAX_FORMAT)


class ArchiveBody:
    """`archive_chunks(folder, names)` read as a file: `read`, `tell`, and seeks (to the end,
    which httpx does to size the body; back to the start before each try; to where a
    resumable upload resumes, by reading up to it again)."""

    def __init__(self, folder: Path, names: Sequence[str]) -> None:
        self._folder = folder
        self._names = tuple(names)
        self.total = 2 * _BLOCK + sum(
            len(_header(name, size)) + size + -size % _BLOCK
            for name, size in ((n, os.stat(folder.joinpath(*n.split("/"))).st_size)
                               for n in self._names))
        self._restart()

    def _restart(self) -> None:
        self._chunks = archive_chunks(self._folder, self._names)
        self._pending = memoryview(b"")  # what is left of the chunk last made
        self._position = 0

    def read(self, size: int = -1) -> bytes:
        wanted = self.total - self._position if size < 0 else size
        out = bytearray()
        while len(out) < wanted:
            if not self._pending:
                chunk = next(self._chunks, None)
                if chunk is None:
                    break
                self._pending = memoryview(chunk)
            taken = self._pending[:wanted - len(out)]
            out += taken
            self._pending = self._pending[len(taken):]
        self._position += len(out)
        return bytes(out)

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_END and offset == 0:
            self._position = self.total  # sizing only: the next seek goes back
            return self.total
        if whence == os.SEEK_SET and offset == 0:
            self._restart()
            return 0
        if whence != os.SEEK_SET or not 0 <= offset <= self.total:
            raise OSError(f"an archive being sent cannot seek to {offset} (whence {whence})")
        if offset < self._position:
            self._restart()
        while self._position < offset:  # made again up to there: nothing of it is kept
            self.read(min(_CHUNK, offset - self._position))
        return offset
