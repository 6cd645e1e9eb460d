"""`python -m dlc_airflow.runtime`: where this process stands in its job, as the runtime
helpers see it, as one JSON line (a first look inside a job's container; the images' smoke
test). Exit 1 with the helpers' one-line error when the job's env is inconsistent."""

from __future__ import annotations

import json
import sys
from importlib.metadata import PackageNotFoundError, version

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.runtime import env


def describe() -> JSONObject:
    """What the helpers answer here (outside a job: rank 0 of 1, the coordinator)."""
    index, count = env.shard()
    where: JSONObject = {"in_job": env.in_job(), "rank": env.rank(), "world_size": env.world_size(),
                         "coordinator": env.is_coordinator(), "shard": [index, count]}
    if env.in_job():
        where.update(job=env.job_name(), type=env.job_type(), role=env.role(), role_index=env.role_index())
    return where


def main() -> int:
    try:
        package = version("dlc-airflow")
    except PackageNotFoundError:  # a source checkout on sys.path
        package = "unknown"
    try:
        where = describe()
    except env.RuntimeEnvError as exc:
        print(f"dlc-airflow runtime: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"dlc_airflow": package, **where}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
