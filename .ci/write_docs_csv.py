"""Write docs.csv for the README's "Your own documents" section: the
quickstart's docstrings as a user's CSV (a header row, then id, text, label;
texts with commas, quotes and newlines inside quoted cells)."""
import csv
import sys

from sobolev_index.ingest.stdlib_corpus import stdlib_documents

path = sys.argv[1] if len(sys.argv) > 1 else "docs.csv"
with open(path, "w", newline="", encoding="utf-8") as handle:
    writer = csv.writer(handle)
    writer.writerow(["id", "text", "label"])
    for doc in stdlib_documents():
        writer.writerow([doc["key"], doc["text"], doc["label"]])
