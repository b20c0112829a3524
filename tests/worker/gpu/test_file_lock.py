"""one_at_a_time: a second holder of a GPU's lock waits, and is told why."""

import threading
from pathlib import Path

from worker.gpu.file_lock import one_at_a_time


def test_one_at_a_time_makes_a_second_holder_wait_and_says_so(tmp_path: Path) -> None:
    lock = tmp_path / "locks" / "gpu-0.lock"
    entered = threading.Event()
    waits: list[str] = []

    def second() -> None:
        with one_at_a_time(lock, on_wait=lambda: waits.append("second")):
            entered.set()

    with one_at_a_time(lock, on_wait=lambda: waits.append("first")):
        thread = threading.Thread(target=second)
        thread.start()
        assert not entered.wait(0.5)
        assert waits == ["second"]
    assert entered.wait(5)
    thread.join()
