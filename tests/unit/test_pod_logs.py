"""Lines of `timestamps=true` pod logs: a line of the job's is (timestamp, text); what the
kubelet writes into the stream when it cannot read a container's log is neither a line of
the job's nor a position to resume from (found on the real node while containerd restarted)."""

from __future__ import annotations

import pytest

from dlc_airflow.k8s.pods import stamped_line


@pytest.mark.parametrize("raw, expected", [
    ("2026-12-06T14:40:53.563437123Z started on worker-0", ("2026-12-06T14:40:53.563437123Z", "started on worker-0")),
    ("2026-12-06T14:40:53Z ", ("2026-12-06T14:40:53Z", "")),
    ("2026-12-06T14:40:53.5+02:00 epoch 1 loss 0.5", ("2026-12-06T14:40:53.5+02:00", "epoch 1 loss 0.5")),
])
def test_a_line_of_the_job_keeps_its_timestamp(raw, expected):
    assert stamped_line(raw) == expected


@pytest.mark.parametrize("raw", [
    "unable to retrieve container logs for containerd://0ea0bf138f009c3fb84e0ca5673c53747edf6584513306afa4f1f840ad1295c6",
    "failed to try resolving symlinks in path \"/var/log/pods/x/main/0.log\": lstat: no such file or directory",
    "",
    "2026-12-06 14:40:53 not RFC 3339",
])
def test_what_the_kubelet_says_instead_is_no_line(raw):
    assert stamped_line(raw) is None
