"""Read a wandb offline run's records (run-<id>.wandb) back: the history rows, ``{key: [[step, value]]}``.

Run in the tool env by tests/integration/test_tracking.py. wandb 0.31 has no Python reader of its
transaction log (wandb-core writes it), so this follows its format: a 7-byte header (``:W&B``, magic,
version), then LevelDB-log records (crc32, length, type: FULL=1 FIRST=2 MIDDLE=3 LAST=4) in 32 KiB blocks.
"""
import glob
import json
import struct
import sys

from wandb.proto import wandb_internal_pb2

BLOCK, HEADER = 32768, 7


def records(path):
    data = open(path, "rb").read()
    assert data[:4] == b":W&B", data[:7]
    pos, parts = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        chunk = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind == 0 and length == 0:
            break
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(parts)
            yield rec


out = {}
for path in sorted(glob.glob(sys.argv[1] + "/wandb/offline-run-*/run-*.wandb")):
    for rec in records(path):
        if rec.WhichOneof("record_type") == "history":
            row = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item}
            step = row.get("train/global_step")
            for key, value in row.items():
                if isinstance(value, (int, float)) and not key.startswith("_") and key != "train/global_step":
                    out.setdefault(key, []).append([step, value])
print(json.dumps(out))
