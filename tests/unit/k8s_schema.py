"""Offline schema checks for rendered manifests (test helper, not a test module).

Built-in kinds (Job, Service, ConfigMap, Secret) are checked against the official Python client's
models, which are generated from the Kubernetes OpenAPI spec: every key must be a field of
the model, nested models recursively, and required fields present. Custom resources are
checked against the structural openAPIV3Schema of the CRDs in the repository's
k8s/crds (copied verbatim from upstream): unknown fields, types, enums, required, bounds and
patterns. CEL rules (x-kubernetes-validations) and webhooks are not evaluated here; the
cluster tests submit the same manifests to a real API server.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CRD_DIRS = [REPO / "k8s" / "crds", Path("/work/shared/k8s/crds")]

CRD_FILES = {
    ("kubeflow.org/v1", "PyTorchJob"): "kubeflow-v1/kubeflow.org_pytorchjobs.yaml",
    ("kubeflow.org/v1", "TFJob"): "kubeflow-v1/kubeflow.org_tfjobs.yaml",
    ("kubeflow.org/v1", "MPIJob"): "kubeflow-v1/kubeflow.org_mpijobs.yaml",
    ("kubeflow.org/v1", "XGBoostJob"): "kubeflow-v1/kubeflow.org_xgboostjobs.yaml",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "kubeflow-trainer-v2/trainer.kubeflow.org_trainjobs.yaml",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "jobset/jobset.x-k8s.io_jobsets.yaml",
    ("ray.io/v1", "RayJob"): "kuberay/ray.io_rayjobs.yaml",
}
CORE_MODELS = {("batch/v1", "Job"): "V1Job", ("v1", "Service"): "V1Service", ("v1", "ConfigMap"): "V1ConfigMap",
               ("v1", "Secret"): "V1Secret"}


def crd_path(rel: str) -> Path:
    for root in CRD_DIRS:
        if (root / rel).exists():
            return root / rel
    raise FileNotFoundError(rel)


@functools.cache
def crd_schema(api_version: str, kind: str) -> dict:
    doc = yaml.load(crd_path(CRD_FILES[(api_version, kind)]).read_text(), Loader=yaml.CSafeLoader)
    version = api_version.rpartition("/")[2]
    for v in doc["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise KeyError(api_version)


def validate(obj: dict) -> list[str]:
    """Problems with one manifest ([] when it fits the schema)."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    errors: list[str] = []
    if key in CORE_MODELS:
        _check_model(obj, CORE_MODELS[key], obj.get("kind", ""), errors)
    elif key in CRD_FILES:
        schema = crd_schema(*key)
        _check_schema({k: v for k, v in obj.items() if k != "metadata"}, schema, obj["kind"], errors)
        _check_model(obj.get("metadata") or {}, "V1ObjectMeta", f"{obj['kind']}.metadata", errors)
    else:
        errors.append(f"no schema for {key}")
    return errors


# -- CRD structural schemas --------------------------------------------------------------------

_TYPES = {"string": str, "integer": int, "boolean": bool, "number": (int, float), "object": dict, "array": list}


def _check_schema(value, schema: dict, path: str, errors: list[str]) -> None:
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            errors.append(f"{path}: int-or-string expected, got {value!r}")
        elif isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
        return
    typ = schema.get("type")
    if typ:
        expected = _TYPES[typ]
        if isinstance(value, bool) and typ != "boolean" or not isinstance(value, expected):
            errors.append(f"{path}: {typ} expected, got {type(value).__name__} {value!r}"[:200])
            return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: longer than {schema['maxLength']}")
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{path}: shorter than {schema['minLength']}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} > maximum {schema['maximum']}")
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{path}: more than {schema['maxItems']} items")
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{path}: fewer than {schema['minItems']} items")
        for i, item in enumerate(value):
            _check_schema(item, schema.get("items") or {}, f"{path}[{i}]", errors)
    if isinstance(value, dict):
        props = schema.get("properties")
        for req in schema.get("required") or []:
            if req not in value:
                errors.append(f"{path}: required field {req!r} missing")
        for k, v in value.items():
            if props is not None and k in props:
                _check_schema(v, props[k], f"{path}.{k}", errors)
            elif isinstance(schema.get("additionalProperties"), dict):
                _check_schema(v, schema["additionalProperties"], f"{path}.{k}", errors)
            elif schema.get("x-kubernetes-preserve-unknown-fields"):
                continue
            elif props is not None or schema.get("additionalProperties") is False:
                errors.append(f"{path}: unknown field {k!r}")


# -- built-in kinds through the official client's models ----------------------------------------


def _model(name: str):
    from kubernetes import client

    return getattr(client, name)


_PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object, "datetime": str, "date": str}


def _check_type(value, typ: str, path: str, errors: list[str]) -> None:
    if typ.startswith("list["):
        if not isinstance(value, list):
            errors.append(f"{path}: list expected, got {value!r}"[:200])
            return
        for i, item in enumerate(value):
            _check_type(item, typ[5:-1], f"{path}[{i}]", errors)
    elif typ.startswith(("dict(", "dict[")):
        if not isinstance(value, dict):
            errors.append(f"{path}: map expected, got {value!r}"[:200])
            return
        inner = typ[5:-1].split(", ", 1)[1]
        for k, v in value.items():
            _check_type(v, inner, f"{path}.{k}", errors)
    elif typ in _PRIMITIVES:
        expected = _PRIMITIVES[typ]
        if (isinstance(value, bool) and typ != "bool") or not isinstance(value, expected):
            errors.append(f"{path}: {typ} expected, got {value!r}"[:200])
    else:
        _check_model(value, typ, path, errors)


def _check_model(value, model_name: str, path: str, errors: list[str]) -> None:
    if not isinstance(value, dict):
        errors.append(f"{path}: object expected for {model_name}, got {value!r}"[:200])
        return
    model = _model(model_name)
    by_json = {j: a for a, j in model.attribute_map.items()}
    for k, v in value.items():
        if k not in by_json:
            errors.append(f"{path}: unknown field {k!r} for {model_name}")
            continue
        _check_type(v, model.openapi_types[by_json[k]], f"{path}.{k}", errors)
    # Required fields: the generated models refuse None for them when built.
    from kubernetes.client import Configuration

    try:
        model(**{a: (value.get(j) if j in value else None) for a, j in model.attribute_map.items()},
              local_vars_configuration=Configuration())
    except ValueError as exc:
        errors.append(f"{path}: {exc}")
    except TypeError:
        pass


# -- batch/v1 Job semantics (a subset of kubernetes/pkg/apis/batch/validation) ------------------

_DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def job_spec_errors(spec: dict, name: str | None = None) -> list[str]:
    """What the API server's Job validation would reject in a JobSpec (the parts we use)."""
    errors: list[str] = []
    indexed = spec.get("completionMode") == "Indexed"
    if indexed and spec.get("completions") is None:
        errors.append("completions required when completionMode is Indexed")
    if "maxFailedIndexes" in spec:
        if "backoffLimitPerIndex" not in spec:
            errors.append("backoffLimitPerIndex required when maxFailedIndexes is set")
        if spec.get("completions") is not None and spec["maxFailedIndexes"] > spec["completions"]:
            errors.append("maxFailedIndexes must be <= completions")
    if not indexed and ("backoffLimitPerIndex" in spec or "maxFailedIndexes" in spec):
        errors.append("backoffLimitPerIndex/maxFailedIndexes require Indexed completion mode")
    pod = (spec.get("template") or {}).get("spec") or {}
    restart = pod.get("restartPolicy")
    if restart not in ("Never", "OnFailure"):
        errors.append(f"template restartPolicy must be Never or OnFailure, not {restart!r}")
    pfp = spec.get("podFailurePolicy")
    if pfp is not None:
        if restart != "Never":
            errors.append("podFailurePolicy requires restartPolicy Never")
        names = {c["name"] for c in pod.get("containers", []) + pod.get("initContainers", [])}
        rules = pfp.get("rules") or []
        if len(rules) > 20:
            errors.append("more than 20 podFailurePolicy rules")
        for i, rule in enumerate(rules):
            action = rule.get("action")
            if action not in ("Count", "FailIndex", "FailJob", "Ignore"):
                errors.append(f"rule {i}: action {action!r} not supported")
            if action == "FailIndex" and "backoffLimitPerIndex" not in spec:
                errors.append(f"rule {i}: FailIndex requires backoffLimitPerIndex")
            on_codes, on_conds = rule.get("onExitCodes"), rule.get("onPodConditions")
            if bool(on_codes) == bool(on_conds):
                errors.append(f"rule {i}: exactly one of onExitCodes and onPodConditions")
            for cond in on_conds or []:
                if cond.get("status") not in ("True", "False", "Unknown"):
                    errors.append(f"rule {i}: condition status {cond.get('status')!r}")
            if on_codes:
                op, values = on_codes.get("operator"), on_codes.get("values") or []
                if op not in ("In", "NotIn"):
                    errors.append(f"rule {i}: operator {op!r} not supported")
                if not values or len(values) > 255:
                    errors.append(f"rule {i}: 1..255 values required")
                if values != sorted(set(values)):
                    errors.append(f"rule {i}: values must be ordered and unique")
                if op == "In" and 0 in values:
                    errors.append(f"rule {i}: 0 is not allowed with In")
                if on_codes.get("containerName") is not None and on_codes["containerName"] not in names:
                    errors.append(f"rule {i}: containerName {on_codes['containerName']!r} is not in the pod template")
    if name and indexed and spec.get("completions"):
        hostname = f"{name}-{spec['completions'] - 1}"
        if len(hostname) > 63 or not _DNS_1123_LABEL.match(hostname):
            errors.append(f"pod hostname {hostname!r} is not a DNS-1123 label")
    return errors
