"""The tar the client makes of a model and its data files as it sends them: what tar reads
back, sized up front for Content-Length, restartable for a retry, any read size."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from fuseforge_client.model_archive import ArchiveBody, archive_chunks


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "weights").mkdir()
    (tmp_path / "model.onnx").write_bytes(b"m" * 700)
    (tmp_path / "weights" / "w.bin").write_bytes(os.urandom(1024 * 1024 + 5))  # two chunks
    return tmp_path


NAMES = ["model.onnx", "weights/w.bin"]


def test_tar_reads_back_the_files_and_the_size_is_known_before_a_byte_is_read(
        folder: Path) -> None:
    body = ArchiveBody(folder, NAMES)
    data = body.read()
    assert len(data) == body.total
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.getnames() == NAMES
        extracted = tar.extractfile("weights/w.bin")
        assert extracted is not None
        assert extracted.read() == (folder / "weights" / "w.bin").read_bytes()


@pytest.mark.parametrize("size", [1, 511, 65536, 10**7])
def test_any_read_size_gives_the_same_bytes(folder: Path, size: int) -> None:
    body = ArchiveBody(folder, NAMES)
    pieces = iter(lambda: body.read(size), b"")
    assert b"".join(pieces) == b"".join(archive_chunks(folder, NAMES))


def test_httpx_sizing_seeks_then_a_retry_starts_again(folder: Path) -> None:
    body = ArchiveBody(folder, NAMES)
    first = body.read(1000)
    assert body.tell() == 1000
    assert body.seek(0, os.SEEK_END) == body.total  # how httpx sizes a body it cannot fstat
    assert body.seek(0) == 0
    assert body.read(1000) == first


def test_a_resumed_upload_seeks_anywhere_back_or_forth(folder: Path) -> None:
    whole = b"".join(archive_chunks(folder, NAMES))
    body = ArchiveBody(folder, NAMES)
    body.read(5000)
    for offset in (700_000, 10, len(whole) - 3):
        assert body.seek(offset) == offset
        assert body.read(100) == whole[offset:offset + 100]
    with pytest.raises(OSError, match="cannot seek"):
        body.seek(len(whole) + 1)
