"""The README's examples, run: a docs test.

The rule for ```python blocks: every block compiles, and every block is executed (as a
DAG file would be, `__name__ == "__main__"`), in a scratch folder, with no cluster configured
(no kubeconfig, no in-cluster env, no kubernetes_default connection: the backend a task
would choose is local) and a pipeline step's env set (for the `dlc_airflow.runtime`
examples). Every DAG a block makes must build and pass Airflow's own `validate()` and cycle
check: parse-time checks (the spec, backend refusals, the sensor's dependency) run for real.
No DAG is run (that is what tests/airflow does), so the blocks that name a cluster
(`backend="native"`, a `conn_id`) are built like the others. Blocks that need a store's
filesystem at parse time (an s3:// storage root: s3fs is not installed here) are compiled
only, by the named allow-list PARSE_ONLY. `dag.test(...)` is not run either: the test records
the call and checks the data interval it would run (Airflow's own timetable) against the
`[start, end)` written on that line.

The rule for ```bash blocks: every command is either a `dlc-airflow validate / render /
schema` command, run (in-process, from the repository, so against examples/specs/), or
matches the named allow-list SKIPPED below, which says why it cannot run here. A new command
in the README that is neither fails this test.

Also checked against the files they describe: the RBAC table (k8s/rbac/role.yaml), the kwok
labels and annotations (k8s/cluster/pod-stages.yaml, k8s/kwok-stages/), every extra of
pyproject.toml in the install section, and the user-facing help of `dlc-airflow` and
`scripts/k8s-local`.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import subprocess
import tomllib
from contextlib import redirect_stdout
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()

# Commands of the README's ```bash blocks that cannot run in a unit test: the start of the
# command (after shlex) -> why.
SKIPPED = {
    "pip install": "installs packages (the constraints check is in the Makefile's install targets)",
    "make": "builds the venv, the control plane or runs the whole suite",
    "airflow connections add": "writes a connection into an Airflow metadata database",
    "kubectl": "needs a Kubernetes cluster",
    "scripts/k8s-local": "starts or talks to the local control plane (not in unit tests on 2 cores)",
    "scripts/slurm-local": "starts or talks to the local Slurm (needs root and Debian's packages)",
    "eval": "exports a running cluster's settings",
    "export AIRFLOW_CONN_": "sets a connection for the shell that runs Airflow",
    "export AIRFLOW__DLC_AIRFLOW__": "sets the admin's policy for the shell that runs Airflow",
    ".venv/bin/pytest": "runs other test suites",
    "DLC_TEST_SLURM_VERSION=24.11": "runs the slurm tests on the local Slurm 24.11",
    "sinfo": "a Slurm client command: needs a Slurm cluster",
    "squeue": "a Slurm client command: needs a Slurm cluster",
    "dlc-airflow jobs": "acts on jobs that exist (tests/local, tests/cluster run it)",
    "dlc-airflow sanity-check": "runs inside a job's container",
}
RUN = ("validate", "render", "schema")

# ```python blocks that are compiled but not executed: a text the block contains -> why.
PARSE_ONLY = {
    'storage_root="s3://': "an s3:// storage root is opened at parse time: needs s3fs (or the Amazon "
                           "provider), not installed here",
}

# what a pipeline step's env holds (dlc_airflow.runtime.pipeline reads it)
STEP_ENV = {
    "DLC_INTERVAL_START": "2026-01-01T00:00:00+00:00", "DLC_INTERVAL_END": "2026-01-02T00:00:00+00:00",
    "DLC_INTERVAL_KEY": "20260101T000000Z-20260102T000000Z", "DLC_LINEAGE": "digits",
    "DLC_STORAGE_URI": "s3://ml/lineages", "DLC_STORAGE_DIR": "/mnt/ml",
    "DLC_DATA_URI": "s3://ml/lineages/digits/data/k", "DLC_OUTPUT_URI": "s3://ml/lineages/digits/predictions/k",
    "DLC_MODEL_URI": "s3://ml/lineages/digits/checkpoints/j/step-000003",
}


@dataclass(frozen=True)
class Snippet:
    line: int  # where it starts in README.md
    text: str
    words: tuple[str, ...] = ()  # a shell command's words (shlex)

    def __str__(self) -> str:
        return f"README.md:{self.line}"


def blocks(language: str) -> list[Snippet]:
    found = []
    for match in re.finditer(rf"^```{language}\n(.*?)^```$", README, re.S | re.M):
        found.append(Snippet(README.count("\n", 0, match.start()) + 2, match.group(1)))
    return found


def commands(block: Snippet) -> list[Snippet]:
    """The block's shell commands: continued lines joined, quoted newlines kept, comments
    and blank lines dropped, `a; b` and `a && b` as two commands."""
    out: list[Snippet] = []
    pending, start = "", 0
    for offset, line in enumerate(block.text.splitlines()):
        if not pending:
            start = block.line + offset
        pending += line + "\n"
        if pending.rstrip().endswith("\\"):
            continue
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:  # a quote spans lines
            continue
        command: list[str] = []
        for word in [*words, ";"]:
            if word in (";", "&&", "||") or word.endswith(";"):
                if word.endswith(";") and word != ";":
                    command.append(word[:-1])
                if command:
                    out.append(Snippet(start, " ".join(command), tuple(command)))
                command = []
            else:
                command.append(word)
        pending = ""
    assert not pending.strip(), f"{block}: unfinished command {pending!r}"
    return out


PYTHON = blocks("python")
BASH = [command for block in blocks("bash") for command in commands(block)]


def skip_reason(command: str) -> str | None:
    for prefix, reason in SKIPPED.items():
        if command == prefix or command.startswith(prefix if prefix.endswith("_") else prefix + " "):
            return reason
    return None


def test_the_readme_has_the_snippets_this_test_expects():
    assert len(PYTHON) >= 6 and len(BASH) >= 10
    runnable = [c for c in BASH if c.words[0] == "dlc-airflow" and c.words[1] in RUN]
    assert {c.words[1] for c in runnable} == set(RUN)
    for text in PARSE_ONLY:
        assert sum(text in s.text for s in PYTHON) == 1, f"PARSE_ONLY {text!r} names no single block"


# -- python ----------------------------------------------------------------------------------
@pytest.fixture
def no_cluster(monkeypatch, tmp_path):
    """No cluster configured, a pipeline step's env, a scratch folder as the working directory."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "AIRFLOW_CONN_KUBERNETES_DEFAULT"):
        monkeypatch.delenv(name, raising=False)
    for key, value in STEP_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("DLC_OUTPUT_FILE", str(tmp_path / "outputs.json"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def dags_of(namespace: dict) -> list:
    from airflow.sdk import DAG

    found: dict[int, DAG] = {}
    for value in namespace.values():
        dag = value if isinstance(value, DAG) else getattr(value, "_dag", None)
        if isinstance(dag, DAG):
            found[id(dag)] = dag
    return list(found.values())


@pytest.mark.parametrize("snippet", PYTHON, ids=str)
def test_python_snippet_runs_and_builds_its_dags(snippet, no_cluster, monkeypatch):
    from airflow.sdk import DAG

    from tests.support.airflow_versions import core_timetable

    calls: list[tuple[DAG, datetime]] = []
    monkeypatch.setattr(DAG, "test", lambda self, **kw: calls.append((self, kw["logical_date"])))
    # the block's own lines keep their README line numbers in a traceback
    code = compile("\n" * (snippet.line - 1) + snippet.text, "README.md", "exec")
    for text, reason in PARSE_ONLY.items():
        if text in snippet.text:
            pytest.skip(f"compiled only: {reason}")
    namespace: dict = {"__name__": "__main__"}
    exec(code, namespace)

    dags = dags_of(namespace)
    if re.search(r"\bDAG\(|_dag\(", snippet.text):
        assert dags, f"{snippet}: the block builds no DAG"
    for dag in dags:
        dag.validate()
        dag.check_cycle()
        assert dag.task_dict, f"{snippet}: DAG {dag.dag_id} has no tasks"

    written = re.findall(r"dag\.test\(.*\[(\d{4}-\d\d-\d\d), (\d{4}-\d\d-\d\d)\)", snippet.text)
    assert len(calls) == len(written), f"{snippet}: every dag.test(...) line says which [start, end) it runs"
    for (dag, logical_date), (start, end) in zip(calls, written, strict=True):
        interval = core_timetable(dag.timetable).infer_manual_data_interval(run_after=logical_date)
        assert (interval.start, interval.end) == (datetime.fromisoformat(start).replace(tzinfo=UTC),
                                                  datetime.fromisoformat(end).replace(tzinfo=UTC))


def test_the_sensor_example_needs_no_explicit_dependency(no_cluster):
    (snippet,) = [s for s in PYTHON if "task_id_of_job=" in s.text]
    namespace: dict = {}
    exec(compile(snippet.text, str(snippet), "exec"), namespace)
    (dag,) = dags_of(namespace)
    dag.validate()
    assert namespace["wait"].upstream_task_ids == {"submit"}


# -- bash ------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", BASH, ids=lambda c: f"{c}:{c.text[:40]}")
def test_bash_command_runs_or_is_skipped_by_name(command, monkeypatch, tmp_path):
    reason = skip_reason(command.text)
    if reason:
        pytest.skip(f"{command.text[:60]}: {reason}")
    words = list(command.words)
    assert words[0] == "dlc-airflow" and words[1] in RUN, (
        f"{command}: `{command.text}` is neither a dlc-airflow {'/'.join(RUN)} command nor in SKIPPED "
        "(add it there with the reason it cannot run here)")
    assert "|" not in words, f"{command}: pipes are not run here"
    target = None
    if ">" in words:
        at = words.index(">")
        words, target = words[:at], words[at + 1]
    from dlc_airflow.cli import main

    monkeypatch.chdir(REPO)  # the README's paths are the repository's (examples/specs/)
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(words[1:])
    assert code == 0, f"{command}: exit {code}"
    text = out.getvalue()
    if words[1] == "schema":
        assert json.loads(text)["title"]
    elif words[1] == "render":  # YAML documents of what the backend submits (objects, a script, a request)
        documents = list(yaml.safe_load_all(text))
        assert documents and all(isinstance(doc, dict) and doc for doc in documents)
    else:
        assert ": valid " in text
    if target:
        (tmp_path / Path(target).name).write_text(text)


# -- what the README says about the repository's files -----------------------------------------
def test_the_rbac_table_is_role_yaml():
    role = yaml.safe_load((REPO / "k8s/rbac/role.yaml").read_text())
    assert role["kind"] == "ClusterRole" and role["metadata"]["name"] == "dlc-airflow-job-runner"
    assert "**ClusterRole**\n`dlc-airflow-job-runner`" in README and "**per namespace**" in README
    in_file = {(frozenset(r["apiGroups"]), frozenset(r["resources"]), frozenset(r["verbs"])) for r in role["rules"]}
    table = README.split("| API group | resources | verbs |", 1)[1].split("\n\n", 1)[0]
    in_readme = set()
    for row in table.strip().splitlines()[1:]:
        groups, resources, verbs = (cell.strip() for cell in row.strip("|").split("|"))
        groups = {"" if g.startswith('`""`') else g.strip("`") for g in re.findall(r'`[^`]*`(?: \(core\))?', groups)}
        verbs = re.sub(r"\(.*\)", "", verbs)
        in_readme.add((frozenset(groups), frozenset(x.strip() for x in resources.split(",")),
                       frozenset(x.strip() for x in verbs.split(",") if x.strip())))
    assert in_readme == in_file


def test_the_kwok_labels_and_annotations_are_the_stages():
    stages = (REPO / "k8s/cluster/pod-stages.yaml").read_text() + "".join(
        p.read_text() for p in sorted((REPO / "k8s/kwok-stages").glob("*.yaml")))
    named = set(re.findall(r"[a-z-]+\.stage\.kwok\.x-k8s\.io(?:/[a-z-]+)?", README))
    assert {"pod-complete.stage.kwok.x-k8s.io/delay", "pod-complete.stage.kwok.x-k8s.io/message",
            "pod-container-running-failed.stage.kwok.x-k8s.io", "pod-preempt.stage.kwok.x-k8s.io"} <= named
    for key in named:
        # an annotation is read by its full name; a bare name is a label or annotations' prefix
        assert (f'"{key}"' if "/" in key else f'"{key}') in stages, key


def test_the_install_section_names_every_extra_and_the_airflow_floor():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    install = README.split("## Install into your Airflow", 1)[1].split("\n## ", 1)[0]
    assert README.index("## Install into your Airflow") < README.index("make demo")
    for extra in project["optional-dependencies"]:
        assert f"`[{extra}]`" in install, f"the install section does not say what [{extra}] brings"
    (floor,) = [d for d in project["optional-dependencies"]["airflow"] if d.startswith("apache-airflow>=")]
    assert f"`{floor}`" in install
    # an install line with its constraints file for each tested Airflow (make test and make test-compat)
    compat = re.search(r"^VERSIONS=\(([^)]*)\)", (REPO / "scripts/test-compat").read_text(), re.M)
    assert compat, "scripts/test-compat names its Airflow versions"
    for name in ["constraints-py3.11.txt", *(f"constraints-{v}-py3.11.txt" for v in compat[1].split())]:
        assert f"constraints/{name}" in install and (REPO / "constraints" / name).exists(), name


# -- user-facing help ------------------------------------------------------------------------
def test_dlc_airflow_help_is_written_for_users(capsys):
    from dlc_airflow.cli import build_parser, main

    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "wires argparse" not in text and "this file" not in text
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in commands:
        assert re.search(rf"^\s+{re.escape(name)}\b", text, re.M), f"{name} is not listed"
    assert "examples:" in text and "dlc-airflow validate examples/specs/" in text


def k8s_local(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "scripts/k8s-local"), *args], capture_output=True, text=True,
                          timeout=30)


@pytest.mark.parametrize("flag", ["--help", "-h", "help"])
def test_k8s_local_help_is_a_usage_text(flag):
    done = k8s_local(flag)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("usage: scripts/k8s-local COMMAND")
    for command in ("up", "down", "stop, start", "status", "env", "kubectl", "restart-apiserver"):
        assert re.search(rf"^  {command}\b", done.stdout, re.M), command
    assert "set -euo" not in done.stdout and "#" not in done.stdout  # no script source
    assert "create rolebinding dlc-airflow" in done.stdout  # `up` binds nothing: how to


@pytest.mark.parametrize("args", [("bogus",), ()], ids=["unknown", "none"])
def test_k8s_local_unknown_command_is_usage_on_stderr_and_exit_2(args):
    done = k8s_local(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("usage: scripts/k8s-local COMMAND")
    if args:
        assert done.stderr.rstrip().endswith("unknown command bogus")
