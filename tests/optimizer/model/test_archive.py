"""Reading a tar of a model and its data files as it arrives: the formats archivers write,
any chunking, the refusals (links, devices, names reaching outside, damage), and a set hash
that does not depend on the archive's order or metadata."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from optimizer.errors import InvalidModelError
from optimizer.model.archive import ArchiveReader, ModelArchive, is_tar_header

LONG = "weights/" + "a" * 120 + "/w.bin"  # past ustar's 100-byte name field


def _read(data: bytes, chunk: int | None = None) -> tuple[ModelArchive, bytes]:
    model = bytearray()
    reader = ArchiveReader("model.tar", lambda _name, piece: model.extend(piece))
    step = chunk or len(data) or 1
    for start in range(0, len(data), step):
        reader.feed(data[start:start + step])
    return reader.finish(), bytes(model)


def _tar(members: list[tuple[str, bytes]], fmt: int = tarfile.PAX_FORMAT,
         **kinds: tarfile.TarInfo) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in kinds.values():
            tar.addfile(info)
    return out.getvalue()


MEMBERS = [("model.onnx", b"\x08\x07model-bytes" * 50), (LONG, bytes(range(256)) * 9),
           ("empty.bin", b"")]


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT],
                         ids=["pax", "gnu"])
@pytest.mark.parametrize("chunk", [None, 1, 511, 513])
def test_every_member_is_listed_with_its_hash_and_the_model_bytes_pass_through(
        fmt: int, chunk: int | None) -> None:
    archive, model = _read(_tar(MEMBERS, fmt), chunk)
    assert archive.model.name == "model.onnx" and model == MEMBERS[0][1]
    assert [(m.name, m.size) for m in archive.data_files] == [(LONG, 2304), ("empty.bin", 0)]


def test_ustar_names_use_the_prefix_field(tmp_path: Path) -> None:
    folder = tmp_path / ("d" * 90) / ("e" * 40)
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(b"x")
    target = tmp_path / "ustar.tar"
    subprocess.run(["tar", "--format=ustar", "-cf", str(target), "-C", str(tmp_path),
                    str((folder / "model.onnx").relative_to(tmp_path))], check=True)
    archive, _ = _read(target.read_bytes())
    assert archive.model.name == f"{'d' * 90}/{'e' * 40}/model.onnx"


def test_the_set_hash_ignores_order_owners_and_times() -> None:
    first, _ = _read(_tar(MEMBERS))
    second, _ = _read(_tar(list(reversed(MEMBERS)), tarfile.GNU_FORMAT))
    changed, _ = _read(_tar([*MEMBERS[:2], ("empty.bin", b"!")]))
    assert first.set_sha256 == second.set_sha256 != changed.set_sha256


def _special(name: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = "/etc/passwd"
    return info


@pytest.mark.parametrize(("kind", "said"), [
    (tarfile.SYMTYPE, "a symlink"), (tarfile.LNKTYPE, "a hard link"),
    (tarfile.FIFOTYPE, "a FIFO"), (tarfile.CHRTYPE, "a character device"),
    (tarfile.BLKTYPE, "a block device"),
])
def test_links_and_devices_are_refused(kind: bytes, said: str) -> None:
    with pytest.raises(InvalidModelError, match=f"'w.bin', which is {said}"):
        _read(_tar(MEMBERS[:1], extra=_special("w.bin", kind)))


@pytest.mark.parametrize(("name", "said"), [
    ("../w.bin", "not a path inside the archive"), ("/etc/w.bin", "not a path inside"),
    ("a/../../w.bin", "not a path inside"), ("C:/w.bin", "not a path inside"),
    ("a\\w.bin", "backslash"), ("w\x1b.bin", "control character"),
])
def test_names_reaching_outside_or_unprintable_are_refused(name: str, said: str) -> None:
    with pytest.raises(InvalidModelError, match=said):
        _read(_tar([MEMBERS[0], (name, b"1234")]))


def test_a_data_file_outside_the_models_folder_is_refused() -> None:
    with pytest.raises(InvalidModelError, match="outside the folder of its model"):
        _read(_tar([("m/model.onnx", b"x"), ("w.bin", b"1234")]))


@pytest.mark.parametrize(("damage", "said"), [
    (lambda data: data[:700], "cut short"),  # inside the model's bytes
    (lambda data: data[:512 + 1024], "cut short"),  # at a member's end, no end blocks
    (lambda data: data[:148] + b"0000000\0" + data[156:], "broken tar header"),
    (lambda data: data + b"garbage", "after its end-of-archive blocks"),
])
def test_a_damaged_archive_is_refused(damage, said: str) -> None:  # type: ignore[no-untyped-def]
    data = _tar([("model.onnx", b"m" * 1000)])
    with pytest.raises(InvalidModelError, match=said):
        _read(damage(data))


def test_two_models_or_none_are_refused() -> None:
    with pytest.raises(InvalidModelError, match="two .onnx files"):
        _read(_tar([MEMBERS[0], ("b.onnx", b"x")]))
    with pytest.raises(InvalidModelError, match="holds no .onnx file"):
        _read(_tar(MEMBERS[1:]))


def test_an_onnx_protobuf_is_not_taken_for_a_tar() -> None:
    protobuf = b"\x08\x07\x12\x07pytorch" + bytes(600)
    assert not is_tar_header(protobuf) and is_tar_header(_tar(MEMBERS[:1]))
