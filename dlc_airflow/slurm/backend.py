"""The slurm backend's pure half: what Slurm can run, the batch job a DLCJob becomes, and
the JobStatus of a Slurm job. Nothing here talks to slurmrestd (client.py does).

One DLCJob is one Slurm batch job; each replica is one Slurm task on a node of its own:

    replicas (all roles)     -> nodes = tasks, one task per node (the step runs
                                `srun --ntasks-per-node=1 --distribution=block`, so task k
                                is on node k of the allocation, as pod k would be)
    nproc_per_node           -> stays the command's (torchrun --nproc-per-node reads
                                PET_NPROC_PER_NODE); the default cpus per task
    resources.cpu            -> cpus_per_task (rounded up to whole CPUs)
    resources.memory         -> memory_per_node (MiB, rounded up)
    resources.gpu / gpu_type -> GPUs per node: gpus_per_node "type:N" (v0.0.38),
                                tres_per_node "gres/gpu:type:N" (v0.0.40+); gpu_type is the
                                cluster's GRES type name (e.g. a100)
    max_running_time         -> time_limit (minutes, rounded up): Slurm ends it as TIMEOUT
    scheduling.queue         -> partition (else the connection's partition)
    scheduling.priority_class-> qos (else the connection's qos); the connection's account
    scheduling.spot          -> the connection's spot_partition / spot_qos ("require" without
                                either is refused; "prefer" without them runs normally)
    include_nodes / exclude  -> required nodes (nodelist: all of them are used) / excluded nodes
    fault_tolerance          -> restart_on_preemption = requeue; max_restarts: the batch
                                script runs the failed step again (every replica, as torchrun
                                restarts do), only for retryable_exit_codes when listed
    health_check             -> run by the prelude before the command, in every task
    storage                  -> host_path mounts only, with mount_path == path: a shared
                                folder every node sees at that path; anything else is refused
    image                    -> not used: the nodes' own software runs the command

The framework env (MASTER_ADDR, RANK, WORLD_SIZE, PET_*, hostfile, SHARD_INDEX...) is not
rendered here: the prelude (prelude.py), started by srun in every task, derives it from
SLURM_PROCID and SLURM_JOB_NODELIST with dlc_airflow.wiring, the source every backend uses.

Job type `slurm` (DLC's SlurmJob): the job's `shell` is a batch script, run as it is on the
first node of `roles.worker.replicas` nodes; it starts its own srun steps. `command` is
run as `exec <argv>`.

The job's identity (task key, dag, task, run, map index, try, attempt, roles) is the job's
comment; its folder `<job_root>/<name>/` (written by the job, read by the runner when it
sees the folder) holds logs/<role>-<i>.log, outputs/<role>-<i>.json, exits/<role>-<i>,
hostfile, restarts and result.json (the batch script's exit code, restarts, and whether
the exit code was retryable).
"""

from __future__ import annotations

import hashlib
import json
import math
import shlex
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dlc_airflow import naming, reasons
from dlc_airflow.errors import BackendError, unsupported_type
from dlc_airflow.jobfolder import LOGS, OUTPUTS
from dlc_airflow.jobtypes import JobType, ordered_roles
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.naming import check_name
from dlc_airflow.slurm.api import JobRecord, JobRequest
from dlc_airflow.spec import DLCJob, HostPathMount, Resources, is_templated
from dlc_airflow.spec.fields import quantity_value
from dlc_airflow.status import JobState, JobStatus, RoleCounts

NAME = "slurm"
JOB_TYPES = frozenset({JobType.pytorch, JobType.deepspeed, JobType.megatron, JobType.mpi, JobType.xgboost,
                       JobType.batch, JobType.custom, JobType.slurm})
REFUSAL = "TensorFlow parameter servers and Ray clusters are not Slurm steps"

COMMENT_PREFIX = "dlc-airflow:"
PRELUDE_MODULE = "dlc_airflow.slurm.prelude"
SECRETS_PLACEHOLDER = "<hidden: read from the job's secrets file>"

# the prelude's inputs (DLC_ names: the replicas never see them, wiring.is_wired drops them)
ENV_SPEC = "DLC_SLURM_SPEC"
ENV_NAME = "DLC_SLURM_NAME"
ENV_JOBDIR = "DLC_SLURM_JOBDIR"
ENV_SECRETS = "DLC_SLURM_SECRETS"  # the path of the job's secrets file (never a value)

# the job folder
EXITS = "exits"  # (logs/, outputs/ and spec.json: the shared job folder, dlc_airflow.jobfolder)
BATCH_LOG = "batch"  # logs/batch.log: the batch script's own lines and srun's
RESULT = "result.json"
RESTARTS = "restarts"
HOSTFILE = "hostfile"
SCRIPT = "job.sh"
# The secret values of the job's env ({where: {NAME: value}}, JSON): written 0600 by the runner
# before the submit, read by the prelude in every task, removed when the batch script ends (and
# by the runner when it stops, deletes or sees the job ended). So no value is in the job's
# environment at submit: not in slurmctld's state, `scontrol show job`, sacct or the request.
SECRETS_FILE = ".secrets.json"

# Pending reasons that say the job does not fit now (rather than waiting its turn).
_UNSCHEDULABLE = ("Resources", "ReqNodeNotAvail", "PartitionNodeLimit", "PartitionTimeLimit", "PartitionDown",
                  "PartitionInactive", "NodeDown", "BadConstraints", "InvalidQOS", "InvalidAccount",
                  "QOSMax", "AssocMax", "AssocGrp", "QOSGrp", "Reservation", "Licenses", "Dependency")


@dataclass(frozen=True)
class Target:
    """Where and how jobs run: what render needs of the connection (SlurmSettings)."""

    job_root: str = "/tmp/dlc-airflow-slurm"
    python: str = "python3"
    path: str = "/usr/local/bin:/usr/bin:/bin"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    spot_partition: str | None = None
    spot_qos: str | None = None

    @classmethod
    def of(cls, settings: Any) -> Target:
        return cls(job_root=settings.job_root, python=settings.python, path=settings.path,
                   partition=settings.partition, account=settings.account, qos=settings.qos,
                   spot_partition=settings.spot_partition, spot_qos=settings.spot_qos)

    def jobdir(self, name: str) -> str:
        return f"{self.job_root.rstrip('/')}/{name}"


@dataclass(frozen=True)
class Folder:
    """What the job folder says (when the runner sees it): each replica's exit code, the
    batch script's result, step restarts, and the tail of the batch log."""

    visible: bool = False
    exits: dict[str, int] = field(default_factory=dict)  # replica key -> exit code of its last run
    result: JSONObject | None = None  # {"exit_code", "restarts", "retryable"}
    restarts: int = 0
    batch_tail: str = ""


class SlurmBackend:
    name: ClassVar[str] = NAME
    job_types: ClassVar[frozenset[JobType]] = JOB_TYPES

    # -- check (parse time) --------------------------------------------------------------
    def check(self, job: DLCJob) -> None:
        """BackendError naming the field for what Slurm cannot run."""
        if job.type not in self.job_types:
            raise unsupported_type(job.type.value, self.name, REFUSAL)
        for role, spec in job.roles.items():
            if spec.image and spec.image != job.image:
                raise _refuse(f"roles.{role}.image: Slurm runs every replica on the nodes' own software; "
                              "an image per role cannot be honoured: remove it")
            if spec.resources is not None and spec.resources != job.resources:
                # per-role resources would be a heterogeneous job: not submitted (README: roles that differ)
                raise _refuse(f"roles.{role}.resources: every Slurm node of the job gets the same resources "
                              "(one allocation; heterogeneous jobs are not used): set them on the job's "
                              "resources instead, or run the roles as separate tasks")
        for role in job.roles:
            res = job.role_resources(role)
            if res.rdma:
                raise _refuse("resources.rdma: RDMA devices are the nodes' own on Slurm (no device request): "
                              "remove it, or choose a partition with RDMA (scheduling.queue)")
            if res.ephemeral_storage:
                raise _refuse("resources.ephemeral_storage: Slurm jobs use the nodes' own disks: remove it")
        for i, mount in enumerate(job.storage):
            if not isinstance(mount, HostPathMount):
                raise _refuse(f"storage[{i}] ({mount.type}): Slurm jobs cannot mount volumes; a shared folder "
                              "is given as a host_path whose mount_path is its path on every node")
            if not is_templated(mount.mount_path + mount.path) and mount.mount_path.rstrip("/") != mount.path.rstrip("/"):
                raise _refuse(f"storage[{i}].mount_path {mount.mount_path!r}: Slurm jobs see a shared folder at its "
                              f"own path: set mount_path to its path {mount.path!r}")
            if mount.sub_path:
                raise _refuse(f"storage[{i}].sub_path: give the sub folder's full path as path and mount_path")
        if job.code is not None:
            raise _refuse("code: the slurm backend does not clone repositories: put the code in a shared folder "
                          "(storage host_path) or clone it in the command")
        sched = job.scheduling
        if sched.node_selector:
            raise _refuse("scheduling.node_selector: Slurm nodes have no labels: use include_nodes / exclude_nodes "
                          "or a partition (scheduling.queue)")
        if sched.tolerations:
            raise _refuse("scheduling.tolerations: Slurm has no taints: remove them")
        if sched.service_account:
            raise _refuse("scheduling.service_account: Slurm jobs run as the connection's user: remove it")
        if sched.queue_priority:
            raise _refuse("scheduling.queue_priority: a Kueue priority; on Slurm use priority_class (a QOS)")
        if sched.topology:
            raise _refuse("scheduling.topology: Kueue's topology-aware placement; Slurm places a job by its own "
                          "topology plugin (a partition on one switch, scheduling.queue): remove it")
        from dlc_airflow.secrets.resolve import entries
        from dlc_airflow.spec.envsource import SecretKeyRef

        for entry in entries(job):
            if isinstance(entry.value, SecretKeyRef):
                raise _refuse(f"{entry.field}: a Kubernetes Secret cannot be read on Slurm: use "
                              "{airflow_variable: ...} or {airflow_connection: ..., field: ...}")
        if job.type is JobType.slurm and job.nproc_per_node != 1:  # pragma: no cover - the spec refuses it
            raise _refuse("nproc_per_node: a slurm batch script starts its own steps")

    # -- render (submit time) ------------------------------------------------------------
    def render(self, job: DLCJob, name: str, identity: naming.TaskIdentity | None = None,
               attempt: int | None = None, target: Target | None = None) -> JobRequest:
        """The batch job to submit. No secret value: they go into the job's secrets file."""
        check_name(name, self.name)
        self.check(job)
        target = target or Target()
        jobdir = target.jobdir(name)
        res = job.role_resources(next(iter(job.roles)))
        nodes = job.total_replicas()
        partition, qos = placement(job, target)
        env = {"PATH": _path_with(target.python, target.path)}
        if job.type is JobType.slurm:
            env.update(script_env(job, name, jobdir))
        else:
            from dlc_airflow.specpack import stored

            env[ENV_SPEC] = json.dumps(stored(job), separators=(",", ":"), sort_keys=True)
            env[ENV_NAME] = name
            env[ENV_JOBDIR] = jobdir
        if _hidden(job):
            env[ENV_SECRETS] = f"{jobdir}/{SECRETS_FILE}"
        cpus = cpus_per_task(job, res)
        return JobRequest(
            name=name,
            script=batch_script(job, name, jobdir, target.python, cpus),
            environment=env,
            working_directory=target.job_root,
            nodes=nodes,
            tasks=nodes,  # one task per node (a slurm script's srun steps may use its CPUs as they like)
            tasks_per_node=1,
            cpus_per_task=cpus,
            memory_per_node_mb=memory_mib(res.memory),
            gpus_per_node=res.gpu,
            gpu_type=res.gpu_type,
            time_limit_minutes=(max(1, math.ceil(job.max_running_time.total_seconds() / 60))
                                if job.max_running_time else None),
            partition=partition,
            qos=qos,
            account=target.account,
            required_nodes=tuple(job.scheduling.include_nodes),
            excluded_nodes=tuple(job.scheduling.exclude_nodes),
            requeue=job.fault_tolerance.restart_on_preemption,
            comment=comment(job, name, identity, attempt),
        )

    def preview(self, job: DLCJob, name: str) -> list[JSONObject]:
        """What `dlc-airflow render` prints: the batch script, and the job request as slurmrestd
        v0.0.40 and later take it (the job folder under the default job root; the connection's
        partition, account and job root are filled in at submit)."""
        from dlc_airflow.slurm.api import NEW, Api

        request = self.render(job, name)
        api = Api.of(NEW[0])
        body = api.submit_body(request)
        body["job"].pop("script", None)
        return [{"script": request.script}, {"request": f"POST {api.submit_path}", "body": body}]

    # -- status --------------------------------------------------------------------------
    def status(self, record: JobRecord | None, folder: Folder | None = None) -> JobStatus:
        return job_status(record, folder or Folder())


def _refuse(message: str) -> BackendError:
    return BackendError(f"slurm backend: {message}")


def _hidden(job: DLCJob) -> bool:
    from dlc_airflow.secrets.resolve import entries

    return any(e.hidden() for e in entries(job))


def _path_with(python: str, path: str) -> str:
    folder = python.rsplit("/", 1)[0] if "/" in python else ""
    parts = [p for p in path.split(":") if p and p != folder]
    return ":".join([folder, *parts] if folder else parts)


def placement(job: DLCJob, target: Target) -> tuple[str | None, str | None]:
    """(partition, qos): the job's queue / priority_class, else spot's, else the connection's."""
    spot = job.scheduling.spot
    if spot == "require" and not (target.spot_partition or target.spot_qos):
        raise BackendError("slurm backend: scheduling.spot='require' but the slurm connection names no "
                           "spot_partition or spot_qos (preemptible): set one in its extra, or use spot='prefer'")
    spotty = spot != "none"
    partition = job.scheduling.queue or (target.spot_partition if spotty else None) or target.partition
    qos = job.scheduling.priority_class or (target.spot_qos if spotty else None) or target.qos
    return partition, qos


def cpus_per_task(job: DLCJob, res: Resources) -> int | None:
    if res.cpu and not is_templated(res.cpu):
        return max(1, math.ceil(quantity(res.cpu)))
    if job.type_info.torch and job.nproc_per_node > 1:
        return job.nproc_per_node
    return None


def quantity(text: str) -> float:
    """A Kubernetes quantity ('500m', '16Gi', '1e3') as a number."""
    try:
        return quantity_value(text)
    except ValueError:
        raise BackendError(f"slurm backend: {text!r} is not a quantity") from None


def memory_mib(memory: str | None) -> int | None:
    if not memory or is_templated(memory):
        return None
    return max(1, math.ceil(quantity(memory) / 2**20))


# -- identity (the job's comment) ------------------------------------------------------------


def comment(job: DLCJob, name: str, identity: naming.TaskIdentity | None, attempt: int | None) -> str:
    """The job's identity and roles, as its Slurm comment: `dlc-airflow:{json}`."""
    labels = naming.job_labels(name, identity, attempt)
    data: JSONObject = {k.removeprefix(naming.PREFIX): v for k, v in labels.items() if k != naming.MANAGED_BY}
    data["roles"] = {r: job.roles[r].replicas for r in ordered_roles(job.roles)}
    return COMMENT_PREFIX + json.dumps(data, separators=(",", ":"), sort_keys=True)


def parse_comment(text: str) -> JSONObject | None:
    """The identity a job's comment carries; None for a job that is not ours."""
    if not text or not text.startswith(COMMENT_PREFIX):
        return None
    try:
        data = json.loads(text[len(COMMENT_PREFIX):])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def with_try(text: str, try_number: int) -> str:
    """The comment with the task try that now owns the job."""
    data = parse_comment(text) or {}
    data["try"] = str(try_number)
    return COMMENT_PREFIX + json.dumps(data, separators=(",", ":"), sort_keys=True)


# -- the batch script ------------------------------------------------------------------------


def batch_script(job: DLCJob, name: str, jobdir: str, python: str, cpus: int | None) -> str:
    """The batch script: make the job folder, send its own output there, run the step (or the
    user's script) and run it again on a retryable failure, then record the result."""
    ft = job.fault_tolerance
    codes = ft.retryable_exit_codes
    retryable = "true" if not codes else f'case "$code" in {"|".join(map(str, codes))}) true ;; *) false ;; esac'
    lines = [
        "#!/bin/bash",
        f"# dlc-airflow job {name} ({job.type.value}, {job.total_replicas()} node(s)): rendered by "
        "dlc_airflow.slurm.backend",
        f"jobdir={shlex.quote(jobdir)}",
        f'mkdir -p "$jobdir/{LOGS}" "$jobdir/{OUTPUTS}" "$jobdir/{EXITS}" || exit 1',
        # a requeued job runs this script again: what its earlier run left says nothing now
        f'rm -f "$jobdir/{EXITS}"/* "$jobdir/{RESULT}" "$jobdir/{RESTARTS}"',
        f'exec >>"$jobdir/{LOGS}/{BATCH_LOG}.log" 2>&1',
        'echo "[dlc-airflow] Slurm job $SLURM_JOB_ID on $SLURM_JOB_NODELIST"',
    ]
    if not ft.restart_on_preemption:
        # Slurm 22.05's slurmrestd (v0.0.38) ignores requeue=false: a requeued run of a job
        # that may not restart ends at once, as preempted
        lines += ['if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then',
                  '  echo "[dlc-airflow] requeued by Slurm (restart $SLURM_RESTART_COUNT), but '
                  'fault_tolerance.restart_on_preemption is off: not running again"',
                  f'  printf \'{{"exit_code": 1, "restarts": 0, "retryable": false, "requeued": true}}\\n\' '
                  f'> "$jobdir/{RESULT}"',
                  "  exit 1",
                  "fi"]
    if job.type is JobType.slurm:
        lines += _script_step(job, jobdir, python)
    else:
        n = job.total_replicas()
        srun = ["srun", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", "--distribution=block",
                "--kill-on-bad-exit=1", "--export=ALL"]
        if cpus:
            srun.append(f"--cpus-per-task={cpus}")  # srun does not inherit it from the job (22.05+)
        res = job.role_resources(next(iter(job.roles)))
        if res.gpu:
            srun.append(f"--gpus-per-node={res.gpu_type + ':' if res.gpu_type else ''}{res.gpu}")
        run = shlex.join([*srun, python, "-m", PRELUDE_MODULE])
        # srun exits with the highest code of its tasks: when one fails the others are
        # stopped (143, 137), which would hide the cause; the job's code is the failed one's
        lines += [f"run() {{ {run}; local code=$? c f",
                  '  [ "$code" -eq 0 ] && return 0',
                  f'  for f in "$jobdir/{EXITS}"/*; do c=$(cat "$f" 2>/dev/null) || continue',
                  '    case "$c" in 0|137|143) ;; *) return "$c" ;; esac',
                  '  done',
                  '  return "$code"; }']
    lines += [
        "restarts=0",
        "while true; do",
        "  run",
        "  code=$?",
        '  [ "$code" -eq 0 ] && break',
        f'  if [ "$restarts" -lt {ft.max_restarts} ] && {retryable}; then',
        "    restarts=$((restarts + 1))",
        f'    echo "$restarts" > "$jobdir/{RESTARTS}"',
        f'    echo "[dlc-airflow] the step exited with code $code: restart $restarts of {ft.max_restarts}"',
        "    continue",
        "  fi",
        "  break",
        "done",
        f"if {retryable}; then kind=true; else kind=false; fi",
        f'printf \'{{"exit_code": %s, "restarts": %s, "retryable": %s}}\\n\' "$code" "$restarts" "$kind" '
        f'> "$jobdir/.{RESULT}" && mv "$jobdir/.{RESULT}" "$jobdir/{RESULT}"',
        *([f'rm -f "$jobdir/{SECRETS_FILE}"'] if _hidden(job) else []),
        'exit "$code"',
    ]
    return "\n".join(lines) + "\n"


def _script_step(job: DLCJob, jobdir: str, python: str) -> list[str]:
    """A `slurm` job: write the user's script into the job folder and run it as it is."""
    text = user_script(job)
    delimiter = "DLC_SCRIPT_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    log = f'"$jobdir/{LOGS}/worker-0.log"'
    workdir = shlex.quote(job.working_dir) if job.working_dir else '"$jobdir"'
    lines = [f'cat > "$jobdir/{SCRIPT}" <<\'{delimiter}\'', text.rstrip("\n"), delimiter,
             f'chmod +x "$jobdir/{SCRIPT}"', f'cd {workdir} || cd "$jobdir"']
    run = f'"$jobdir/{SCRIPT}"' if text.startswith("#!") else f'/bin/bash "$jobdir/{SCRIPT}"'
    if job.health_check:
        run = f"{shlex.join(job.health_check.command)} && {run}"
    if _hidden(job):  # its output passes the prelude's redaction: secret values stay out of the folder
        lines.insert(0, f'eval "$({shlex.join([python, "-m", PRELUDE_MODULE, "export"])})" || exit 1')
        redact = shlex.join([python, "-m", PRELUDE_MODULE, "redact"])
        body = f"{{ {run}; }} 2>&1 | {redact} >>{log}; code=${{PIPESTATUS[0]}}"
    else:
        body = f"{{ {run}; }} >>{log} 2>&1; code=$?"
    lines.append(f'run() {{ {body}; echo "$code" > "$jobdir/{EXITS}/worker-0"; return $code; }}')
    return lines


def user_script(job: DLCJob) -> str:
    """The batch script of a `slurm` job: its shell as it is, or `exec <command>`."""
    role = job.roles["worker"]
    shell = role.shell if (role.shell or role.command) else job.shell
    command = role.command if (role.shell or role.command) else job.command
    if shell is not None:
        return shell if shell.endswith("\n") else shell + "\n"
    return "#!/bin/bash\nexec " + shlex.join(command or []) + "\n"


def script_env(job: DLCJob, name: str, jobdir: str) -> dict[str, str]:
    """What a `slurm` job's script sees besides SLURM_*: the DLC_* every replica gets and the
    job's env (secret values are placeholders: the script exports them from the secrets file)."""
    from dlc_airflow import wiring
    from dlc_airflow.secrets.resolve import entries
    from dlc_airflow.spec.envsource import describe

    hidden = {e.name for e in entries(job) if e.hidden() and e.where in ("env", "roles.worker.env")}
    env: dict[str, str] = {}
    for key, value in wiring.role_env(job, name, "worker", None, framework=False).items():
        if isinstance(value, wiring.IndexExpr):
            value = value.at(0)
        if key in hidden or not isinstance(value, str):
            value = f"<hidden: {describe(value)}>" if not isinstance(value, str) else SECRETS_PLACEHOLDER
        env[key] = value
    env["DLC_OUTPUT_FILE"] = f"{jobdir}/{OUTPUTS}/worker-0.json"
    return env


def secrets_text(values: dict[str, dict[str, str]]) -> str:
    """The secrets file's content: {where: {NAME: value}}, as secrets.resolve.hidden_values gives it."""
    return json.dumps(values, separators=(",", ":"), sort_keys=True)


def script_exports(values: dict[str, dict[str, str]]) -> str:
    """`export NAME=value` lines (shell-quoted) of a `slurm` job's env, for its batch script's eval."""
    merged = {**values.get("env", {}), **values.get("roles.worker.env", {})}
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in sorted(merged.items()))


def _replace(request: JobRequest, **changes: Any) -> JobRequest:
    from dataclasses import replace

    return replace(request, **changes)


# -- status ----------------------------------------------------------------------------------


def job_status(record: JobRecord | None, folder: Folder) -> JobStatus:
    """The JobStatus of a Slurm job from its record (None: slurmctld no longer knows it) and
    its folder (exit codes per replica, the batch script's result)."""
    from datetime import UTC, datetime

    def at(seconds: float | None) -> datetime | None:
        return datetime.fromtimestamp(seconds, UTC) if seconds else None

    if record is None:
        return _forgotten(folder)
    identity = parse_comment(record.comment) or {}
    found = identity.get("roles")
    roles: JSONObject = found if isinstance(found, dict) else {}
    state, reason, message = _state(record, folder)
    restarts = record.restarts + max(folder.restarts, int((folder.result or {}).get("restarts") or 0))
    started = record.start_time if state not in (JobState.PENDING, JobState.QUEUED) or record.restarts else None
    return JobStatus(
        state=state, reason=reason, message=message, roles=_roles(roles, folder, state), restarts=restarts,
        created=at(record.submit_time), started=at(started),
        finished=at(record.end_time) if state.terminal else None,
    )


def _forgotten(folder: Folder) -> JobStatus:
    """slurmctld purged the job (MinJobAge): its folder's result is all there is."""
    result = folder.result
    if result is None:
        return JobStatus(state=JobState.STOPPED, reason=reasons.NOT_FOUND,
                         message="Slurm no longer knows the job and its folder has no result")
    code = int(result.get("exit_code") or 0)
    if code == 0:
        return JobStatus(state=JobState.SUCCEEDED, reason=reasons.COMPLETED, restarts=int(result.get("restarts") or 0))
    return JobStatus(state=JobState.FAILED, reason=_failure_reason(result), restarts=int(result.get("restarts") or 0),
                     message=_failure_message(None, folder, code, None))


def _state(record: JobRecord, folder: Folder) -> tuple[JobState, str, str]:
    s, flags = record.state, set(record.flags)
    why = record.reason if record.reason not in ("", "None") else ""
    detail = f" ({record.description})" if record.description else ""
    if s == "PENDING" or (not s and flags & {"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING"}):
        if record.restarts or flags & {"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}:
            return (JobState.RESTARTING, reasons.RESTARTING,
                    f"requeued by Slurm (restart {record.restarts}){': ' + why if why else ''}{detail}")
        where = f" in partition {record.partition}" if record.partition else ""
        if not why:
            return JobState.PENDING, reasons.CREATED, f"submitted{where}, not scheduled yet"
        reason = reasons.UNSCHEDULABLE if why.startswith(_UNSCHEDULABLE) else why
        return JobState.QUEUED, reason, f"pending{where}: {why}{detail}"
    if s == "SUSPENDED":
        return JobState.QUEUED, reasons.SUSPENDED, f"suspended by Slurm{': ' + why if why else ''}"
    if s == "RUNNING" or not s:
        return JobState.RUNNING, reasons.RUNNING, ("completing" if "COMPLETING" in flags else "")
    if s == "COMPLETED":
        return JobState.SUCCEEDED, reasons.COMPLETED, ""
    if s == "CANCELLED":
        return JobState.STOPPED, reasons.STOPPED, f"cancelled{' ' + record.description if record.description else ''}"
    code = record.exit_code
    if s in ("TIMEOUT", "DEADLINE"):
        return JobState.FAILED, reasons.DEADLINE_EXCEEDED, (
            f"Slurm ended it at its time limit (max_running_time){_replicas_failed(folder)}")
    if s == "OUT_OF_MEMORY":
        return JobState.FAILED, reasons.OOM_KILLED, f"a task ran out of memory (resources.memory){_replicas_failed(folder)}"
    if s == "NODE_FAIL":
        return JobState.FAILED, reasons.NODE_FAIL, f"a node of the job failed{': ' + why if why else ''}"
    if s == "BOOT_FAIL":
        return JobState.FAILED, reasons.CANNOT_START, f"a node of the job failed to boot{detail}"
    if s == "PREEMPTED":
        return JobState.FAILED, reasons.PREEMPTED, "preempted (fault_tolerance.restart_on_preemption is off, or Slurm " \
                                             "does not requeue in this partition)"
    return JobState.FAILED, _failure_reason(folder.result), _failure_message(record, folder, code, record.signal)


def _failure_reason(result: JSONObject | None) -> str:
    if result is not None and result.get("requeued"):  # (the batch script's refusal to run again)
        return reasons.PREEMPTED
    if result is not None and result.get("retryable") is False:
        return reasons.NON_RETRYABLE_EXIT
    return reasons.RESTART_LIMIT_EXCEEDED


def _failure_message(record: JobRecord | None, folder: Folder, code: int | None, sig: int | None) -> str:
    parts = []
    if sig:
        parts.append(f"the batch script was killed by signal {sig}")
    elif code is not None:
        parts.append(f"exit code {code}")
    failed = _replicas_failed(folder).removeprefix("; ")
    if failed:
        parts.append(failed)
    elif folder.batch_tail:
        parts.append(folder.batch_tail)
    if record is not None and record.reason not in ("", "None", "NonZeroExitCode"):
        parts.append(f"Slurm: {record.reason}{' (' + record.description + ')' if record.description else ''}")
    return "; ".join(parts)


def _replicas_failed(folder: Folder) -> str:
    # the replicas that failed first: those Slurm stopped because of them (SIGTERM / SIGKILL) last
    failed = sorted((k for k, c in folder.exits.items() if c != 0),
                    key=lambda k: (folder.exits[k] in _STOPPED, replica_order(k)))
    if not failed:
        return ""
    shown = ", ".join(f"{k} exited with code {folder.exits[k]}" for k in failed[:3])
    more = f" (and {len(failed) - 3} more)" if len(failed) > 3 else ""
    return f"; {shown}{more}"


_STOPPED = (128 + 15, 128 + 9)


def _roles(roles: JSONObject, folder: Folder, state: JobState) -> dict[str, RoleCounts]:
    out: dict[str, RoleCounts] = {}
    for role, count in roles.items():
        n = int(count)
        codes = [folder.exits[f"{role}-{i}"] for i in range(n) if f"{role}-{i}" in folder.exits]
        ok = sum(1 for c in codes if c == 0)
        bad = len(codes) - ok
        active = max(0, n - ok - bad) if state in (JobState.RUNNING, JobState.RESTARTING) else 0
        out[role] = RoleCounts(replicas=n, active=active, succeeded=ok, failed=bad)
    return out


def replica_order(key: str) -> tuple[int, str, int]:
    """Replica keys (master-0, worker-2, batch) in rank order: roles by ROLE_ORDER, then index."""
    from dlc_airflow.jobtypes import ROLE_ORDER

    role, _, index = key.rpartition("-")
    if not index.isdigit():
        return (len(ROLE_ORDER) + 1, key, 0)
    rank = ROLE_ORDER.index(role) if role in ROLE_ORDER else len(ROLE_ORDER)
    return (rank, role, int(index))
