"""JSON values, typed: what travels through XCom, trigger kwargs, job folders and API bodies."""

from __future__ import annotations

from typing import TypeAlias

JSON: TypeAlias = "str | int | float | bool | None | list[JSON] | dict[str, JSON]"
JSONDict: TypeAlias = "dict[str, JSON]"
