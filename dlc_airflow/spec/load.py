"""Reading a job spec: from a dict or a DLCJob (`parse_job`), a YAML or JSON file (`load_job`,
which refuses a key given twice), and the JSON Schema editors read (`json_schema`). Every
problem is one SpecError line naming the field (dlc_airflow.spec.models.first_error)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dlc_airflow.errors import SpecError
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.spec.fields import QUANTITY
from dlc_airflow.spec.models import DLCJob, first_error


def parse_job(data: object, source: str = "job spec") -> DLCJob:
    """Validate a DLCJob / dict, raising SpecError with one actionable line per problem."""
    if isinstance(data, DLCJob):
        return data
    try:
        return DLCJob.model_validate(data)
    except ValidationError as exc:
        raise SpecError(f"invalid {source}: {first_error(exc)}") from None


def job_from(job: DLCJob | JSONObject | str | os.PathLike[str], folder: Path, source: str) -> DLCJob:
    """A task's `job=`: a DLCJob, a dict of its fields, or a spec file (a relative path is
    looked up in `folder`, the DAG file's)."""
    if isinstance(job, (str, os.PathLike)):
        path = Path(job)
        return load_job(path if path.is_absolute() else folder / path)
    return parse_job(job, source=source)


def load_job(path: str | Path) -> DLCJob:
    """Load a job spec from a YAML or JSON file."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read job spec {p}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{p} is not UTF-8 text (byte {exc.start}): save the spec as UTF-8 YAML or JSON") from None
    try:
        data = _load_json(text) if p.suffix == ".json" else yaml.load(text, Loader=_strict_yaml_loader())
    except _DuplicateKey as exc:
        raise SpecError(f"{p}: {exc}") from None
    except (ValueError, yaml.YAMLError) as exc:
        raise SpecError(f"{p} is not valid {'JSON' if p.suffix == '.json' else 'YAML'}: {_one_line(exc)}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{p}: a job spec is a mapping (name, type, image, ...)")
    return parse_job(data, source=str(p))


class _DuplicateKey(Exception):
    """A key given twice in one mapping: YAML and JSON parsers silently keep the last."""


def _strict_yaml_loader() -> type:
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` may be overridden
                        continue
                    key = self.construct_object(key_node, deep=True)
                    line = key_node.start_mark.line + 1
                    try:
                        first = seen.get(key)
                    except TypeError:  # an unhashable key: the base loader reports it
                        continue
                    if first is not None:
                        raise _DuplicateKey(f"duplicate key {key!r} at line {line} (first at line {first}); "
                                            "remove one of them (YAML would silently keep the last)")
                    seen[key] = line
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def _load_json(text: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> JSONObject:
        out: JSONObject = {}
        for key, value in items:
            if key in out:
                raise _DuplicateKey(f"duplicate key {key!r}; remove one of them (JSON would silently keep the last)")
            out[key] = value
        return out

    return json.loads(text, object_pairs_hook=pairs)


def _one_line(exc: Exception) -> str:
    """A parser error as one line: what is wrong, and where (YAML errors span several lines)."""
    problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
    if problem and mark is not None:
        context = getattr(exc, "context", None)  # e.g. "expected a single document in the stream"
        where = f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
        return f"{context}, {where}" if context else where
    return " ".join(str(exc).split())


def json_schema() -> JSONObject:
    """JSON Schema of DLCJob, for editors (yaml-language-server) and docs.

    It describes what a spec file may contain, which is more than the models' types: the
    validators also take the roles shorthand (`worker: 4`), plain numbers as quantities
    (`cpu: 4`) and durations as seconds or text such as '2h'.
    """
    schema = DLCJob.model_json_schema()
    defs, props = schema["$defs"], schema["properties"]
    props["roles"]["additionalProperties"] = {
        "anyOf": [{"$ref": "#/$defs/Role"}, {"type": "integer", "minimum": 1, "description": "replicas"}]
    }
    for key in ("max_running_time", "ttl_after_finished"):
        props[key]["anyOf"] = [{"type": "number", "exclusiveMinimum": 0},
                               {"type": "string", "description": "seconds, or e.g. '90s', '30m', '2h', '1d12h'"},
                               {"type": "null"}]
    quantity = [{"type": "string", "pattern": QUANTITY.pattern}, {"type": "number", "minimum": 0},
                {"type": "string", "pattern": r"\{\{|\{%", "description": "a Jinja template Airflow renders"},
                {"type": "null"}]
    for model, fields in (("Resources", ("cpu", "memory", "shared_memory", "ephemeral_storage")),
                          ("EmptyDirMount", ("size_limit",))):
        for field in fields:
            defs[model]["properties"][field]["anyOf"] = quantity
    return schema
