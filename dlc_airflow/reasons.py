"""Failure and state reasons every backend reports the same way (JobStatus.reason).

A script or a user reading a task log should not need to know which backend ran the job
to tell why it ended: each backend maps its own wording onto these names.
"""

from __future__ import annotations

# terminal
COMPLETED = "Completed"
RESTART_LIMIT_EXCEEDED = "RestartLimitExceeded"  # a replica failed more than max_restarts
NON_RETRYABLE_EXIT = "PodFailurePolicy"  # exit code not in retryable_exit_codes
DEADLINE_EXCEEDED = "DeadlineExceeded"  # ran longer than max_running_time
NOT_FOUND = "NotFound"  # the job's objects are gone
DELETED = "Deleted"  # deleted before it finished
STOPPED = "Stopped"
QUEUE_TIMEOUT = "QueueTimeout"  # not running within queue_timeout
TIMEOUT = "Timeout"  # not finished within timeout
CANNOT_START = "CannotStart"  # pods can never be created (FailedCreate, image pull...)
PREEMPTED = "Preempted"  # Kueue evicted the job for a higher-priority or reclaiming one
OOM_KILLED = "OOMKilled"  # a replica used more memory than resources.memory allows
NODE_FAIL = "NodeFail"  # a node of the job failed under it (Slurm NODE_FAIL)
FORBIDDEN = "Forbidden"  # the connection's identity may not follow the job (401/403, a refused Slurm token)
QUOTA_EXCEEDED = "QuotaExceeded"  # a ResourceQuota refused the job's objects at submit

# live
CREATED = "Created"
RUNNING = "Running"
RESTARTING = "Restarting"
SUSPENDED = "Suspended"  # waiting for admission (Kueue)
UNSCHEDULABLE = "Unschedulable"
