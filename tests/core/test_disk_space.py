"""A full disk told apart from other I/O errors, however deep it was wrapped, and said with
the free space of the folder's filesystem."""

import errno
from pathlib import Path

from core.disk_space import free_space_text, no_room_error


def test_a_no_room_error_is_found_through_the_errors_that_wrapped_it() -> None:
    full = OSError(errno.ENOSPC, "No space left on device")
    try:
        try:
            raise full
        except OSError as err:
            raise RuntimeError("could not save the model") from err
    except RuntimeError as wrapped:
        assert no_room_error(wrapped) is full
    assert no_room_error(OSError(errno.EACCES, "Permission denied")) is None
    assert no_room_error(ValueError("not I/O")) is None


def test_free_space_reads_the_nearest_existing_folder(tmp_path: Path) -> None:
    text = free_space_text(tmp_path / "not" / "made" / "yet")
    assert " free of " in text and text.split()[1] in ("bytes", "KiB", "MiB", "GiB")
