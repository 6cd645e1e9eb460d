"""`dlc-airflow sanity-check`: DLC's preflight health check, run in the job image.

Use it as a job's health_check.command (`[dlc-airflow, sanity-check, --gpus, "8"]`): it
checks what makes distributed jobs hang or die late - wiring that contradicts itself, a
rendezvous host that does not resolve, an unwritable checkpoint root, a small /dev/shm
(PyTorch data loaders), a full disk, missing GPUs - and prints one line per check:

    ok   env: rank 1 of 4, role worker 1 of 3
    FAIL gpus: found 0 GPUs (nvidia-smi not found; torch not installed), need 8

The exit status is 1 when any check failed, so the job fails before training starts.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from dlc_airflow.runtime import env as runtime_env

__all__ = ["CheckResult", "add_arguments", "parse_size", "run_checks"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]i?|[kmgtp]i?)?[Bb]?\s*$")


def parse_size(text: str) -> int:
    """Bytes of '512Mi', '8Gi', '1G', '1.5T', '4096' (Kubernetes quantity suffixes; the unit's
    letter in either case, and a trailing B, are taken too)."""
    from dlc_airflow.spec.fields import quantity_value

    match = _SIZE.match(str(text))
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; write e.g. 512Mi, 8Gi, 1G")
    number, unit = match.group(1), match.group(2) or ""
    letter = unit[:1].upper() if unit.endswith("i") or unit[:1].lower() != "k" else "k"  # 1k: 1000, 1Ki: 1024
    return int(quantity_value(number + letter + unit[1:].lower()))


def _human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size} B"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpus", type=int, default=0, metavar="N",
                        help="fail unless at least N GPUs are visible")
    parser.add_argument("--min-shm", type=parse_size, metavar="SIZE",
                        help="fail unless /dev/shm is at least SIZE (e.g. 8Gi)")
    parser.add_argument("--min-disk", type=parse_size, default=parse_size("1Gi"), metavar="SIZE",
                        help="fail unless SIZE is free where checkpoints go (else the working "
                             "directory); default 1Gi")
    parser.add_argument("--checkpoint-dir", metavar="PATH",
                        help="checkpoint root to test for writing (default: DLC_CHECKPOINT_DIR)")
    parser.add_argument("--dns-timeout", type=float, default=30.0, metavar="SECONDS",
                        help="how long MASTER_ADDR may take to resolve (peers' DNS records "
                             "appear as their pods start); default 30")
    parser.add_argument("--shm-path", default="/dev/shm", help=argparse.SUPPRESS)


@dataclass
class CheckResult:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"


def check_env() -> CheckResult:
    parts = []
    try:
        if os.environ.get("RANK") or os.environ.get("WORLD_SIZE"):
            parts.append(f"rank {runtime_env.rank()} of {runtime_env.world_size()}")
        if os.environ.get("DLC_ROLE"):
            parts.append(
                f"role {runtime_env.role()} {runtime_env.role_index()} of "
                f"{os.environ.get('DLC_ROLE_REPLICAS', '?')}"
            )
        if os.environ.get("SHARD_INDEX") or os.environ.get("SHARD_COUNT"):
            index, count = runtime_env.shard()
            parts.append(f"shard {index} of {count}")
        if os.environ.get("PET_NODE_RANK"):
            parts.append(f"node {runtime_env.node_rank()} of {os.environ.get('PET_NNODES', '?')}")
        tf_config = os.environ.get("TF_CONFIG")
        if tf_config:
            task = json.loads(tf_config)["task"]
            parts.append(f"tensorflow {task['type']} {task['index']}")
    except runtime_env.RuntimeEnvError as exc:
        return CheckResult("env", False, str(exc))
    except (ValueError, KeyError, TypeError):
        return CheckResult("env", False, "TF_CONFIG is not JSON with a task {type, index}")
    if not parts:
        return CheckResult("env", True, "no job wiring (a single process)")
    return CheckResult("env", True, ", ".join(parts))


def _resolve(host: str, timeout: float) -> list[str]:
    """Addresses of `host`, retrying until `timeout`: peers' DNS records appear late."""
    deadline = time.monotonic() + timeout
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    last: Exception | None = None
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            future = pool.submit(socket.getaddrinfo, host, None, 0, socket.SOCK_STREAM)
            try:
                infos = future.result(timeout=remaining)
                return sorted({str(info[4][0]) for info in infos})
            except concurrent.futures.TimeoutError:
                last = TimeoutError(f"no answer within {timeout:g}s")
                break
            except OSError as exc:
                last = exc
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    raise OSError(f"{last}" if last else f"no answer within {timeout:g}s")


def check_master(timeout: float) -> list[CheckResult]:
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr and not port:
        return [CheckResult("master", True, "no rendezvous (MASTER_ADDR unset)")]
    results = []
    if not addr:
        results.append(CheckResult("master_addr", False, f"MASTER_PORT={port} is set but MASTER_ADDR is not"))
    else:
        try:
            addresses = _resolve(addr, timeout)
            results.append(CheckResult("master_addr", True, f"{addr} resolves to {', '.join(addresses)}"))
        except OSError as exc:
            results.append(CheckResult(
                "master_addr", False,
                f"{addr} does not resolve ({exc}); check the headless Service / pod subdomain",
            ))
    if not port:
        results.append(CheckResult("master_port", False, f"MASTER_ADDR={addr} is set but MASTER_PORT is not"))
    elif not port.isdigit() or not 1 <= int(port) <= 65535:
        results.append(CheckResult("master_port", False, f"MASTER_PORT={port!r} is not a port (1..65535)"))
    else:
        results.append(CheckResult("master_port", True, port))
    return results


def _checkpoint_root(args: argparse.Namespace) -> str | None:
    return args.checkpoint_dir or os.environ.get("DLC_CHECKPOINT_DIR") or None


def check_checkpoint_dir(path: str | None) -> CheckResult:
    if not path:
        return CheckResult("checkpoint_dir", True, "none configured")
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".sanity-") as handle:
            handle.write(b"ok")
            handle.flush()
    except OSError as exc:
        return CheckResult("checkpoint_dir", False, f"{path} is not writable: {exc.strerror or exc}")
    return CheckResult("checkpoint_dir", True, f"{path} is writable")


def check_shm(path: str, minimum: int | None) -> CheckResult:
    try:
        stat = os.statvfs(path)
    except OSError as exc:
        if minimum:
            return CheckResult("shm", False, f"{path} is missing ({exc.strerror}); need {_human(minimum)}")
        return CheckResult("shm", True, f"{path} is missing (no minimum asked)")
    size = stat.f_blocks * stat.f_frsize
    if minimum and size < minimum:
        return CheckResult(
            "shm", False,
            f"{path} is {_human(size)}, need {_human(minimum)}; set resources.shared_memory",
        )
    return CheckResult("shm", True, f"{path} is {_human(size)}")


def check_disk(path: str, minimum: int) -> CheckResult:
    probe = path
    while probe and not os.path.exists(probe):  # a checkpoint root not created yet
        probe = os.path.dirname(probe.rstrip("/")) or "/"
    try:
        free = shutil.disk_usage(probe).free
    except OSError as exc:
        return CheckResult("disk", False, f"cannot stat {probe}: {exc.strerror}")
    if free < minimum:
        return CheckResult("disk", False, f"{_human(free)} free at {probe}, need {_human(minimum)}")
    return CheckResult("disk", True, f"{_human(free)} free at {probe}")


def count_gpus() -> tuple[int, str]:
    """Visible GPUs and how they were counted: nvidia-smi, else torch, else none."""
    notes = []
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False)
            if out.returncode == 0:
                return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU ")), "nvidia-smi"
            notes.append(f"nvidia-smi failed: {(out.stderr or out.stdout).strip()[:200]}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            notes.append(f"nvidia-smi failed: {exc}")
    else:
        notes.append("nvidia-smi not found")
    try:
        import torch  # optional: only when installed in the image
    except ImportError:
        notes.append("torch not installed")
    else:
        if torch.cuda.is_available():
            return torch.cuda.device_count(), "torch"
        notes.append("torch sees no CUDA device")
    return 0, "; ".join(notes)


def check_gpus(wanted: int, counter: Callable[[], tuple[int, str]] = count_gpus) -> CheckResult:
    if wanted <= 0:
        return CheckResult("gpus", True, "none required")
    found, how = counter()
    if found < wanted:
        return CheckResult("gpus", False, f"found {found} GPUs ({how}), need {wanted}")
    return CheckResult("gpus", True, f"{found} GPUs ({how})")


def run_checks(args: argparse.Namespace) -> int:
    root = _checkpoint_root(args)
    results = [check_env()]
    results += check_master(args.dns_timeout)
    results.append(check_checkpoint_dir(root))
    results.append(check_shm(args.shm_path, args.min_shm))
    results.append(check_disk(root or os.getcwd(), args.min_disk))
    results.append(check_gpus(args.gpus))
    for result in results:
        print(result.line(), flush=True)
    failed = [r.name for r in results if not r.ok]
    print(f"sanity-check: {len(results) - len(failed)} ok, {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else ""), flush=True)
    return 1 if failed else 0
