"""Writes the rows of a JSON Lines file in the other formats datasets reads, with the real libraries:
CSV (Python's csv module), Parquet (pyarrow, one file per compression codec), Arrow IPC as datasets' save_to_disk
writes it (stream format) and Arrow's file format. Usage: write_formats.py ROWS.jsonl OUT_DIR [flat]"""
import csv
import json
import os
import sys

import datasets
import pyarrow as pa
import pyarrow.parquet as pq

rows_file, out, flat = sys.argv[1], sys.argv[2], len(sys.argv) > 3 and sys.argv[3] == "flat"
rows = [json.loads(line) for line in open(rows_file, encoding="utf-8") if line.strip()]
table = pa.Table.from_pylist(rows)
os.makedirs(out, exist_ok=True)
for codec in ["snappy", "zstd", "gzip", "lz4", "none"]:
    pq.write_table(table, os.path.join(out, f"rows-{codec}.parquet"), compression=codec, row_group_size=7)
with pa.OSFile(os.path.join(out, "rows-file.arrow"), "wb") as sink:
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=5)
datasets.Dataset.from_list(rows).save_to_disk(os.path.join(out, "saved"))
if flat:
    with open(os.path.join(out, "rows.csv"), "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)
print("ok")
