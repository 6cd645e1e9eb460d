"""Property tests for job names and labels (hypothesis): any Airflow ids give valid names."""

from __future__ import annotations

import re

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dlc_airflow import naming
from dlc_airflow.spec import MAX_ROLE_NAME

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"\A(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")  # (\Z: "$" would let a final newline in)

# Airflow ids are usually tame, but run ids carry timestamps and users type anything.
ids = st.one_of(
    st.text(min_size=1, max_size=300),
    st.from_regex(r"[A-Za-z0-9_.\-]{1,250}", fullmatch=True),
    st.sampled_from(["scheduled__2026-12-01T00:00:00+00:00", "manual__2026-12-01T10:11:12.123456+00:00",
                     "backfill__2026-01-01T00:00:00+00:00", "训练", "a" * 250, "-", "_", "."]),
)
bases = st.one_of(st.text(max_size=120), st.from_regex(r"[a-z][a-z0-9-]{0,80}", fullmatch=True))
identities = st.builds(
    naming.TaskIdentity,
    dag_id=ids,
    task_id=ids,
    run_id=ids,
    map_index=st.integers(min_value=-1, max_value=100_000),
    try_number=st.integers(min_value=1, max_value=50),
)
attempts = st.integers(min_value=1, max_value=999)
roles = st.from_regex(rf"[a-z]([-a-z0-9]{{0,{MAX_ROLE_NAME - 2}}}[a-z0-9])?", fullmatch=True)


@settings(max_examples=300)
@given(base=bases, identity=identities, attempt=attempts)
def test_job_name_is_a_short_dns_label_and_deterministic(base, identity, attempt):
    name = naming.job_name(base, identity, attempt)
    assert DNS_1035.match(name), name
    assert len(name) <= naming.MAX_BASE_NAME
    assert name == naming.job_name(base, identity, attempt)
    assert naming.parse_attempt(name) == attempt


@given(base=bases, a=identities, b=identities, attempt=attempts)
def test_job_name_differs_across_task_instances(base, a, b, attempt):
    assume((a.dag_id, a.task_id, a.run_id, a.map_index) != (b.dag_id, b.task_id, b.run_id, b.map_index))
    assert naming.job_name(base, a, attempt) != naming.job_name(base, b, attempt)


@given(base=bases, identity=identities, a=attempts, b=attempts)
def test_job_name_differs_across_attempts(base, identity, a, b):
    assume(a != b)
    assert naming.job_name(base, identity, a) != naming.job_name(base, identity, b)


@given(base=bases, identity=identities, attempt=attempts, other_try=st.integers(min_value=1, max_value=50))
def test_a_retry_finds_the_same_job(base, identity, attempt, other_try):
    retried = naming.TaskIdentity(identity.dag_id, identity.task_id, identity.run_id, identity.map_index, other_try)
    assert naming.job_name(base, retried, attempt) == naming.job_name(base, identity, attempt)


@settings(max_examples=300)
@given(base=bases, identity=identities, attempt=attempts, role=roles, index=st.integers(min_value=0, max_value=99_999))
def test_every_derived_name_fits(base, identity, attempt, role, index):
    name = naming.job_name(base, identity, attempt)
    derived = [
        naming.child_name(name, role),  # native role Job
        naming.child_name(name, role, index),  # native pod hostname (<job>-<index>)
        f"{name}-{role}-0-{index}",  # JobSet pod hostname
        naming.child_name(name, role, 0),  # JobSet child Job
        name,  # headless Service / JobSet subdomain
        naming.child_name(name, "hostfile"),  # MPI hostfile ConfigMap
        f"{name}-{role}-{index}",  # Kubeflow per-pod Service
    ]
    for d in derived:
        assert len(d) <= naming.MAX_NAME and DNS_1123_LABEL.match(d), d


@settings(max_examples=300)
@given(identity=identities, attempt=attempts, base=bases)
def test_label_values_are_valid(identity, attempt, base):
    name = naming.job_name(base, identity, attempt)
    labels = naming.job_labels(name, identity, attempt)
    for key, value in labels.items():
        assert len(value) <= 63 and LABEL_VALUE.match(value), (key, value)
    assert labels[naming.LABEL_JOB] == name
    assert labels == naming.job_labels(name, identity, attempt)
    # the task selector matches every job of the task instance
    assert labels.items() >= naming.task_labels(identity).items()


@given(text=ids)
def test_label_value_keeps_valid_values_and_hashes_the_rest(text):
    value = naming.label_value(text)
    assert len(value) <= 63 and LABEL_VALUE.match(value)
    assert value == naming.label_value(text)
    if len(text) <= 63 and LABEL_VALUE.match(text):
        assert value == text
    else:
        assert value != text


@given(a=ids, b=ids)
def test_label_values_of_distinct_ids_differ(a, b):
    assume(a != b)
    assert naming.label_value(a) != naming.label_value(b)
