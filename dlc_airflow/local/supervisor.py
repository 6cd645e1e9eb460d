"""The detached supervisor of one local job: `python -m dlc_airflow.local.supervisor <jobdir>`.

JobFolders.submit (local/jobs.py) starts it in its own session, so it outlives the task process that
submitted the job (deferral, a worker restart, a retry that adopts the job). It:

1. reads spec.json and maps volumes to local folders (dlc_airflow.local.volumes), clones
   the code source, allocates one free 127.0.0.1 port per replica that peers dial;
2. plans the replicas (dlc_airflow.local.plan, pure): every replica gets os.environ +
   exactly the wiring the cluster backends inject (dlc_airflow.wiring.replica_env with host
   127.0.0.1 and those ports), plus JOB_COMPLETION_INDEX and
   DLC_OUTPUT_FILE=<jobdir>/outputs/<role>-<i>.json; wiring variables inherited from the
   submitting process are dropped first (wiring.is_wired), and the folder of the
   interpreter running Airflow goes first on PATH (as if its virtualenv were activated), so
   `python` in a job's command is the environment's, as the image's would be on a cluster;
   the MPI/DeepSpeed hostfile (spec.hostfile_spec: presence and slots, as on native) is
   written to <jobdir>/hostfile;
3. runs each replica in its own process group: health_check.command once, then the
   main command, stdout+stderr appended to logs/<role>-<i>.log;
4. applies fault tolerance as the native backend does per index
   (dlc_airflow.local.policy, pure): a replica that exits non-zero with a retryable code
   (any, when retryable_exit_codes is empty) is restarted up to max_restarts times;
   otherwise the other replicas are killed and the job FAILED (reasons
   RestartLimitExceeded, PodFailurePolicy, HealthCheckFailed, and DeadlineExceeded after
   max_running_time);
5. decides success as the policy says: every replica succeeded, or for TensorFlow the
   chief (worker 0 without a chief); the replicas still running then (parameter servers,
   evaluators, other workers) are stopped with the grace period (SIGTERM, then SIGKILL)
   and recorded as stopped, not failed;
6. writes state.json atomically at every change, and on SIGTERM (JobFolders.stop)
   kills every replica's process group (SIGTERM, SIGKILL after the grace period) and
   ends STOPPED.

The job's secret env values (dlc_airflow.secrets: Airflow sources, Secret stand-ins, secret
literals) come on stdin, never from the job folder (spec.json holds references), and are
masked (***) in the replica logs it writes.

Ray jobs run only the head's command: ray.init() in it starts a local Ray cluster, so
worker replicas would only duplicate it. The job's `port` is not used locally (every
job gets free ports, so two jobs never clash); a fixed MASTER_PORT in the job's env still
wins, as on a cluster.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from dlc_airflow.jsonvalue import JSONObject

# Set by SIGTERM/SIGINT; installed before the heavy imports so a stop is never lost.
_stop_signal: list[int] = []


def _on_signal(signum: int, _frame: object) -> None:
    _stop_signal.append(signum)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m dlc_airflow.local.supervisor <jobdir>", file=sys.stderr)
        return 2
    handed = _handed()  # first: the submitting process waits on the pipe
    from dlc_airflow.local.supervise import Supervisor

    return Supervisor(Path(args[0]).resolve(), _stop_signal, handed).run()


def _handed() -> JSONObject:
    """The secret values JobFolders.submit writes to our stdin ({} with none, or at a terminal)."""
    import json

    if sys.stdin is None or sys.stdin.isatty():
        return {}
    data = sys.stdin.buffer.read()
    try:
        return json.loads(data) if data.strip() else {}
    except ValueError:
        return {}


if __name__ == "__main__":
    sys.exit(main())
