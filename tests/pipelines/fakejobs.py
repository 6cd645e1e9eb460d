"""Fast stand-ins for the digits jobs (no torch): the same runtime calls, and a checkpoint that
records the whole resume chain, so a test can read which checkpoints each interval grew from.

Written into a folder and run by the jobs as `python <folder>/<name>.py`. A job of interval K
exits 3 while a file K exists in $FAIL_DIR (how the tests make an interval fail); a file
K.accuracy there sets the accuracy its training reports (default 0.5 + 0.1 per predecessor).
"""

PREPROCESS = '''
import json
from dlc_airflow.runtime import pipeline, shard
index, count = shard()
out = pipeline.output_dir()
out.mkdir(parents=True, exist_ok=True)
start, end = pipeline.interval()
(out / f"shard-{index}.json").write_text(json.dumps({"interval": pipeline.interval_key(), "rows": [index, count]}))
print(f"preprocessed shard {index}/{count} of [{start}, {end})")
'''

TRAIN = '''
import json, os, sys, time
from pathlib import Path
from dlc_airflow.runtime import is_coordinator, log_metrics, pipeline, resume_path, save_checkpoint, world_size
key = pipeline.interval_key()
if (Path(os.environ["FAIL_DIR"]) / key).exists():
    print(f"interval {key}: failing on purpose")
    sys.exit(3)
shards = sorted(p.name for p in pipeline.data_dir().glob("shard-*.json"))
assert shards == ["shard-0.json", "shard-1.json"], shards
start = resume_path()
chain = json.loads((Path(start) / "chain.json").read_text()) if start else []
began = time.time()
time.sleep(float(os.environ.get("TRAIN_SECONDS", "1")))
override = Path(os.environ["FAIL_DIR"]) / (key + ".accuracy")  # a test sets the metric the gate sees
accuracy = float(override.read_text()) if override.exists() else 0.5 + 0.1 * len(chain)
if is_coordinator():
    log_metrics(step=len(chain) + 1, accuracy=accuracy, workers=world_size())
    record = {"interval": key, "resumed_from": start, "began": began, "ended": time.time()}
    save_checkpoint(lambda d: Path(d, "chain.json").write_text(json.dumps(chain + [record])), len(chain) + 1)
'''

INFER = '''
import json
from dlc_airflow.runtime import log_metrics, pipeline, shard
index, count = shard()
chain = json.loads((pipeline.model_dir() / "chain.json").read_text())
out = pipeline.output_dir()
out.mkdir(parents=True, exist_ok=True)
(out / f"shard-{index}.json").write_text(json.dumps({"model": pipeline.model_uri(), "chain": [c["interval"] for c in chain]}))
log_metrics(**{f"predictions_shard{index}": 1})
'''


def write(folder):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (("preprocess", PREPROCESS), ("train", TRAIN), ("infer", INFER)):
        (folder / f"{name}.py").write_text(text)
    return folder


def jobs(folder, fail_dir, image="dlc-airflow/runtime:dev", **extra_env):
    """preprocess (batch, 2 shards), train (pytorch, 2 workers), inference (batch, 2 shards)."""
    from dlc_airflow.spec import DLCJob

    env = {"FAIL_DIR": str(fail_dir), **extra_env}

    def job(script, kind):
        return DLCJob(name=script, type=kind, image=image, roles={"worker": 2},
                      command=["python", f"{folder}/{script}.py"], env=env,
                      max_running_time="5m")  # never outlives a broken test for long

    return {"preprocess": job("preprocess", "batch"), "train": job("train", "pytorch"),
            "inference": job("infer", "batch")}
