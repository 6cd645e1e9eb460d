"""The only place the pai backend talks to DLC: a small client over the official SDK.

    client = PaiClient(settings)                     # a PaiSettings (hook.py)
    job_id = client.create_job(fields)               # backend.render's dict
    body = client.get_job(job_id)                    # the API's field names, a plain dict
    items, total = client.list_jobs(JobIds="a,b", PageSize=100)

Every call goes through the SDK's real client (signing, ROA paths, serialization): requests
are the SDK's own models built from plain dicts, answers their to_map() dicts. SDK errors
become PaiError with the API's code, HTTP status and request id, and whether the call was
throttled: the message names the call and the connection, never a secret.

The SDK (`alibabacloud-pai-dlc20201203`, the `pai` extra) is imported when a client is made.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dlc_airflow.jsonvalue import JSONObject

if TYPE_CHECKING:
    from dlc_airflow.pai.settings import PaiSettings

# API error codes after which the same call cannot succeed (credentials, permissions, input)
PERMANENT_PREFIXES = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "IncompleteSignature", "Forbidden",
                      "InvalidParameter", "MissingParameter", "InvalidSecurityToken", "NoPermission")


class PaiSDKMissing(ImportError):
    """The SDK is not installed; the message says how to install it."""

    permanent = True


class PaiError(Exception):
    """A DLC API call failed. `code` is the API's error code ('' without an answer)."""

    def __init__(self, call: str, message: str, *, code: str = "", status: int | None = None,
                 request_id: str = "", retry_after: float | None = None, connection: str = "") -> None:
        where = f" (connection {connection!r})" if connection else ""
        rid = f", request id {request_id}" if request_id else ""
        head = f"{code}: " if code else ""
        super().__init__(f"DLC {call} failed{where}: {head}{message}{rid}")
        self.call, self.code, self.status, self.request_id = call, code, status, request_id
        self.retry_after = retry_after

    @property
    def throttled(self) -> bool:
        return self.retry_after is not None or self.code.startswith(("Throttling", "ServiceUnavailable")) \
            or self.status == 429

    @property
    def not_found(self) -> bool:
        return self.status == 404 and not self.code.startswith("InvalidAccessKeyId")

    @property
    def permanent(self) -> bool:
        """Trying again cannot help: refused input, credentials or permission."""
        if self.throttled or self.status is None or self.status >= 500:
            return False
        return self.code.startswith(PERMANENT_PREFIXES) or self.status in (400, 401, 403)


@dataclass
class CallCounter:
    """Requests made per API action (the benchmark and the tests read it)."""

    counts: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, action: str) -> None:
        with self.lock:
            self.counts[action] = self.counts.get(action, 0) + 1


def _sdk() -> tuple[Any, Any, Any]:
    try:
        from alibabacloud_pai_dlc20201203 import models
        from alibabacloud_pai_dlc20201203.client import Client
        from alibabacloud_tea_openapi import utils_models
    except ImportError as exc:
        raise PaiSDKMissing(f"the pai backend needs the PAI-DLC SDK: pip install 'dlc-airflow[pai]' ({exc})") from None
    return Client, models, utils_models


class PaiClient:
    def __init__(self, settings: PaiSettings) -> None:
        Client, models, utils_models = _sdk()
        self.settings = settings
        self.models = models
        self.calls = CallCounter()
        config = utils_models.Config(region_id=settings.region_id, read_timeout=settings.read_timeout_ms,
                                     connect_timeout=settings.connect_timeout_ms)
        if settings.endpoint:
            scheme, sep, host = settings.endpoint.partition("://")
            config.endpoint = host if sep else scheme
            if sep:
                config.protocol = scheme.lower()
        if settings.access_key_id:
            config.access_key_id = settings.access_key_id
            config.access_key_secret = settings.access_key_secret
            if settings.security_token:
                config.security_token = settings.security_token
        else:  # a RAM role (ECS / OIDC), env vars or the CLI profile: the SDK's default chain
            from alibabacloud_credentials.client import Client as CredentialClient

            config.credential = CredentialClient()
        self.sdk = Client(config)

    # -- calls ---------------------------------------------------------------------------
    def create_job(self, fields: JSONObject) -> str:
        request = self.models.CreateJobRequest().from_map(fields)
        body = self._call("CreateJob", self.sdk.create_job, request)
        job_id = body.get("JobId")
        if not job_id:
            raise PaiError("CreateJob", "the answer has no JobId", connection=self.settings.conn_id)
        return str(job_id)

    def get_job(self, job_id: str) -> JSONObject:
        return self._call("GetJob", self.sdk.get_job, job_id, self.models.GetJobRequest(need_detail=True))

    def list_jobs(self, **query: Any) -> tuple[list[JSONObject], int]:
        request = self.models.ListJobsRequest().from_map(query)
        body = self._call("ListJobs", self.sdk.list_jobs, request)
        return list(body.get("Jobs") or []), int(body.get("TotalCount") or 0)

    def stop_job(self, job_id: str) -> None:
        self._call("StopJob", self.sdk.stop_job, job_id)

    def delete_job(self, job_id: str) -> None:
        self._call("DeleteJob", self.sdk.delete_job, job_id)

    def pod_logs(self, job_id: str, pod_id: str, *, start_time: str | None = None,
                 max_lines: int | None = None, pod_uid: str | None = None) -> list[str]:
        request = self.models.GetPodLogsRequest(start_time=start_time, max_lines=max_lines, pod_uid=pod_uid)
        body = self._call("GetPodLogs", self.sdk.get_pod_logs, job_id, pod_id, request)
        return [str(line) for line in body.get("Logs") or []]

    def job_events(self, job_id: str, *, start_time: str | None = None, max_events: int | None = None) -> list[str]:
        request = self.models.GetJobEventsRequest(start_time=start_time, max_events_num=max_events)
        body = self._call("GetJobEvents", self.sdk.get_job_events, job_id, request)
        return [str(event) for event in body.get("Events") or []]

    def tag_job(self, job_id: str, tags: dict[str, str]) -> None:
        request = self.models.TagResourcesRequest(
            region_id=self.settings.region_id, resource_type="Job", resource_id=[job_id],
            tag=[self.models.TagResourcesRequestTag(key=k, value=v) for k, v in tags.items()])
        self._call("TagResources", self.sdk.tag_resources, request)

    def _call(self, action: str, method: Any, *args: Any) -> JSONObject:
        from darabonba.exceptions import DaraException

        self.calls.add(action)
        try:
            response = method(*args)
        except DaraException as exc:
            raise self._error(action, exc) from None
        except Exception as exc:  # noqa: BLE001 - no answer: refused, timed out (the SDK wraps these)
            inner = getattr(exc, "inner_exception", None) or exc
            raise PaiError(action, f"no answer from {self.sdk._endpoint} ({type(inner).__name__}: {inner})",
                           connection=self.settings.conn_id) from None
        body = getattr(response, "body", None)
        return body.to_map() if body is not None else {}

    def _error(self, action: str, exc: Exception) -> PaiError:
        status = getattr(exc, "status_code", None)
        code = str(getattr(exc, "code", "") or "")
        data = getattr(exc, "data", None) or {}
        # the API's own Message (the SDK's message repeats the status and request id)
        message = str(data.get("Message") or data.get("message") or getattr(exc, "message", "") or exc)
        retry_after = getattr(exc, "retry_after", None)
        request_id = str(getattr(exc, "request_id", "") or data.get("RequestId") or "")
        if request_id == "None":
            request_id = ""
        return PaiError(action, message, code=code if code != "None" else "", status=status, request_id=request_id,
                        retry_after=(retry_after / 1000 if retry_after else None),
                        connection=self.settings.conn_id)
