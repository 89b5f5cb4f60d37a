"""Which segments an index merges: pure functions over the segments' row
and nonzero counts, with no I/O (``writer.py`` does the merging).

Segments whose live row counts share floor(log_TIER(rows)) form a tier; a
tier holding TIER segments is merged, so a corpus of N rows has
O(TIER * log N) segments however it was added, as long as merges stay
below the cap. A merge holds the merged rows' features and builds their
inverted file in memory, about 55 bytes per nonzero feature (measured), so
merges stop at MAX_SEGMENT_NNZ live nonzeros: about 7 GB of writer memory
and 1.7 GB on disk, whatever the size of the index. A segment holding more
than half of it is left out of tier merges (two of them would not fit).
"""
import math

TIER = 8
MAX_SEGMENT_NNZ = 2 ** 27


def tier(rows):
    """The tier of a segment of ``rows`` live rows."""
    return int(math.log(max(rows, 1), TIER))


def live_nnz(segment):
    """The segment's nonzero features (from the catalog) times its share of
    live rows: exact when none is deleted, an estimate otherwise."""
    return segment.nnz * int(segment.live.sum()) // max(segment.rows, 1)


def tier_merge(segments):
    """The segments the next tier merge takes, or None when no tier is
    full: the full tier's smallest segments, as many as fit under the cap
    (up to TIER, and at least two, since each holds at most half of it)."""
    tiers = {}
    for segment in segments:
        if 2 * live_nnz(segment) <= MAX_SEGMENT_NNZ:
            tiers.setdefault(tier(int(segment.live.sum())), []).append(segment)
    full = [group for group in tiers.values() if len(group) >= TIER]
    if not full:
        return None
    group = sorted(full[0], key=live_nnz)[:TIER]
    total, take = 0, 0
    while take < len(group) and total + live_nnz(group[take]) <= MAX_SEGMENT_NNZ:
        total += live_nnz(group[take])
        take += 1
    return group[:max(take, 2)]


def compact_groups(segments):
    """``segments`` cut into runs of at most MAX_SEGMENT_NNZ live nonzeros
    (a segment above it on its own): what ``compact`` merges, one commit
    per run."""
    groups, total = [], 0
    for segment in segments:
        nnz = live_nnz(segment)
        if groups and total + nnz <= MAX_SEGMENT_NNZ:
            groups[-1].append(segment)
            total += nnz
        else:
            groups.append([segment])
            total = nnz
    return groups
