"""What a worker process runs jobs with: settings, database sessions, the artifact store, the
TensorRT toolkit, this host's capabilities and memory bandwidth, gathered once and handed to
every job run.

`current_runtime()` builds it from the settings on first use (in the worker's main process, so
pool processes forked later inherit the capabilities it detected). In-process worker tests hand
in their own with `use_runtime(...)` instead of patching globals.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

from sqlalchemy.orm import Session, sessionmaker

from core.db.session import make_engine
from core.settings import Settings, get_settings
from core.storage import ArtifactStore, artifact_store
from optimizer.backends.tensorrt.toolkit import TensorRTToolkit, load_toolkit
from optimizer.capabilities import HostCapabilities
from optimizer.errors import InternalError
from optimizer.measure.memory_bandwidth import memory_bandwidth_gb_s

__all__ = ["WorkerRuntime", "current_runtime", "use_runtime"]


@dataclass(frozen=True)
class WorkerRuntime:
    settings: Settings
    sessions: sessionmaker[Session]
    store: ArtifactStore
    toolkit: TensorRTToolkit  # TensorRT itself unless FUSEFORGE_TENSORRT_TOOLKIT names a stand-in
    capabilities: HostCapabilities  # detected once by the toolkit: GPU, TensorRT version
    # Host memory's copy bandwidth, measured once at start-up (optimizer/measure/memory_bandwidth.py):
    # what benchmark records' achieved GB/s are a fraction of. None: not measured (a job then
    # measures it in its own process).
    memory_bandwidth_gb_s: float | None = None

    @classmethod
    def from_settings(cls, settings: Settings, capabilities: HostCapabilities | None = None,
                      bandwidth_gb_s: float | None = None) -> "WorkerRuntime":
        """Everything `settings` configure; `capabilities` are detected and the memory bandwidth
        measured unless given (a job's process is handed its worker's)."""
        try:
            toolkit = load_toolkit(settings.tensorrt_toolkit)
        except InternalError as err:
            raise InternalError(f"FUSEFORGE_TENSORRT_TOOLKIT: {err}") from err
        engine = make_engine(settings.resolved_database_url)
        return cls(
            settings=settings,
            sessions=sessionmaker(bind=engine, expire_on_commit=False),
            store=artifact_store(settings),
            toolkit=toolkit,
            capabilities=capabilities or toolkit.detect_capabilities(),
            memory_bandwidth_gb_s=(bandwidth_gb_s if capabilities is not None
                                   else memory_bandwidth_gb_s()),
        )


_handed_in: list[WorkerRuntime] = []


@lru_cache(maxsize=1)
def _from_settings() -> WorkerRuntime:
    return WorkerRuntime.from_settings(get_settings())


def current_runtime() -> WorkerRuntime:
    """The runtime a test handed in with `use_runtime`, else the one the settings configure."""
    return _handed_in[-1] if _handed_in else _from_settings()


@contextmanager
def use_runtime(runtime: WorkerRuntime) -> Iterator[WorkerRuntime]:
    """Run jobs in this process with `runtime` until the block ends (in-process worker tests)."""
    _handed_in.append(runtime)
    try:
        yield runtime
    finally:
        _handed_in.remove(runtime)
