"""The "DLC jobs" pages in a real headless browser (Debian's chromium through selenium) on a real
Airflow api-server, over the runs of the demo (real PyTorch DDP on the local backend): the run
page lists its jobs, the training job's report has its timeline (a bar per worker), its metric
curves (the loss and accuracy its code logged) and no restarts, and the lineage page has one
row per interval with what it resumed from, its checkpoint, its accuracy and its promotion -
the values of the lineage manifest. Pages need a login (Airflow's own auth); the task's extra
links point at the report. Screenshots go to test-artifacts/ui/ (DLC_TEST_ARTIFACTS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.support.airflow_stack import AirflowStack
from tests.support.browser import chrome, login, missing, token

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "retraining_digits"
DAYS = 2
PASSWORD = "dlc-ui-test"
ARTIFACTS = Path(os.environ.get("DLC_TEST_ARTIFACTS", REPO / "test-artifacts")) / "ui"


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    why = missing()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    out = tmp_path_factory.mktemp("demo")
    demo = subprocess.run([sys.executable, "-m", "dlc_airflow.demo", "--output", str(out), "--days", str(DAYS)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    passwords = out / "passwords.json"
    passwords.write_text(json.dumps({"admin": PASSWORD}))
    env = {"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords)}
    with AirflowStack(out / "airflow", REPO / "dags", components=("api-server",), env=env) as stack:
        base = f"http://127.0.0.1:{stack.port}"
        runs = stack.query("SELECT run_id FROM dag_run WHERE dag_id = ? ORDER BY logical_date", DAG_ID)
        manifest = json.loads((out / "lineage" / DAG_ID / "lineage.json").read_text())
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        with chrome() as driver:
            yield base, driver, [r["run_id"] for r in runs], manifest


def get(base: str, path: str, jwt: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {jwt}"} if jwt else {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_pages_need_a_login(ui):
    base, _, runs, _ = ui
    code, body = get(base, f"/dlc/runs/{DAG_ID}/{quote(runs[0], safe='')}")
    assert code == 401 and "Not authenticated" in body
    code, _ = get(base, f"/dlc/runs/{DAG_ID}/{quote(runs[0], safe='')}", "not-a-token")
    assert code in (401, 403)


def test_run_page_and_job_report(ui):
    from selenium.webdriver.common.by import By

    base, driver, runs, manifest = ui
    login(driver, base, "admin", PASSWORD)
    run_id = runs[-1]
    driver.get(f"{base}/dlc/runs/{DAG_ID}/{quote(run_id, safe='')}")
    text = driver.find_element(By.TAG_NAME, "body").text
    for task in ("retrain.preprocess", "retrain.train", "retrain.inference"):
        assert task in text, text[:2000]
    assert text.count("SUCCEEDED") >= 3
    driver.save_screenshot(str(ARTIFACTS / "run.png"))

    (train,) = [r for r in driver.find_elements(By.CSS_SELECTOR, "#jobs tbody tr")
                if r.find_element(By.TAG_NAME, "td").text == "retrain.train"]
    assert train.get_attribute("data-state") == "SUCCEEDED"
    train.find_element(By.TAG_NAME, "a").click()
    summary = driver.find_element(By.ID, "summary").text
    assert "SUCCEEDED" in summary and "retrain.train" in summary
    # the timeline: one bar per DDP worker, both succeeded
    bars = driver.find_elements(By.CSS_SELECTOR, "#timeline rect.bar")
    assert sorted(b.get_attribute("data-replica") for b in bars) == ["worker-0", "worker-1"]
    assert {b.get_attribute("data-state") for b in bars} == {"Succeeded"}
    assert all(float(b.get_attribute("width")) > 0 for b in bars)
    # the metric curves rank 0 logged, per step: loss and accuracy
    charts = {c.get_attribute("data-metric"): int(c.get_attribute("data-points"))
              for c in driver.find_elements(By.CSS_SELECTOR, "#metrics svg.chart")}
    assert charts.get("loss", 0) >= 2 and charts.get("accuracy", 0) >= 2, charts
    final = driver.find_element(By.ID, "metrics").text
    interval = sorted(manifest["intervals"])[-1]
    accuracy = manifest["intervals"][interval]["metrics"]["accuracy"]
    assert f"{accuracy:.3f}"[:4] in final, (accuracy, final)  # the value the job reported
    assert driver.find_element(By.CSS_SELECTOR, "#restarts table").get_attribute("data-count") == "0"
    driver.save_screenshot(str(ARTIFACTS / "job-report.png"))


def test_lineage_table_and_chart(ui):
    from selenium.webdriver.common.by import By

    base, driver, _, manifest = ui
    login(driver, base, "admin", PASSWORD)
    driver.get(f"{base}/dlc/lineage/{DAG_ID}")
    rows = driver.find_elements(By.CSS_SELECTOR, "#lineage tr[data-interval]")
    keys = sorted(manifest["intervals"])
    assert [r.get_attribute("data-interval") for r in rows] == keys
    for row, key in zip(rows, keys, strict=True):
        entry = manifest["intervals"][key]
        cells = row.text
        assert entry["status"] in cells and f"{entry['metrics']['accuracy']:.3f}"[:4] in cells, cells
        assert ("yes" in cells) == any(p["interval"] == key for p in manifest["promotions"])
        if entry["resumed_from"]:
            assert entry["resumed_from"][:8] in cells
    chart = driver.find_element(By.ID, "lineage-chart")
    assert chart.get_attribute("data-metric") == "accuracy"
    assert len(driver.find_elements(By.CSS_SELECTOR, "#lineage-chart circle.promoted")) == len(manifest["promotions"])
    driver.save_screenshot(str(ARTIFACTS / "lineage.png"))


def test_the_airflow_ui_has_the_tab_and_the_task_has_its_links(ui):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    base, driver, runs, _ = ui
    jwt = token(base, "admin", PASSWORD)
    code, body = get(base, "/api/v2/plugins/importErrors", jwt)
    assert code == 200 and json.loads(body)["total_entries"] == 0, body  # our plugin loaded once, cleanly
    code, body = get(base, "/api/v2/plugins", jwt)
    assert [p["name"] for p in json.loads(body)["plugins"]].count("dlc_airflow") == 1, body
    run = quote(runs[-1], safe="")
    code, body = get(base, f"/api/v2/dags/{DAG_ID}/dagRuns/{run}/taskInstances/retrain.train/links", jwt)
    assert code == 200, body
    links = json.loads(body)["extra_links"]
    assert links["DLC job report"].endswith(f"/dlc/jobs/{DAG_ID}/{run}/retrain.train"), links
    assert links["Local job folder"].startswith("file://") and "Job in dashboard" in links
    # the plugin's tab on the DAG run page of Airflow's own UI shows our page in its frame
    login(driver, base, "admin", PASSWORD)
    driver.get(f"{base}/dags/{DAG_ID}/runs/{run}/plugin/dlc-run-jobs")
    frame = WebDriverWait(driver, 60).until(expected_conditions.presence_of_element_located((By.TAG_NAME, "iframe")))
    assert f"dlc/runs/{DAG_ID}/" in frame.get_attribute("src")
    driver.switch_to.frame(frame)
    WebDriverWait(driver, 60).until(lambda d: "retrain.train" in d.find_element(By.TAG_NAME, "body").text)
    driver.switch_to.default_content()
    driver.save_screenshot(str(ARTIFACTS / "airflow-tab.png"))
