"""Progress to Kubeflow Trainer's status server (Trainer v2.3, TrainJobStatus feature gate).

With the gate on, the Trainer's TrainJobStatus plugin gives every trainer container:
- KUBEFLOW_TRAINER_SERVER_URL: https://<webhook service>.<operator namespace>.svc:<statusServer.port>
  /apis/trainer.kubeflow.org/v1alpha1/namespaces/<namespace>/trainjobs/<name>/status
- KUBEFLOW_TRAINER_SERVER_TOKEN: a projected ServiceAccount token file whose audience is
  trainer.kubeflow.org/v1alpha1/namespaces/<namespace>/trainjobs/<name>/status
- KUBEFLOW_TRAINER_SERVER_CA_CERT: the CA of the server's certificate.
The server (pkg/statusserver) takes `POST <url>` with `Authorization: Bearer <token>` and a JSON
UpdateTrainJobStatusRequest, {"trainerStatus": {"progressPercentage": 0-100, "estimatedRemainingSeconds":
>= 0, "metrics": [{"name", "value"}], "lastUpdatedTime": RFC 3339}} (metric names and values are
strings of 1-64 characters, at most 256 of them), and applies it to the TrainJob's
status.trainerStatus, where dlc_airflow.k8s.backends.trainer reads it back.

The coordinator replica reports (the others' counts are the same), at most every REPORT_EVERY
seconds and when it reaches the end. Reporting is best effort: a failure is said once on
stderr and training goes on. Stdlib only.
"""

from __future__ import annotations

import json
import math
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from dlc_airflow.eta import Estimate
from dlc_airflow.jsonvalue import JSONObject

URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
CA_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
REPORT_EVERY = 10.0  # seconds between reports (the server applies each to the API server)
TIMEOUT = 5.0
MAX_METRICS = 256
MAX_CHARS = 64
# progress keys of the metrics record: said as progressPercentage / estimatedRemainingSeconds
_PROGRESS_KEYS = frozenset({"step", "total_steps", "progress_unit"})

_last_sent = float("-inf")
_warned = False


def enabled() -> bool:
    """The Trainer asked this replica for its status (and it is the one that reports)."""
    if not os.environ.get(URL_ENV):
        return False
    from dlc_airflow.runtime.env import RuntimeEnvError, is_coordinator

    try:
        return is_coordinator()
    except RuntimeEnvError:
        return False


def request_body(estimate: Estimate, metrics: Mapping[str, Any], now: datetime) -> JSONObject:
    """The UpdateTrainJobStatusRequest for an estimate and the latest metrics (pure)."""
    status: JSONObject = {"progressPercentage": int(estimate.percent)}
    if estimate.eta_seconds is not None:
        status["estimatedRemainingSeconds"] = max(0, int(round(estimate.eta_seconds)))
    entries = []
    for name, value in metrics.items():
        if name in _PROGRESS_KEYS or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue  # numbers only: the status shows a model's metrics, not its strings
        if isinstance(value, float) and not math.isfinite(value):
            continue
        entries.append({"name": name[:MAX_CHARS], "value": f"{value:.6g}" if isinstance(value, float) else str(value)})
    if entries:
        status["metrics"] = entries[:MAX_METRICS]
    status["lastUpdatedTime"] = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"trainerStatus": status}


def report(estimate: Estimate, metrics: Mapping[str, Any], *, force: bool = False) -> bool:
    """Send the status now if due (every REPORT_EVERY seconds, and at the end); True when sent."""
    global _last_sent
    now = time.monotonic()
    done = estimate.current >= estimate.total
    if _warned or not (force or done or now - _last_sent >= REPORT_EVERY):
        return False  # after a failure, no more tries: a server that is down must not slow training
    _last_sent = now
    try:
        send(request_body(estimate, metrics, datetime.now(UTC)))
    except ValueError as exc:  # ours: what the server answered (never the token or its path)
        _warn(str(exc))
        return False
    except urllib.error.URLError as exc:  # the connection's own words (TLS, refused...)
        _warn(f"{type(exc).__name__}: {exc.reason}")
        return False
    except Exception as exc:  # noqa: BLE001 - best effort: training goes on whatever happens here
        _warn(type(exc).__name__ + (f" ({exc.strerror})" if isinstance(exc, OSError) and exc.strerror else ""))
        return False
    return True


def send(body: JSONObject) -> None:
    """POST the body to the status server as the Trainer's plugin set it up (I/O)."""
    url, token_file, ca_file = os.environ[URL_ENV], os.environ.get(TOKEN_ENV), os.environ.get(CA_ENV)
    if not token_file:
        raise ValueError(f"{TOKEN_ENV} is not set: the status server needs the TrainJob's token")
    if not os.path.isfile(token_file):  # the env names a file; never echo what it holds instead
        raise ValueError(f"{TOKEN_ENV} does not name a readable token file")
    with open(token_file, encoding="utf-8") as handle:  # read each time: the kubelet rotates it
        token = handle.read().strip()
    context = ssl.create_default_context(cafile=ca_file or None)
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT, context=context) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read(512).decode(errors="replace")
        raise ValueError(f"HTTP {exc.code}: {_message(detail)}") from None


def _message(detail: str) -> str:
    try:
        return str(json.loads(detail).get("message") or detail)
    except (ValueError, AttributeError):
        return detail


def _warn(why: str) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    print(f"dlc-airflow: could not report progress to the Kubeflow Trainer status server "
          f"({os.environ.get(URL_ENV)}): {why}; training goes on, the task still reads the logs",
          file=sys.stderr, flush=True)


def _reset_for_tests() -> None:
    global _last_sent, _warned
    _last_sent = float("-inf")
    _warned = False
