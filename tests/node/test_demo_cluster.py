"""`make demo-cluster`: the demo's chain of intervals in pods on the real node, each interval's
training resuming from the checkpoint the one before left on the PersistentVolume."""

from __future__ import annotations

import json
import subprocess
import sys

from dlc_airflow.k8s.kinds import POD


def test_the_demo_chain_runs_in_pods(cluster, real_node, tmp_path):
    out = tmp_path / "demo"
    done = subprocess.run([sys.executable, "-m", "dlc_airflow.demo", "--cluster", "--days", "2", "--output", str(out)],
                          capture_output=True, text=True, timeout=1200)
    log = (out / "demo.log").read_text()
    assert done.returncode == 0, "\n".join(line for line in log.splitlines() if "dlc_airflow" in line)[-8000:]
    assert "Each interval resumed from the one before: its accuracy at start equals the previous final accuracy (yes)" \
        in done.stdout
    rows = json.loads((out / "results.json").read_text())
    assert [r["resumed_from"] is None for r in rows] == [True, False]
    # the second interval started where the first ended, and its training's own epochs came from rank 0's pod log
    assert rows[1]["metrics"]["resumed_accuracy"] == rows[0]["metrics"]["accuracy"]
    assert all(len(r["epochs"]) == 12 for r in rows)
    lineage = json.loads((out / "lineage" / "retraining_digits_cluster" / "lineage.json").read_text())
    first, second = sorted(lineage["intervals"])
    assert lineage["intervals"][second]["resume_checkpoint"] == lineage["intervals"][first]["checkpoint"]
    # every job ran in pods on the real node
    pods = cluster.admin().list(POD, "dlc-demo")[0]
    assert len(pods) == 2 * 3 * 2 and {p["spec"]["nodeName"] for p in pods} == {"real-node"}
    assert all(p["status"]["phase"] == "Succeeded" for p in pods)
