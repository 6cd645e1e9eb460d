"""One API call at a time, over the official client's ApiClient (kubeconfig, in-cluster
config, TLS and token refresh are its): JSON in and out, every failure a KubeError naming the
call. Transient failures (connection errors, 429, 500, 502, 503, 504) are retried with
backoff: every operation dlc-airflow makes is idempotent by design (deterministic names,
create -> 409 -> adopt; delete -> 404 is fine).

401 and 403 are told apart from the transient refusals of an API server that has just
restarted (see _AuthRetry) and raised as AuthError (Unauthorized / Forbidden) naming the
connection, the identity, the verb and the resource: the task fails without retries.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from collections.abc import Iterator
from typing import Any

from dlc_airflow.k8s.api import Manifest
from dlc_airflow.k8s.errors import (
    AdmissionDenied,
    AuthError,
    KubeError,
    api_error,
    credential_identity,
    identity_from_message,
)
from dlc_airflow.k8s.kinds import SELF_SUBJECT_ACCESS_REVIEW, SELF_SUBJECT_REVIEW, describe_resource, request_attributes

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class Transport:
    """API calls over a kubernetes.client.ApiClient.

    `connection` (the Airflow connection id, if any) is named in auth errors. A 401 or 403 is
    retried for up to `auth_retry_budget` seconds when it may be transient (right after an
    API server restart its authorizer refuses everyone until its RBAC caches are warm), and
    raised as Unauthorized / Forbidden (AuthError) once confirmed: see `_AuthRetry`.
    """

    def __init__(self, api_client: Any, namespace: str = "default", *, retries: int = 5,
                 timeout: float = 30.0, backoff: float = 0.2, connection: str | None = None,
                 auth_retry_budget: float = 10.0, auth_confirm_after: float = 1.0):
        self.api = api_client
        self.namespace = namespace
        self.retries = retries
        self.timeout = timeout
        self.backoff = backoff
        self.connection = connection
        self.auth_retry_budget = auth_retry_budget
        self.auth_confirm_after = auth_confirm_after
        self.transient_auth_failures = 0  # calls that got past transient 401/403 refusals

    @property
    def server(self) -> str:
        return str(self.api.configuration.host)

    def call(self, method: str, path: str, **kw: Any) -> Manifest:
        """`request` of a JSON object: what every API call but logs and watches answers."""
        answer: Manifest = self.request(method, path, **kw)
        return answer

    # -- transport ---------------------------------------------------------------------
    def request(self, method: str, path: str, *, body: Any = None, query: Manifest | None = None,
                content_type: str = "application/json", stream: bool = False,
                timeout: float | tuple[float, float] | None = None, retry: bool = True, text: bool = False) -> Any:
        """One API call; JSON in and out (text when text=True, the raw urllib3 response
        when stream=True).

        Every call goes through here: connection errors and 429/5xx are retried (unless
        retry=False), 401/403 are told apart from transient refusals (always, also for
        retry=False: a watch that is refused must say so) and raised as AuthError.
        """
        attempt = 0
        auth: _AuthRetry | None = None
        while True:
            try:
                result = self._send(method, path, body=body, query=query, content_type=content_type,
                                    stream=stream, timeout=timeout, text=text)
                if auth is not None:
                    self.transient_auth_failures += 1
                    log.info("%s %s succeeded after %d transient refusals in %.1f s (%s)", method, path,
                             auth.tries, auth.elapsed(), auth.evidence)
                return result
            except AuthError as err:
                self._annotate(err, method, path, query)
                if auth is None:
                    auth = _AuthRetry(self, method, path, query)
                delay = auth.next_delay(err)
                if delay is None:
                    raise auth.final(err) from None
                log.info("%s %s: %d %s; retrying in %.1fs (%s)", method, path, err.status, err.reason,
                         delay, auth.evidence)
                time.sleep(delay)
                continue
            except KubeError as err:
                attempt += 1
                if not retry or attempt > self.retries or (err.status and err.status not in RETRY_STATUS):
                    raise
                delay = err.retry_after if err.retry_after is not None else self.backoff * 2 ** (attempt - 1)
                delay = min(delay, 10.0) * random.uniform(0.8, 1.2)
                log.debug("%s; retry %d/%d in %.1fs", err, attempt, self.retries, delay)
                time.sleep(delay)

    def _send(self, method: str, path: str, *, body: Any = None, query: Manifest | None = None,
              content_type: str = "application/json", stream: bool = False,
              timeout: float | tuple[float, float] | None = None, text: bool = False, credentials: bool = True) -> Any:
        """Exactly one HTTP request; failures as KubeError (401/403 without annotations)."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        call = f"{method} {path}"
        headers = {"Accept": "application/json", "Content-Type": content_type}
        query_list = [(k, v) for k, v in (query or {}).items() if v is not None]
        try:
            resp = self.api.call_api(
                path, method, query_params=query_list, header_params=headers, body=body,
                auth_settings=["BearerToken"] if credentials else [], _preload_content=False,
                _request_timeout=timeout if timeout is not None else self.timeout,
            )
        except ApiException as exc:
            err = api_error(call, exc.status, exc.body, exc.reason or "")
            err.retry_after = _retry_after(exc)
            raise err from None
        except (HTTPError, OSError) as exc:
            raise KubeError(call, 0, f"connection failed ({type(exc).__name__}: {exc})") from None
        if stream:
            return resp
        data = resp.data
        if text:
            return data.decode(errors="replace")
        return json.loads(data) if data else {}

    def _annotate(self, err: AuthError, method: str, path: str, query: Manifest | None) -> None:
        attrs = request_attributes(method, path, query)
        err.verb, err.resource = attrs["verb"], describe_resource(attrs)
        err.namespace = attrs.get("namespace", "")
        err.server, err.connection = self.server, self.connection
        err.identity = err.identity or identity_from_message(err.message)

    def _probe(self, method: str, path: str, body: Any = None, *, credentials: bool = True,
               text: bool = False) -> Any:
        """One quick request for the auth checks: never retried, never raises (None on failure)."""
        try:
            return self._send(method, path, body=body, timeout=5.0, credentials=credentials, text=text)
        except KubeError:
            return None


class _AuthRetry:
    """Tells a transient 401/403 from a real one, for one call.

    Right after an API server (re)starts, its RBAC authorizer answers 403 to everyone but
    system:masters until its informer caches are synced (measured on the local control
    plane: ~2 s in which even a SelfSubjectAccessReview and /readyz get 403), and token
    authenticators may answer 401 for a moment: a task must not fail for good on that. So:

    - 403: ask a SelfSubjectAccessReview for the same verb/resource/namespace (every
      authenticated identity may).
      - Allowed: the authorizer is warm now; retry the call. If the call is refused again
        while the review keeps saying allowed and the refusal is not an RBAC one (no
        `User "..." cannot ...`), it is admission (ResourceQuota, PodSecurity, a webhook):
        AdmissionDenied, which is not an auth error.
      - Denied, and /readyz (which waits for the server's informers) says ok: a real
        denial, raised once `auth_confirm_after` seconds have passed since the first
        refusal (a RoleBinding made a moment ago gets that long to take effect).
      - The review itself refused or failed, or /readyz not ok: still warming up; retry.
    - 401: the same with an anonymous /readyz (the credentials are what is refused).
    - Either way, `auth_retry_budget` seconds after the first refusal it is raised as it is.
    """

    def __init__(self, client: Transport, method: str, path: str, query: Manifest | None):
        self.client = client
        self.attrs = request_attributes(method, path, query)
        self.started = time.monotonic()
        self.tries = 0
        self.evidence = ""
        self.confirmed = False
        self.admission = False

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def next_delay(self, err: AuthError) -> float | None:
        """Seconds to wait before retrying the call, or None: give up (raise `final(err)`)."""
        self.tries += 1
        budget, confirm_after = self.client.auth_retry_budget, self.client.auth_confirm_after
        self.confirmed = False
        if self.elapsed() >= budget:
            return None
        if err.status == 403:
            verdict = self._review()
            if verdict is True:
                if not _rbac_refusal(err.message) and self.tries >= 2 and self.elapsed() >= confirm_after:
                    self.admission = True
                    return None
                self.evidence = "a SelfSubjectAccessReview says allowed: the authorizer was warming up"
                return self._delay(budget, quick=True)
            ready = self.client._probe("GET", "/readyz", text=True) == "ok"
            if verdict is False and ready:
                self.confirmed = True
                self.evidence = "a SelfSubjectAccessReview says denied, and the API server is ready"
            else:
                self.evidence = ("the API server is not ready yet" if not ready else
                                 "the access review itself was refused (the authorizer may be warming up)")
        else:
            ready = self.client._probe("GET", "/readyz", credentials=False, text=True) == "ok"
            self.confirmed = ready
            self.evidence = ("the API server is ready and refuses the credentials" if ready else
                             "the API server's readiness is unknown (it may still be starting)")
        if self.confirmed:
            wait = confirm_after - self.elapsed()
            return None if wait <= 0 else min(wait + 0.05, budget - self.elapsed())
        return self._delay(budget)

    def _delay(self, budget: float, quick: bool = False) -> float | None:
        base = 0.1 if quick else 0.25
        delay = min(2.0, base * 2 ** min(self.tries - 1, 4)) * random.uniform(0.8, 1.2)
        left = budget - self.elapsed()
        return min(delay, left) if left > 0.05 else None

    def _review(self) -> bool | None:
        answer = self.client._probe("POST", SELF_SUBJECT_ACCESS_REVIEW.path(), body=access_review(self.attrs))
        if not isinstance(answer, dict) or "status" not in answer:
            return None
        return bool(answer["status"].get("allowed"))

    def final(self, err: AuthError) -> KubeError:
        """What to raise for `err`: itself with who was refused and how we know, or
        AdmissionDenied when the authorizer allows the call and admission refuses it."""
        if not err.identity:
            if err.status == 403:
                review = self.client._probe("POST", SELF_SUBJECT_REVIEW.path(), body={
                    "apiVersion": SELF_SUBJECT_REVIEW.api_version, "kind": SELF_SUBJECT_REVIEW.kind})
                if isinstance(review, dict):
                    err.identity = str(review.get("status", {}).get("userInfo", {}).get("username") or "")
            if not err.identity:
                err.identity = credential_identity(self.client.api.configuration)
        if self.admission:
            return AdmissionDenied(err)
        # short: the whole message stays under ~300 characters (the log lines above have the rest)
        if self.confirmed:
            err.detail = f"{'an access review agrees' if err.status == 403 else 'the server is ready'}, " \
                         f"{self.elapsed():.1f} s"
        else:
            err.detail = f"still refused after {self.elapsed():.1f} s" + (f": {self.evidence}" if self.evidence else "")
        return err


def _rbac_refusal(message: str) -> bool:
    """The authorizer's wording (`User "x" cannot list resource "jobs" ...`), not admission's."""
    return bool(re.search(r'User "[^"]*" cannot ', message or ""))


def access_review(attrs: dict[str, str]) -> Manifest:
    if "nonResourceURL" in attrs:
        spec = {"nonResourceAttributes": {"path": attrs["nonResourceURL"], "verb": attrs["verb"]}}
    else:
        keys = ("namespace", "verb", "group", "version", "resource", "subresource", "name")
        spec = {"resourceAttributes": {k: attrs[k] for k in keys if attrs.get(k)}}
    return {"apiVersion": SELF_SUBJECT_ACCESS_REVIEW.api_version, "kind": SELF_SUBJECT_ACCESS_REVIEW.kind,
            "spec": spec}


def _retry_after(exc: Any) -> float | None:
    headers = getattr(exc, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value else None
    except ValueError:
        return None


def lines(resp: Any, call: str) -> Iterator[bytes]:
    from urllib3.exceptions import HTTPError

    buf = b""
    try:
        for chunk in resp.stream(amt=None, decode_content=False):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    yield line
    except (HTTPError, OSError) as exc:
        raise KubeError(call, 0, f"watch connection broken ({type(exc).__name__})") from None
    if buf.strip():
        yield buf
