"""`dlc-airflow render SPEC --backend B` prints YAML the API server accepts.

The installed console script renders every example spec (examples/specs, one per job type) on
every backend that runs it; each printed document is sent to the real API server with
server-side dry-run. The renders run as concurrent subprocesses.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from dlc_airflow.k8s.errors import KubeError
from tests.unit.test_cli import EXAMPLES, cli, supported_backends

PAIRS = [(path, backend) for path in EXAMPLES for backend in supported_backends(path)]


@pytest.fixture(scope="module")
def rendered():
    """stdout of `dlc-airflow render` for every (example, backend)."""
    def run(pair):
        path, backend = pair
        proc = cli("render", str(path), "--backend", backend)
        assert proc.returncode == 0 and proc.stderr == "", f"{path.name} on {backend}: {proc.stderr}"
        return pair, proc.stdout

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(run, PAIRS))


@pytest.mark.parametrize("path, backend", PAIRS, ids=[f"{p.stem}-on-{b}" for p, b in PAIRS])
def test_rendered_yaml_is_accepted_by_the_api_server(path, backend, rendered, admin, namespace):
    docs = list(yaml.safe_load_all(rendered[(path, backend)]))
    assert docs, "nothing printed"
    rejected = []
    for doc in docs:
        try:
            admin.create(doc, namespace, dry_run=True)
        except KubeError as exc:
            rejected.append(f"{doc['kind']} {doc['metadata']['name']}: {exc}")
    assert rejected == [], "\n".join(rejected)
