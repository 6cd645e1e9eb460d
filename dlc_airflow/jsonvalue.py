"""JSON values, typed: what travels through XCom, trigger kwargs, job folders and API bodies."""

from __future__ import annotations

from typing import Any, TypeAlias

JSON: TypeAlias = "str | int | float | bool | None | list[JSON] | dict[str, JSON]"
JSONDict: TypeAlias = "dict[str, JSON]"
# A JSON object read field by field without a schema (a report, a UI document, an XCom, an
# API body): where its fields are read, they are checked or converted there.
JSONObject: TypeAlias = dict[str, Any]
