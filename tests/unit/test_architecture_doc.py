"""docs/architecture.md names only modules that exist (so it cannot drift silently)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
# where the doc's modules live: the library, the Airflow-facing classes, the tests
PLACES = [ROOT / "dlc_airflow", ROOT / "operators", ROOT / "sensors", ROOT / "tests"]


def named_modules(text: str) -> set[str]:
    return {m for m in re.findall(r"[A-Za-z0-9_/]+\.py\b", text) if "*" not in m}


def exists(module: str) -> bool:
    """`a/b.py` as a path under one of PLACES (or the repository), or a bare `b.py` anywhere there."""
    if "/" in module:
        return (ROOT / module).is_file() or any((place / module).is_file() for place in PLACES)
    return any(next(place.rglob(module), None) is not None for place in PLACES)


def test_every_module_the_architecture_doc_names_exists():
    names = named_modules(DOC.read_text())
    assert len(names) > 40, "the doc names the modules of the flow"  # the pattern still finds them
    missing = sorted(name for name in names if not exists(name))
    assert missing == [], f"docs/architecture.md names modules that do not exist: {missing}"


def test_a_module_that_does_not_exist_is_found_missing():
    assert named_modules("see `airflow/waiting.py` and nowhere.py") == {"airflow/waiting.py", "nowhere.py"}
    assert exists("airflow/waiting.py") and exists("waiting.py") and not exists("nowhere.py")
