"""ASTRA toolkit core: the JSONL contract, stage I/O, CLI conventions and the LLM client.

Light by design: nothing here imports torch. The embedded model server lives in
`astra_core.local` and needs the `local` extra.
"""

from astra_core.jsonl import dumps, read_jsonl, write_jsonl
from astra_core.records import KINDS, add_provenance, new_record, stable_id
from astra_core.schema import RecordError, validate

__all__ = [
    "KINDS",
    "RecordError",
    "add_provenance",
    "dumps",
    "new_record",
    "read_jsonl",
    "stable_id",
    "validate",
    "write_jsonl",
]
__version__ = "0.1.0"
