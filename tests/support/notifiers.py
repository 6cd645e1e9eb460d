"""A notifier for tests: appends each notification's context as a JSON line to a file (an
importable module, as a notifier the triggerer rebuilds must live in)."""

from __future__ import annotations

import json

from airflow.sdk import BaseNotifier


class FileNotifier(BaseNotifier):
    template_fields = ("text",)

    def __init__(self, path: str, text: str = "{{ summary }}") -> None:
        super().__init__()
        self.path = path
        self.text = text

    def notify(self, context) -> None:
        keys = ("event", "state", "previous_state", "reason", "message", "restarts", "job", "dag_id", "task_id",
                "run_id", "link")
        with open(self.path, "a") as handle:
            handle.write(json.dumps({"text": self.text, **{k: context.get(k) for k in keys}}) + "\n")
