"""An evidence record as a plain JSON-ready dict, whatever form it arrived in.

Readers above the store (correlation, grading, reports) accept either an
``EvidenceRecord`` or its dict form (a JSON export, a scenario document); this
is the one place that turns both into the same dict.
"""

from __future__ import annotations

import enum
from typing import Any


def record_dict(record: Any) -> dict[str, Any]:
    """An evidence record as a JSON-ready dict (``EvidenceRecord.to_dict``, or a dict as is).

    Raises ``TypeError`` for anything that is neither.
    """
    if isinstance(record, dict):
        return record
    to_dict = getattr(record, "to_dict", None)
    if callable(to_dict):
        out = to_dict()
        if isinstance(out, dict):
            return dict(_jsonable(out))
    raise TypeError(f"cannot read evidence record of type {type(record).__name__}")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    return value
