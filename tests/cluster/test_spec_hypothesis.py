"""Property tests of the job spec against the real API server.

- Valid specs (every type, roles, per-role overrides, resources, storage, code, scheduling,
  fault tolerance, limits, labels, framework options; job names derived from arbitrary Airflow
  ids): the validator accepts each, and the API server accepts what every backend that runs it
  renders, with server-side dry-run and strict field validation, as the restricted identity.
- Loose specs (arbitrary text in the free-form fields): whatever the validator accepts, the API
  server accepts too: the validator refuses at parse time what the cluster would refuse later.
- Invalid specs (one mistake in an otherwise valid spec): `parse_job` raises SpecError with a
  one-line message naming the field.

Examples: DLC_HYPOTHESIS_EXAMPLES valid specs and as many loose ones (default 40 each), and for each of the 31 kinds of
mistake a fifth of that (default 8: 248 invalid specs; pure, no cluster). CI runs the
defaults; raise it locally for a deeper search.
"""

from __future__ import annotations

import copy
import os

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from dlc_airflow.errors import BackendError
from dlc_airflow.k8s.backends import BACKENDS, get_backend
from dlc_airflow.k8s.errors import KubeError
from dlc_airflow.spec import SpecError, parse_job
from tests.cluster.spec_strategies import MISTAKES, task_names, valid_specs
from tests.cluster.specs import IDENTITY, dry_run_strict
from tests.support.cluster import create_test_namespace, delete_namespace

EXAMPLES = int(os.environ.get("DLC_HYPOTHESIS_EXAMPLES", "40"))
SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
           HealthCheck.filter_too_much]


@pytest.fixture(scope="module")
def restricted(cluster, admin):
    """One namespace for every example (dry-run creates nothing)."""
    from dlc_airflow.k8s.errors import Forbidden
    from dlc_airflow.k8s.kinds import JOBSET
    from tests.cluster.polling import wait_for

    ns = create_test_namespace(admin, prefix="hyp")
    client = cluster.restricted(ns)

    def rbac_in_effect():
        try:
            return client.list(JOBSET) is not None
        except Forbidden:
            return False

    wait_for(rbac_in_effect, timeout=15, interval=0.1, what="the RoleBinding in effect")
    yield client
    delete_namespace(admin, ns)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=SLOW_OK, print_blob=True)
@given(spec=valid_specs(), name=task_names())
def test_valid_specs_are_accepted_by_the_api_server(restricted, spec, name):
    job = parse_job(spec)  # SpecError here: the spec refuses something valid
    assert_accepted(restricted, job, name)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=SLOW_OK, print_blob=True)
@given(spec=valid_specs(loose=True), name=task_names())
def test_what_the_validator_accepts_the_api_server_accepts(restricted, spec, name):
    try:
        job = parse_job(spec)
    except SpecError:
        event("refused by the validator")
        assume(False)
    event("accepted by the validator")
    assert_accepted(restricted, job, name)


def assert_accepted(restricted, job, name) -> None:
    """Every backend that runs the job renders objects the API server accepts (dry-run)."""
    rejected = []
    for backend_name in BACKENDS:
        backend = get_backend(backend_name)
        try:
            backend.check(job)
        except BackendError as exc:
            assert "\n" not in str(exc) and backend_name in str(exc)
            event(f"{backend_name}: refused by check")
            continue
        try:
            objects = backend.render(job, name, IDENTITY, 1)
        except BackendError as exc:
            # the only refusal at render: JobSet pod names over 63 characters
            assert backend_name == "jobset" and "63" in str(exc) and "\n" not in str(exc), str(exc)
            event("jobset: names too long")
            continue
        for obj in objects:
            try:
                dry_run_strict(restricted, obj)
            except KubeError as exc:
                rejected.append(f"{backend_name} {obj['kind']}: {exc}")
        event(f"{backend_name}: dry-run")
    assert rejected == [], "\n".join(rejected)


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.__name__ for m in MISTAKES])
@settings(max_examples=max(3, EXAMPLES // 5), deadline=None, suppress_health_check=SLOW_OK, print_blob=True)
@given(spec=valid_specs(), data=st.data())
def test_invalid_specs_are_refused_naming_the_field(mistake, spec, data):
    parse_job(spec)  # valid before the mistake
    broken, words = mistake(copy.deepcopy(spec), data.draw)
    with pytest.raises(SpecError) as err:
        parse_job(broken)
    message = str(err.value)
    assert "\n" not in message and message.startswith("invalid job spec: ")
    missing = [w for w in words if w not in message]
    assert not missing, f"{mistake.__name__}: message does not name {missing}: {message}"
