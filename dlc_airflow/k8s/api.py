"""The Kubernetes API objects dlc-airflow reads, typed (only the fields it reads).

Every field is optional (total=False): the API server leaves out what is empty, and code
reads with .get(). Objects dlc-airflow only writes or passes on whole (the manifests the
backends render, a CRD's status) are `Manifest`s: plain JSON objects.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypedDict, cast

# A whole object as JSON: a rendered manifest, a custom resource, a list item.
Manifest = dict[str, Any]


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    creationTimestamp: str
    deletionTimestamp: str
    resourceVersion: str


class Condition(TypedDict, total=False):
    type: str
    status: str  # "True", "False", "Unknown"
    reason: str
    message: str
    lastTransitionTime: str


class ContainerStateWaiting(TypedDict, total=False):
    reason: str
    message: str


class ContainerStateTerminated(TypedDict, total=False):
    exitCode: int
    signal: int
    reason: str
    message: str  # the termination message: what dlc_airflow.runtime reported
    startedAt: str
    finishedAt: str


class ContainerState(TypedDict, total=False):
    waiting: ContainerStateWaiting
    running: dict[str, str]
    terminated: ContainerStateTerminated


class ContainerStatus(TypedDict, total=False):
    name: str
    state: ContainerState
    lastState: ContainerState
    restartCount: int
    ready: bool


class PodStatus(TypedDict, total=False):
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    reason: str
    message: str
    startTime: str
    conditions: list[Condition]
    containerStatuses: list[ContainerStatus]
    initContainerStatuses: list[ContainerStatus]


class ResourceRequirements(TypedDict, total=False):
    limits: dict[str, str]
    requests: dict[str, str]


class Container(TypedDict, total=False):
    name: str
    image: str
    resources: ResourceRequirements


class PodSpec(TypedDict, total=False):
    containers: list[Container]
    initContainers: list[Container]
    nodeName: str


class Pod(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


class ObjectReference(TypedDict, total=False):
    kind: str
    name: str
    namespace: str
    uid: str


class Event(TypedDict, total=False):
    """A core/v1 Event."""

    metadata: ObjectMeta
    involvedObject: ObjectReference
    reason: str
    message: str
    type: str  # Normal, Warning
    count: int
    firstTimestamp: str
    lastTimestamp: str
    eventTime: str


class JobStatus(TypedDict, total=False):
    """A batch/v1 Job's status."""

    active: int
    ready: int
    succeeded: int
    failed: int
    terminating: int
    startTime: str
    completionTime: str
    conditions: list[Condition]
    failedIndexes: str
    completedIndexes: str


# The API server's JSON, typed by what it is (the kind asked for): the one place it is told so.
def as_pods(items: Iterable[Manifest]) -> list[Pod]:
    return [cast(Pod, item) for item in items]


def as_events(items: Iterable[Manifest]) -> list[Event]:
    return [cast(Event, item) for item in items]
