#!/usr/bin/env python3
"""A stand-in for the Ray head's job API, for KubeRay on the local control plane.

kwok runs no containers, so no Ray head answers on :8265. KubeRay's operator reads a RayJob's
state only from the head's dashboard (GET /api/jobs/<submission id>); it runs here with
HTTP_PROXY pointing at this server, which answers for every head Service the way a real head
would for a job submitted by KubeRay's submitter pod (`ray job submit` blocks until the job
ends and exits with its result): the job is RUNNING while that pod runs, SUCCEEDED when it
succeeded, FAILED with its exit code when it failed, and unknown (404) before it runs.

Strict: only the requests KubeRay makes of a RayJob's head are answered; any other request
is refused with 501 and appended to the violations file, which the tests check is empty.
Standard library only (scripts/k8s-local runs before any virtualenv exists); it reads the
cluster through kubectl as the administrator.
"""

import argparse
import json
import re
import subprocess
import sys
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

JOB_PATH = re.compile(r"^/api/jobs/(?P<id>[^/]+)(?P<action>/stop)?$")
RAY_STATES = {"Running": "RUNNING", "Succeeded": "SUCCEEDED", "Failed": "FAILED"}


class Cluster:
    def __init__(self, kubectl: list[str]):
        self.kubectl = kubectl

    def get(self, *args: str) -> dict:
        out = subprocess.run([*self.kubectl, "get", *args, "-o", "json"], capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            raise RuntimeError(out.stderr.strip())
        return json.loads(out.stdout)

    def submitter_pod(self, namespace: str, submission_id: str) -> dict | None:
        """The pod of the RayJob's submitter Job that submitted this job: a Ray job runs once per
        submission id, so the first pod that ended decided it (a retried submitter's `ray job
        submit` of the same id changes nothing); else the running one."""
        for rayjob in self.get("rayjobs.ray.io", "-n", namespace)["items"]:
            if rayjob.get("status", {}).get("jobId") == submission_id or rayjob["spec"].get("jobId") == submission_id:
                name = rayjob["metadata"]["name"]
                return deciding_pod(
                    self.get("pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={name}")["items"]
                )
        return None


def deciding_pod(pods: list[dict]) -> dict | None:
    """Of a submitter Job's pods, the one whose `ray job submit` ran the job: the first that
    ended, else the oldest still there."""
    pods = sorted(pods, key=lambda p: p["metadata"]["creationTimestamp"])
    ended = [p for p in pods if p.get("status", {}).get("phase") in ("Succeeded", "Failed")]
    return (ended or pods or [None])[0]


def millis(timestamp: str | None) -> int:
    if not timestamp:
        return 0
    return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)


def job_info(pod: dict, submission_id: str) -> dict | None:
    """What the head's GET /api/jobs/<id> says of the job this submitter pod submitted."""
    phase = pod.get("status", {}).get("phase")
    state = RAY_STATES.get(phase)
    if state is None:
        return None  # not yet submitted
    terminated = {}
    for status in pod["status"].get("containerStatuses") or []:
        terminated = status.get("state", {}).get("terminated") or terminated
    info = {
        "submission_id": submission_id,
        "job_id": submission_id,
        "status": state,
        "entrypoint": " ".join(pod["spec"]["containers"][0].get("command") or []),
        "start_time": millis(pod["status"].get("startTime")),
        "end_time": millis(terminated.get("finishedAt")) if state != "RUNNING" else 0,
        "message": "",
    }
    if state == "FAILED":
        code = terminated.get("exitCode")
        info["message"] = f"Job entrypoint command failed with exit code {code}"
        info["error_type"] = "JOB_ENTRYPOINT_COMMAND_ERROR"
    elif state == "SUCCEEDED":
        info["message"] = "Job finished successfully."
    return info


class Handler(BaseHTTPRequestHandler):
    cluster: Cluster
    violations: str
    lock = threading.Lock()

    def do_GET(self) -> None:
        self.answer("GET")

    def do_POST(self) -> None:
        self.answer("POST")

    def do_DELETE(self) -> None:
        self.answer("DELETE")

    def answer(self, method: str) -> None:
        url = urlsplit(self.path)
        host = (url.hostname or self.headers.get("Host", "")).split(":")[0]
        parts = host.split(".")
        match = JOB_PATH.match(url.path)
        if method == "GET" and url.path == "/healthz" and host in ("127.0.0.1", "localhost"):
            return self.send(200, {"ok": True})  # scripts/k8s-controllers waits on this
        if len(parts) < 3 or parts[2] != "svc" or not match:
            return self.refuse(method, f"{method} {self.path} is not a request KubeRay makes of a RayJob's head")
        namespace, submission_id, action = parts[1], match["id"], match["action"]
        try:
            pod = self.cluster.submitter_pod(namespace, submission_id)
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            return self.send(503, {"error": str(err)})
        info = job_info(pod, submission_id) if pod else None
        if info is None:
            return self.send(404, {"error": f"Job {submission_id} does not exist"})
        if method == "GET" and not action:
            return self.send(200, info)
        if method == "POST" and action:
            return self.send(200, {"stopped": info["status"] == "RUNNING"})
        if method == "DELETE" and not action:
            return self.send(200, {"deleted": True})
        return self.refuse(method, f"{method} {self.path} is not a request KubeRay makes of a RayJob's head")

    def refuse(self, method: str, message: str) -> None:
        with self.lock, open(self.violations, "a") as f:
            f.write(message + "\n")
        self.send(501, {"error": message})

    def send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write("ray-dashboard-standin: " + (format % args) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--kubectl", required=True, help="the kubectl binary")
    parser.add_argument("--kubeconfig", required=True, help="the administrator's kubeconfig")
    parser.add_argument("--violations", required=True, help="file that collects refused requests")
    args = parser.parse_args()
    Handler.cluster = Cluster([args.kubectl, "--kubeconfig", args.kubeconfig])
    Handler.violations = args.violations
    open(args.violations, "a").close()
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
