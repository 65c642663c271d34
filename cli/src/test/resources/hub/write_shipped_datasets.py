"""The hub datasets the shipped recipes name, as small Parquet repos of the same columns, from the quickstart data:
  alpaca-cleaned/  instruction, input, output          (yahma/alpaca-cleaned)
  orca-dpo/        system, question, chosen, rejected  (Intel/orca_dpo_pairs)
Usage: write_shipped_datasets.py CONFIGS_DATA_DIR OUT_DIR"""
import json
import os
import sys

import pyarrow as pa
import pyarrow.parquet as pq

data, out = sys.argv[1], sys.argv[2]
texts = [json.loads(l)["text"] for l in open(os.path.join(data, "quickstart.jsonl")) if l.strip()]
alpaca = []
for t in texts[:80]:
    first, _, rest = t.partition(". ")
    alpaca.append({"instruction": "Continue the story.", "input": first + ".", "output": rest})
pairs = [json.loads(l) for l in open(os.path.join(data, "quickstart-dpo.jsonl")) if l.strip()]
orca = [{"system": "", "question": p["prompt"], "chosen": p["chosen"], "rejected": p["rejected"]} for p in pairs]
for name, rows in [("alpaca-cleaned", alpaca), ("orca-dpo", orca)]:
    os.makedirs(os.path.join(out, name, "data"), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), os.path.join(out, name, "data", "train-00000-of-00001.parquet"))
    with open(os.path.join(out, name, "README.md"), "w") as f:
        f.write("---\nlicense: cc-by-4.0\n---\n")
print("ok")
