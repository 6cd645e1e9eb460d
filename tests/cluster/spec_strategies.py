"""Hypothesis strategies: valid DLCJob specs (as the dicts users write) and single mistakes.

`valid_specs()` draws every job type with the roles it allows, per-role overrides, resources,
storage of every kind, code source, scheduling, fault tolerance, health check, checkpoint,
limits, labels and framework options, within what the spec documents as valid (`loose=True`
also puts arbitrary text into the free-form fields). Each of `MISTAKES` turns a valid spec
into an invalid one and names the words its error message must contain.

Test helper, not a test module.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from dlc_airflow import naming
from dlc_airflow.jobtypes import JOB_TYPES, JobType

TORCH = ("pytorch", "deepspeed", "megatron")
RESERVED_PATHS = {"/dev/shm", "/etc/mpi/hostfile", "/etc/deepspeed/hostfile", "/dev/termination-log"}

LOWER, UPPER, DIGITS = "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789"
ALNUM = LOWER + UPPER + DIGITS


def word(first: str, middle: str, max_size: int, end_strip: str = "") -> st.SearchStrategy[str]:
    """first char from `first`, then up to max_size from `middle`, trailing `end_strip` removed
    (built directly: regex strategies spend most of their time retrying)."""
    return st.builds(lambda a, m: (a + m).rstrip(end_strip), st.sampled_from(first), st.text(middle, max_size=max_size))


dns_label = word(LOWER, LOWER + DIGITS + "-", 14, "-")
custom_role = word(LOWER, LOWER + DIGITS + "-", 9, "-")
dns_subdomain = st.lists(dns_label, min_size=1, max_size=3).map(".".join)
nonempty_label_value = word(ALNUM, ALNUM + "-_.", 20, "-_.")
label_value = st.just("") | nonempty_label_value
label_name = nonempty_label_value
label_key = st.tuples(st.none() | dns_subdomain, label_name).map(lambda t: f"{t[0]}/{t[1]}" if t[0] else t[1]).filter(
    lambda k: not k.startswith("dlc-airflow/"))
env_name = word(UPPER + LOWER + "_", ALNUM + "_.-", 20)
text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=30)
path_segment = word(ALNUM + "_", ALNUM + "-_.", 10)
abs_path = st.lists(path_segment, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))
rel_path = st.lists(path_segment, min_size=1, max_size=3).map("/".join)
# a branch, tag or commit as git check-ref-format takes it (no shell metacharacters)
git_ref = st.lists(word(ALNUM + "_", ALNUM + "-_.", 12, "."), min_size=1, max_size=3).map("/".join).filter(
    lambda r: ".." not in r and not r.endswith(".lock"))
image = st.builds(lambda host, repo, tag: f"{host}/{repo}:{tag}", dns_subdomain,
                  st.lists(dns_label, min_size=1, max_size=3).map("/".join),
                  word(ALNUM + "_", ALNUM + "_.-", 15))


def quantity(units: tuple[str, ...]) -> st.SearchStrategy[str]:
    """A Kubernetes quantity: integer, decimal, milli or scientific, with a unit suffix."""
    number = st.one_of(st.integers(0, 10**6).map(str),
                       st.tuples(st.integers(0, 999), st.integers(0, 999)).map(lambda t: f"{t[0]}.{t[1]}"),
                       st.integers(1, 9).map(lambda n: f"{n}e3"))
    return st.one_of(number, st.tuples(st.integers(1, 10**4), st.sampled_from(units)).map(lambda t: f"{t[0]}{t[1]}"))


cpu = st.one_of(quantity(("m",)), st.integers(1, 96).map(str))
memory = quantity(("Ki", "Mi", "Gi", "Ti", "k", "M", "G"))


@st.composite
def resources(draw) -> dict:
    out: dict = {}
    if draw(st.booleans()):
        out["cpu"] = draw(cpu)
    if draw(st.booleans()):
        out["memory"] = draw(memory)
    gpu = draw(st.integers(0, 8))
    if gpu:
        out["gpu"] = gpu
        if draw(st.booleans()):
            out["gpu_type"] = draw(st.sampled_from(["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"])
                                   | nonempty_label_value)
    if draw(st.booleans()):
        out["shared_memory"] = draw(memory)
    if draw(st.booleans()):
        out["rdma"] = draw(st.integers(1, 4))
    if draw(st.booleans()):
        out["ephemeral_storage"] = draw(memory)
    return out


def either(draw, strict: st.SearchStrategy, loose: bool) -> str:
    """A well-formed value, or (loose) any text half of the time."""
    return draw(text) if loose and draw(st.booleans()) else draw(strict)


def _mount(draw, kind: str, path: str, loose: bool) -> dict:
    mount: dict = {"type": kind, "mount_path": path}
    if draw(st.booleans()):
        mount["read_only"] = True
    if draw(st.booleans()):
        mount["sub_path"] = either(draw, rel_path, loose)
    if kind == "pvc":
        mount["claim_name"] = either(draw, dns_subdomain, loose)
    elif kind == "nfs":
        mount.update(server=either(draw, dns_subdomain, loose), path=either(draw, abs_path, loose))
    elif kind == "host_path":
        mount["path"] = either(draw, abs_path | rel_path, loose)
    elif kind == "csi":
        mount["driver"] = either(draw, dns_subdomain, loose)
        mount["volume_attributes"] = draw(st.dictionaries(text if loose else label_name, text, max_size=3))
        if draw(st.booleans()):
            mount["secret_name"] = either(draw, dns_subdomain, loose)
    elif kind in ("config_map", "secret"):
        mount["name"] = either(draw, dns_subdomain, loose)
    elif kind == "empty_dir":
        if draw(st.booleans()):
            mount["size_limit"] = draw(memory)
        mount["memory"] = draw(st.booleans())
    return mount


@st.composite
def storage(draw, taken: set[str], loose: bool = False) -> list[dict]:
    paths = abs_path | text.map(lambda t: "/" + t) if loose else abs_path
    chosen = draw(st.lists(paths.filter(lambda p: p not in taken), max_size=5, unique=True))
    kinds = ("pvc", "nfs", "host_path", "csi", "config_map", "secret", "empty_dir")
    return [_mount(draw, draw(st.sampled_from(kinds)), p, loose) for p in chosen]


@st.composite
def toleration(draw) -> dict:
    tol: dict = {}
    operator = draw(st.sampled_from(["Equal", "Exists"]))
    if operator == "Equal" or draw(st.booleans()):
        tol["key"] = draw(label_key)
    tol["operator"] = operator
    if operator == "Equal" and draw(st.booleans()):
        tol["value"] = draw(nonempty_label_value)
    effect = draw(st.sampled_from(["", "NoSchedule", "PreferNoSchedule", "NoExecute"]))
    if effect:
        tol["effect"] = effect
    if effect == "NoExecute" and draw(st.booleans()):
        tol["tolerationSeconds"] = draw(st.integers(0, 3600))
    return tol


@st.composite
def scheduling(draw) -> dict:
    out: dict = {}
    for key in ("queue", "priority_class", "service_account"):
        if draw(st.booleans()):
            out[key] = draw(dns_subdomain.filter(lambda s: len(s) <= 63))
    if draw(st.booleans()):
        out["node_selector"] = draw(st.dictionaries(label_key, label_value, max_size=3))
    if draw(st.booleans()):
        out["tolerations"] = draw(st.lists(toleration(), max_size=3))
    out["spot"] = draw(st.sampled_from(["none", "prefer", "require"]))
    nodes = draw(st.lists(nonempty_label_value, max_size=6, unique=True))
    split = draw(st.integers(0, len(nodes)))
    out["include_nodes"], out["exclude_nodes"] = nodes[:split], nodes[split:]
    return out


def _role_names(job_type: str, draw) -> dict[str, int]:
    info = JOB_TYPES[JobType(job_type)]
    replicas = st.integers(1, 4) | st.sampled_from([8, 64])
    if info.roles is None:  # custom: one role of any name
        return {draw(custom_role): draw(replicas | st.just(100_000))}
    while True:
        chosen = {r: draw(st.integers(1, most) if most else replicas)
                  for r, most in info.roles.items() if draw(st.booleans())}
        if job_type == "batch" and "worker" in chosen and draw(st.booleans()):
            chosen["worker"] = draw(st.sampled_from([1000, 100_000]))
        if all(r in chosen for r in info.required_roles) and (
                not info.one_of_roles or any(r in chosen for r in info.one_of_roles)):
            return chosen


@st.composite
def role_spec(draw, job_type: str, role: str, replicas: int, same_image: bool = False) -> dict | int:
    if not draw(st.booleans()):
        return replicas
    spec: dict = {"replicas": replicas}
    if draw(st.booleans()):
        spec["resources"] = draw(resources())
    if not same_image and draw(st.booleans()):
        spec["image"] = draw(image)
    # KubeRay starts Ray workers itself: a worker command is refused (tested elsewhere)
    if not (job_type == "ray" and role == "worker") and draw(st.booleans()):
        if draw(st.booleans()):
            spec["command"] = draw(st.lists(text, min_size=1, max_size=4))
        else:
            spec["shell"] = draw(text)
    if draw(st.booleans()):
        spec["env"] = draw(st.dictionaries(env_name, text, max_size=3))
    return spec


@st.composite
def valid_specs(draw, loose: bool = False) -> dict:
    """A spec dict the validator must accept and every backend that runs it must render.

    loose=True puts arbitrary text into the free-form fields (names of claims, config maps
    and secrets, paths, image, labels, env names, checkpoint and code locations): the
    validator may refuse such a spec, but whatever it accepts the API server must accept too.
    """
    # A quarter of the specs have the shape Trainer v2 runs (identical workers, nothing it
    # cannot express), or the trainer backend would refuse nearly every drawn spec.
    trainer_shape = draw(st.integers(0, 3)) == 0
    job_type = draw(st.sampled_from(["pytorch", "deepspeed", "megatron", "mpi"] if trainer_shape
                                    else [t.value for t in JobType]))
    spec: dict = {"type": job_type, "image": either(draw, image, loose)}
    if draw(st.booleans()):
        spec["command"] = draw(st.lists(text, min_size=1, max_size=5))
    else:
        spec["shell"] = draw(text.filter(str.strip))
    roles = _role_names(job_type, draw)
    if trainer_shape:
        workers = roles.get("worker", 2)
        roles = {"launcher": 1, "worker": workers} if job_type == "mpi" else {"worker": workers}
    spec["roles"] = {r: draw(role_spec(job_type, r, n, same_image=trainer_shape)) for r, n in roles.items()}
    if draw(st.booleans()):
        spec["env"] = draw(st.dictionaries(text if loose else env_name, text, max_size=4))
    if draw(st.booleans()):
        spec["resources"] = draw(resources())
    taken = set(RESERVED_PATHS)
    if not trainer_shape and draw(st.booleans()):
        code_path = draw(abs_path.filter(lambda p: p not in RESERVED_PATHS))
        taken.add(code_path)
        repo = st.builds(lambda h, r: f"https://{h}/{r}.git", dns_subdomain, dns_label)
        spec["code"] = {"repo": either(draw, repo, loose), "revision": either(draw, git_ref, loose),
                        "mount_path": code_path}
        if draw(st.booleans()):
            spec["code"]["secret_name"] = draw(dns_subdomain)
    spec["storage"] = draw(storage(taken, loose))
    spec["scheduling"] = draw(scheduling())
    if trainer_shape:
        spec["scheduling"].pop("priority_class", None)
    codes = [] if trainer_shape else draw(st.lists(st.integers(1, 255), max_size=5))
    spec["fault_tolerance"] = {"max_restarts": 0 if trainer_shape else draw(st.integers(1 if codes else 0, 10)),
                               "retryable_exit_codes": codes,
                               "restart_on_preemption": draw(st.booleans())}
    if not trainer_shape and draw(st.booleans()):
        spec["health_check"] = {"command": draw(st.lists(text, min_size=1, max_size=3))}
    if draw(st.booleans()):
        spec["checkpoint"] = draw(st.sampled_from([
            {"uri": "file:///ckpt/run"},
            {"uri": "oss://bucket/ckpt", "path": "/mnt/ckpt", "resume_from": "latest", "keep_last": 5},
            {"uri": "s3://bucket/prefix", "path": "/ckpt"},
        ]))
        if loose:
            spec["checkpoint"].update(uri=draw(text), path=draw(text), resume_from=draw(text))
    if draw(st.booleans()):
        spec["max_running_time"] = draw(st.integers(1, 10**7) | st.sampled_from(["90s", "30m", "2h", "1d12h"]))
    if draw(st.booleans()):
        spec["ttl_after_finished"] = draw(st.integers(1, 2**31 - 1) | st.sampled_from(["1h", "7d"]))
    if draw(st.booleans()):
        spec["labels"] = draw(st.dictionaries(text if loose else label_key, text if loose else label_value, max_size=4))
    if draw(st.booleans()):
        spec["annotations"] = draw(st.dictionaries(text if loose else label_key, text, max_size=3))
    if draw(st.booleans()):
        spec["working_dir"] = either(draw, abs_path, loose)
    if job_type in TORCH:
        spec["nproc_per_node"] = draw(st.integers(1, 8))
        workers = roles.get("worker")
        if workers and not trainer_shape and draw(st.booleans()):
            low = draw(st.integers(1, workers))
            spec["elastic"] = {"min_replicas": low, "max_replicas": draw(st.integers(workers, workers + 8)),
                               "max_restarts": draw(st.integers(0, 5))}
    if job_type in ("deepspeed", "megatron"):
        spec["launcher"] = draw(st.sampled_from(["torchrun", "mpi"]))
    if draw(st.booleans()):
        spec["port"] = draw(st.integers(1, 65535))
    if draw(st.booleans()):
        spec["slots_per_worker"] = draw(st.integers(1, 16))
    return spec


@st.composite
def task_names(draw) -> str:
    """A job name as the operator derives it from any Airflow ids."""
    identity = naming.TaskIdentity(draw(text.filter(bool)), draw(text.filter(bool)), draw(text.filter(bool)),
                                   draw(st.integers(-1, 10**6)), draw(st.integers(1, 20)))
    return naming.job_name(draw(text), identity, draw(st.integers(1, 99)))


# -- single mistakes ---------------------------------------------------------------------------------
# Each takes a valid spec and a draw function, returns the broken spec and the words the error
# message must contain (the field it names).

Mistake = Callable[[dict, Callable], tuple[dict, list[str]]]


def _first_role(spec: dict) -> str:
    return next(iter(spec["roles"]))


def _set_role(spec: dict, role: str, **fields) -> None:
    current = spec["roles"][role]
    spec["roles"][role] = {**({"replicas": current} if isinstance(current, int) else current), **fields}


def bad_quantity(spec, draw):
    field = draw(st.sampled_from(["cpu", "memory", "shared_memory", "ephemeral_storage"]))
    bad = draw(st.sampled_from(["four", "16GB", "1.2.3", "-1", "1 Gi", "", "0x10", "Gi", "1e", "2.5 cores"]))
    spec.setdefault("resources", {})[field] = bad
    return spec, [field]


def fractional_gpu(spec, draw):
    value = draw(st.sampled_from([0.5, 1.5, 0.25, "0.5", "half"]))
    if draw(st.booleans()):
        spec.setdefault("resources", {})["gpu"] = value
    else:
        _set_role(spec, _first_role(spec), resources={"gpu": value})
    return spec, ["gpu"]


def unknown_role(spec, draw):
    info = JOB_TYPES[JobType(spec["type"])]
    if info.roles is None:
        bad = draw(st.sampled_from(["Trainer", "a_b", "x" * 11, "9lives"]))
    else:
        bad = draw(st.sampled_from(["chief", "ps", "launcher", "head", "master", "evaluator", "driver", "server"])
                   .filter(lambda r: r not in info.roles))
    spec["roles"][bad] = 1
    return spec, [f"roles.{bad}"]


def bad_replicas(spec, draw):
    role = _first_role(spec)
    _set_role(spec, role, replicas=draw(st.integers(-5, 0) | st.integers(100_001, 10**7)))
    return spec, ["replicas"]


def command_and_shell(spec, draw):
    spec["command"], spec["shell"] = ["python", "train.py"], "python train.py"
    return spec, ["command", "shell"]


def elastic_not_torch(spec, draw):
    spec["type"] = draw(st.sampled_from(["tensorflow", "xgboost", "batch", "custom", "mpi", "ray"]))
    spec["roles"] = dict(JOB_TYPES[JobType(spec["type"])].default_roles)
    for key in ("elastic", "nproc_per_node", "launcher"):
        spec.pop(key, None)
    spec["elastic"] = {"min_replicas": 1, "max_replicas": 2}
    return spec, ["elastic"]


def gpu_type_without_gpu(spec, draw):
    spec["resources"] = {**spec.get("resources", {}), "gpu": 0, "gpu_type": "NVIDIA-A100-SXM4-80GB"}
    return spec, ["gpu_type"]


def nodes_overlap(spec, draw):
    node = draw(nonempty_label_value)
    spec["scheduling"] = {**spec["scheduling"], "include_nodes": [node], "exclude_nodes": [node]}
    return spec, ["include_nodes", "exclude_nodes"]


def duplicate_mount_path(spec, draw):
    path = draw(abs_path.filter(lambda p: p not in RESERVED_PATHS))
    spec["storage"] = [{"type": "empty_dir", "mount_path": path},
                       {"type": "pvc", "claim_name": "d", "mount_path": path}]
    return spec, ["mount_path"]


def relative_mount_path(spec, draw):
    spec["storage"] = [{"type": "pvc", "claim_name": "d", "mount_path": draw(rel_path)}]
    return spec, ["mount_path"]


def bad_sub_path(spec, draw):
    sub = draw(st.sampled_from(["/abs", "a/../b", "..", "../up"]))
    spec["storage"] = [{"type": "pvc", "claim_name": "d", "mount_path": "/data", "sub_path": sub}]
    return spec, ["sub_path"]


def shm_clash(spec, draw):
    spec["resources"] = {**spec.get("resources", {}), "shared_memory": "1Gi"}
    spec["storage"] = [{"type": "empty_dir", "mount_path": "/dev/shm"}]
    return spec, ["mount_path", "shared_memory"]


def name_too_long(spec, draw):
    spec["name"] = draw(st.builds(lambda a, m: a + m, st.sampled_from(LOWER),
                                  st.text(LOWER + DIGITS, min_size=40, max_size=70)))
    return spec, ["name", "shorten"]


def bad_name(spec, draw):
    spec["name"] = draw(st.sampled_from(["Train", "1job", "job_x", "job-", "my job", "jöb"]))
    return spec, ["name"]


def bad_label_value(spec, draw):
    value = draw(st.sampled_from(["a b", "-x", "x-", "x" * 64, "ä", "a/b"]))
    spec["labels"] = {"team": value}
    return spec, ["labels", "team"]


def bad_label_key(spec, draw):
    key = draw(st.sampled_from(["bad key", "-x", "Example.com/x", "a/b/c", "x" * 64, "dlc-airflow/mine"]))
    spec["labels"] = {key: "v"}
    return spec, ["labels"]


def bad_annotation_key(spec, draw):
    spec["annotations"] = {draw(st.sampled_from(["bad key", "x" * 64, "a/b/c", "/x"])): "v"}
    return spec, ["annotation"]


def bad_env_name(spec, draw):
    spec["env"] = {draw(st.sampled_from(["1X", "A B", "A=B", "", "é"])): "v"}
    return spec, ["env"]


def bad_exit_code(spec, draw):
    code = draw(st.sampled_from([0, 256, -1, 1000]))
    spec["fault_tolerance"] = {**spec["fault_tolerance"], "retryable_exit_codes": [code]}
    return spec, ["retryable_exit_codes"]


def nproc_not_torch(spec, draw):
    if spec["type"] in TORCH:
        spec.update(type="batch", roles={"worker": 2})
        for key in ("elastic", "launcher"):
            spec.pop(key, None)
    spec["nproc_per_node"] = draw(st.integers(2, 8))
    return spec, ["nproc_per_node"]


def unknown_field(spec, draw):
    field = draw(st.sampled_from(["gpus", "replica", "volumes", "commands", "timeout"]))
    spec[field] = 1
    return spec, [field]


def missing_image(spec, draw):
    if draw(st.booleans()):
        spec.pop("image")
    else:
        spec["image"] = draw(st.sampled_from(["", "  ", "my image:1"]))
    return spec, ["image"]


def bad_duration(spec, draw):
    field = draw(st.sampled_from(["max_running_time", "ttl_after_finished"]))
    spec[field] = draw(st.sampled_from(["2 hours", "soon", "-5", 0, -3, "1w"]))
    return spec, [field]


def bad_scheduling_name(spec, draw):
    field = draw(st.sampled_from(["queue", "priority_class", "service_account"]))
    spec["scheduling"] = {**spec["scheduling"], field: draw(st.sampled_from(["Team_A", "a b", "x" * 64, "-a"]))}
    return spec, [field]


def bad_port(spec, draw):
    spec["port"] = draw(st.sampled_from([0, -1, 65536, 10**6]))
    return spec, ["port"]


def bad_toleration(spec, draw):
    tol = draw(st.sampled_from([{"key": "a", "operator": "Maybe"}, {"operator": "Equal", "value": "x"},
                                {"key": "a", "effect": "Sometimes"}, {"key": "a", "operator": "Exists", "value": "v"},
                                {"key": "a", "tolerationSeconds": 5, "effect": "NoSchedule"},
                                {"key": "a", "colour": "x"}]))
    spec["scheduling"] = {**spec["scheduling"], "tolerations": [tol]}
    return spec, ["tolerations"]


def bad_node_name(spec, draw):
    field = draw(st.sampled_from(["include_nodes", "exclude_nodes"]))
    spec["scheduling"] = {**spec["scheduling"], "include_nodes": [], "exclude_nodes": [],
                          field: [draw(st.sampled_from(["a b", "x" * 64, "-node"]))]}
    return spec, [field]


def missing_required_role(spec, draw):
    spec.update(type=draw(st.sampled_from(["mpi", "ray"])), roles={"worker": 2})
    for key in ("elastic", "launcher", "nproc_per_node"):
        spec.pop(key, None)
    return spec, ["roles"]


def elastic_out_of_range(spec, draw):
    spec.update(type="pytorch", roles={"worker": 6})
    spec.pop("launcher", None)
    spec["elastic"] = {"min_replicas": 1, "max_replicas": 4}
    return spec, ["elastic", "roles.worker.replicas"]


def nfs_relative_export(spec, draw):
    spec["storage"] = [{"type": "nfs", "server": "nas", "path": draw(rel_path), "mount_path": "/nas"}]
    return spec, ["path"]


def remote_checkpoint_without_path(spec, draw):
    spec["checkpoint"] = {"uri": draw(st.sampled_from(["s3://b/x", "oss://b/ckpt", "gs://b"]))}
    return spec, ["checkpoint"]


MISTAKES: list[Mistake] = [
    bad_quantity, fractional_gpu, unknown_role, bad_replicas, command_and_shell, elastic_not_torch,
    gpu_type_without_gpu, nodes_overlap, duplicate_mount_path, relative_mount_path, bad_sub_path, shm_clash,
    name_too_long, bad_name, bad_label_value, bad_label_key, bad_annotation_key, bad_env_name, bad_exit_code,
    nproc_not_torch, unknown_field, missing_image, bad_duration, bad_scheduling_name, bad_port, bad_toleration,
    bad_node_name, missing_required_role, elastic_out_of_range, nfs_relative_export, remote_checkpoint_without_path,
]


__all__ = ["MISTAKES", "task_names", "valid_specs"]
