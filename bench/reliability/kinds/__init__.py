"""The kinds of trials, by the name ``--only`` takes, in the order of the
table; and the tasks whose trials run in child processes (the role
"trials" of :class:`~bench.reliability.harness.TrialRunner`).

A kind is a function ``kind(run)`` whose docstring's first line ``--list``
shows; it adds its rows to ``run`` and fills them.
"""
from .bad_api import kind_bad_api, trial_bad_api
from .bad_cli import kind_bad_cli
from .checked_open import kind_checked_open, trial_checked_open
from .damage import (
    kind_arrays,
    kind_catalog_edits,
    kind_damage,
    trial_arrays,
    trial_catalog_edit,
    trial_damage,
)
from .diskfull import kind_diskfull, kind_diskfull_real, trial_diskfull, trial_real_disk
from .foreign import kind_foreign, kind_malicious_names, trial_foreign
from .inputs import kind_input_rules, kind_pipes
from .large_p import kind_large_p, trial_large_p
from .shards import kind_shard_waits
from .sql import kind_sql, kind_sql_limits, trial_sql, trial_sql_limits
from .writers import (
    kind_concurrency,
    kind_lost_wal,
    kind_second_writer,
    kind_sigkill,
    role_wal_writer,
)

KINDS = {
    "sigkill": kind_sigkill,
    "diskfull": kind_diskfull,
    "diskfull-real": kind_diskfull_real,
    "bad-api": kind_bad_api,
    "large-p": kind_large_p,
    "bad-cli": kind_bad_cli,
    "byteflip": kind_damage,
    "corrupt-arrays": kind_arrays,
    "catalog-edits": kind_catalog_edits,
    "foreign": kind_foreign,
    "second-writer": kind_second_writer,
    "concurrency": kind_concurrency,
    "malicious-name": kind_malicious_names,
    "lost-wal": kind_lost_wal,
    "sql-timeout": kind_sql,
    "checked-open": kind_checked_open,
    "pipes": kind_pipes,
    "input-rules": kind_input_rules,
    "dask-kill": kind_shard_waits,
    "sql-limits": kind_sql_limits,
}
# Row ids (and other names) that select a kind with --only.
KIND_ALIASES = {"truncate": "byteflip", "missing": "byteflip", "missing-file": "byteflip"}

# Tasks run by TrialRunner in a child: fn(spec, ctx) -> (outcome, detail).
TRIAL_TASKS = {
    "damage": trial_damage,
    "arrays": trial_arrays,
    "catalog-edit": trial_catalog_edit,
    "foreign": trial_foreign,
    "bad-api": trial_bad_api,
    "large-p": trial_large_p,
    "diskfull": trial_diskfull,
    "realdisk": trial_real_disk,
    "sql": trial_sql,
    "sql-limits": trial_sql_limits,
    "checked-open": trial_checked_open,
}

__all__ = ["KINDS", "KIND_ALIASES", "TRIAL_TASKS", "role_wal_writer"]
