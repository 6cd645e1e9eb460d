"""Volumes as local folders, and the path rewriting that makes a cluster spec run locally.

On a cluster, a storage mount puts a volume at `mount_path` inside the containers, and the
job's command names files under it (`--data /data/train`). A local process has no mount
namespace, so each mount path maps to a local folder instead:

    host_path                          -> its own path (sub_path appended)
    pvc, nfs, csi, config_map, secret  -> <root>/volumes/<kind>-<name>/  (shared by local jobs:
                                          put the data a job expects there)
    empty_dir                          -> <jobdir>/volumes/empty_dir-<i>/ (lives with the job)
    code.mount_path                    -> <jobdir>/code/ (the git checkout)
    checkpoint.path (if not under a mount and the uri is not file://) -> <root>/volumes/checkpoint-<hash>/

and every occurrence of a mount path in the command's arguments, the health check's command,
the working directory and the env values is rewritten to its folder: `/data/train` becomes
`<root>/volumes/pvc-datasets/train`. A mount path matches only as a whole path component
(`/data` rewrites `/data`, `/data/x`, `file:///data/x` and `--in=/data/x`, not `/database`);
nested mounts match the longest first. file:// checkpoint URIs are local already and stay
as they are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from dlc_airflow.naming import digest, slug
from dlc_airflow.spec import DLCJob

# characters that continue a path component: a match must not be inside a longer name
_WORD = r"A-Za-z0-9_.\-"


@dataclass
class LocalMounts:
    """mount_path -> local folder, and rewriting of strings that mention mount paths."""

    folders: dict[str, Path] = field(default_factory=dict)
    # folders a job needs made before it starts (not the code checkout: git makes that)
    to_create: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._pattern: re.Pattern[str] | None = None

    def add(self, mount_path: str, folder: Path, create: bool = True) -> None:
        if create and folder not in self.to_create:
            self.to_create.append(folder)
        path = mount_path.rstrip("/")
        if path:  # "/" itself is never rewritten: every absolute path would change
            self.folders[path] = folder
            self._pattern = None

    def _compiled(self) -> re.Pattern[str] | None:
        if self._pattern is None and self.folders:
            alternatives = "|".join(re.escape(p) for p in sorted(self.folders, key=len, reverse=True))
            self._pattern = re.compile(rf"(?<![{_WORD}])({alternatives})(?![{_WORD}])")
        return self._pattern

    def rewrite(self, text: str) -> str:
        pattern = self._compiled()
        if pattern is None:
            return text
        return pattern.sub(lambda m: str(self.folders[m.group(1)]), text)

    def rewrite_all(self, items: list[str]) -> list[str]:
        return [self.rewrite(item) for item in items]

    def covers(self, path: str) -> bool:
        return self.rewrite(path) != path


def shared_folder(root: Path, kind: str, name: str) -> Path:
    """A mount folder shared by the local jobs of `root` (pvc, nfs, config_map, secret)."""
    return root / "volumes" / f"{kind}-{slug(name, 60)}"


def map_mounts(job: DLCJob, root: Path, jobdir: Path) -> LocalMounts:
    """The local folder of every mount of `job` (created), as a LocalMounts."""
    mounts = plan_mounts(job, root, jobdir)
    for folder in mounts.to_create:
        folder.mkdir(parents=True, exist_ok=True)
    return mounts


def plan_mounts(job: DLCJob, root: Path, jobdir: Path) -> LocalMounts:
    """The local folder of every mount of `job`, without touching the disk (map_mounts
    creates them)."""
    mounts = LocalMounts()
    for number, mount in enumerate(job.storage):
        if mount.type == "host_path":
            folder = Path(mount.path)
        elif mount.type == "pvc":
            folder = shared_folder(root, "pvc", mount.claim_name)
        elif mount.type == "nfs":
            folder = shared_folder(root, "nfs", f"{mount.server}-{mount.path}")
        elif mount.type == "csi":
            attributes = ",".join(f"{k}={v}" for k, v in sorted(mount.volume_attributes.items()))
            folder = root / "volumes" / f"csi-{slug(mount.driver, 40)}-{digest(mount.driver, attributes, length=8)}"
        elif mount.type == "config_map":
            folder = shared_folder(root, "config_map", mount.name)
        elif mount.type == "secret":
            folder = shared_folder(root, "secret", mount.name)
        else:  # empty_dir
            folder = jobdir / "volumes" / f"empty_dir-{number}"
        if mount.sub_path:
            folder = folder / mount.sub_path
        mounts.add(mount.mount_path, folder)
    if job.code is not None:
        mounts.add(job.code.mount_path, jobdir / "code", create=False)
    checkpoint = job.checkpoint
    if checkpoint is not None and not checkpoint.uri.startswith("file://"):
        inside = checkpoint.container_path()
        if inside and not mounts.covers(inside) and not checkpoint.uri.startswith("/"):
            folder = root / "volumes" / f"checkpoint-{digest(checkpoint.uri, length=12)}"
            mounts.add(inside, folder)
    return mounts
