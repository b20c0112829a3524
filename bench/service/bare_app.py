"""The yardstick: a bare FastAPI app with one sync route (FastAPI runs it in its threadpool, as
it runs FuseForge's routes), served by `serve.py` exactly as `fuseforge serve` serves the API."""

from fastapi import FastAPI

app = FastAPI()


@app.get("/v1/jobs/{job_id}")
def read_job(job_id: str) -> dict[str, str]:
    return {"id": job_id, "status": "succeeded"}


if __name__ == "__main__":
    import sys

    import uvicorn

    # As `fuseforge serve` runs the API: one process, uvicorn's defaults, info logging.
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="info")
