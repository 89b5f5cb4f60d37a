"""How much of an index's features its roots share: nonzero features per
document over all roots, and how many of them are in distinct lists.

    python bench/list_sharing.py INDEX [INDEX ...]

An edge's list is its column of features over every document (rows and
values, the values as the index stores them, float32). Two roots share a
list when their edges' columns are equal; the index stores such lists once
and a search at p = 1 reads them once (docs/benchmarks.md, 2026-11-28). A
ratio near 1 means ten roots cost about ten times one root.
"""
import argparse
import hashlib

import numpy as np


def sharing(path):
    from sobolev_index import SobolevIndex

    with SobolevIndex.open(path, "r") as index:
        keys = index.keys_in_order()
        total, distinct = 0, {}
        for root in range(len(index.trees)):
            columns = index.features(keys, root=root).tocsc()
            columns.sort_indices()
            total += columns.nnz
            for j in range(columns.shape[1]):
                a, b = columns.indptr[j], columns.indptr[j + 1]
                if a < b:
                    digest = hashlib.blake2b(
                        columns.indices[a:b].tobytes()
                        + columns.data[a:b].astype(np.float32).tobytes()).digest()
                    distinct[digest] = b - a
        n = len(keys)
        return {"documents": n, "roots": len(index.trees), "features_per_document": total / n,
                "distinct_per_document": sum(distinct.values()) / n}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", nargs="+")
    args = parser.parse_args(argv)
    for path in args.index:
        row = sharing(path)
        print(f"{path}: {row['documents']:,} documents, {row['roots']} root(s): "
              f"{row['features_per_document']:.1f} features per document, "
              f"{row['distinct_per_document']:.1f} in distinct lists "
              f"({row['distinct_per_document'] / row['features_per_document']:.0%})")


if __name__ == "__main__":
    main()
