"""Lays out three dataset repos the way the hub holds them, from the quickstart rows (ROWS.jsonl OUT_DIR):
  parquet/   data/train-0000X-of-00002.parquet + data/test-00000-of-00001.parquet (push_to_hub's layout)
  configs/   a README configs: block with two configurations of CSV files
  scripted/  only a loading script; conversion/ holds what the hub's refs/convert/parquet branch would"""
import csv
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq

rows = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
out = sys.argv[2]
for i, row in enumerate(rows):
    row["id"] = i


def parquet(path, part):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(part), path)


parquet(f"{out}/parquet/data/train-00000-of-00002.parquet", rows[0:150])
parquet(f"{out}/parquet/data/train-00001-of-00002.parquet", rows[150:300])
parquet(f"{out}/parquet/data/test-00000-of-00001.parquet", rows[300:360])
with open(f"{out}/parquet/README.md", "w") as f:
    f.write("---\nlicense: mit\n---\n# stories\n")

os.makedirs(f"{out}/configs/small", exist_ok=True)
os.makedirs(f"{out}/configs/big", exist_ok=True)
# one format for the whole repo: datasets picks one builder per repo, whatever the configurations say
for name, part in [("small/a", rows[0:10]), ("small/b", rows[10:20]), ("big/train", rows[100:200]),
                   ("big/val", rows[200:220])]:
    with open(f"{out}/configs/{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["text", "id"])
        w.writeheader()
        w.writerows(part)
with open(f"{out}/configs/README.md", "w") as f:
    f.write("""---
configs:
- config_name: small
  data_files: "small/*.csv"
- config_name: big
  default: true
  data_files:
  - split: train
    path: big/train.csv
  - split: validation
    path: big/val.csv
---
# two configurations
""")

os.makedirs(f"{out}/scripted", exist_ok=True)
with open(f"{out}/scripted/scripted.py", "w") as f:
    f.write("# a loading script: finetune never runs it\n")
with open(f"{out}/scripted/README.md", "w") as f:
    f.write("# scripted\n")
parquet(f"{out}/conversion/default/train/0000.parquet", rows[0:40])
parquet(f"{out}/conversion/default/test/0000.parquet", rows[40:50])
print("ok")
