#!/usr/bin/env python3
"""Rewrite a controller's upstream webhook configurations for a controller running on this host.

Reads the upstream Mutating/ValidatingWebhookConfigurations as JSON (kubectl's output of the
module's manifests, one object after another or a List) on stdin and writes them to stdout with:
  - clientConfig.service replaced by clientConfig.url https://127.0.0.1:PORT<path>, and the
    generated CA as caBundle (the API server reaches the controller without a Service);
  - the configuration renamed `dlc-local-<controller>-<kind>`, or --name (a controller whose
    cert rotator cannot be turned off waits until it finds its configuration by name);
  - only the webhooks whose path the controller serves in our setup (--path-regex), since a
    webhook whose path is not served blocks every object it matches.
Standard library only: `scripts/k8s-local up` runs it before any virtualenv exists.
"""

import argparse
import base64
import json
import re
import sys

KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def rewrite(
    objects: list[dict], controller: str, port: int, ca_bundle: str, path_regex: str, name: str | None = None
) -> list[dict]:
    keep = re.compile(path_regex)
    out = []
    for obj in objects:
        if obj.get("kind") not in KINDS:
            continue
        webhooks = []
        for hook in obj.get("webhooks", []):
            service = hook.get("clientConfig", {}).get("service") or {}
            path = service.get("path", "/")
            if not keep.search(path):
                continue
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
            webhooks.append(hook)
        if not webhooks:
            continue
        kind = "mutating" if obj["kind"].startswith("Mutating") else "validating"
        out.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": obj["kind"],
                "metadata": {
                    "name": name or f"dlc-local-{controller}-{kind}",
                    "labels": {"dlc-airflow.io/local-controller": controller},
                },
                "webhooks": webhooks,
            }
        )
    return out


def json_stream(text: str):
    """The objects of kubectl's JSON output: one object, a List, or objects one after another."""
    decoder = json.JSONDecoder()
    at = 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        obj, at = decoder.raw_decode(text, at)
        yield from obj["items"] if obj.get("kind") == "List" else [obj]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--controller", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ca", required=True, help="the CA certificate file (PEM)")
    parser.add_argument("--path-regex", default=".", help="keep only webhooks whose path matches")
    parser.add_argument("--name", help="the configuration's name (one configuration only)")
    args = parser.parse_args()
    objects = list(json_stream(sys.stdin.read()))
    with open(args.ca, "rb") as f:
        ca_bundle = base64.b64encode(f.read()).decode()
    result = rewrite(objects, args.controller, args.port, ca_bundle, args.path_regex, args.name)
    if args.name and len(result) > 1:
        print(f"k8s-webhooks: --name given, but {args.controller} has {len(result)} configurations", file=sys.stderr)
        return 1
    if not result:
        print(f"k8s-webhooks: no webhook of {args.controller} matched {args.path_regex!r}", file=sys.stderr)
        return 1
    json.dump({"apiVersion": "v1", "kind": "List", "items": result}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
