"""Result records: the schema (schema.py), the environment block (environment.py), record files
(store.py), hardware submissions (submit.py) and the regression gate (regress.py).

The names below are the contract the rest of the harness uses.
"""

from orl.records.environment import capture_environment, config_hash
from orl.records.schema import gpu_count, make_record, not_run, record_split, validate_record
from orl.records.store import load_record_tree, load_records, write_records

__all__ = [
    "capture_environment",
    "config_hash",
    "gpu_count",
    "load_record_tree",
    "load_records",
    "make_record",
    "not_run",
    "record_split",
    "validate_record",
    "write_records",
]
