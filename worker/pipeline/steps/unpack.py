"""Unpack a model that came with its data files: its stored tar, streamed into the job's
scratch folder (no copy of the archive is kept on the way: a remote store's bytes go straight
from the response into the files).

The API read every member's name and type when the archive was uploaded
(optimizer/model/archive.py); this reads them again, since the object could have changed
since, with tarfile's "data" filter besides: only files and folders, each inside the folder.
"""

import tarfile

from optimizer.errors import InvalidModelError
from worker.pipeline.results import JobRun

__all__ = ["unpack_model"]


def unpack_model(run: JobRun) -> None:
    """Unpack `run.model_archive` into its folder, where `run.model_path` then lies.

    Raises:
        InvalidModelError: the stored archive holds a member other than a file or a folder,
            or one outside its folder, or does not hold the model's .onnx file.
        ArtifactStoreUnavailable: the store did not answer.
    """
    archive = run.model_archive
    if archive is None:
        return
    archive.folder.mkdir(parents=True, exist_ok=True)
    with run.store.open(archive.uri) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            if not (member.isfile() or member.isdir()):
                raise InvalidModelError(
                    f"The stored archive of the model holds {member.name!r}, which is not a "
                    "file or a folder; upload the model again.")
            try:
                tar.extract(member, archive.folder, filter="data")
            except tarfile.FilterError as err:
                raise InvalidModelError(f"The stored archive of the model holds "
                                        f"{member.name!r}, which it may not: {err}; upload "
                                        "the model again.") from err
    if not run.model_path.is_file():
        raise InvalidModelError(f"The stored archive of the model holds no "
                                f"{run.model_path.name!r}; upload the model again.")
