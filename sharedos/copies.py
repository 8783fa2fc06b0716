"""``ValidatedCopies``: frozen pydantic models whose ``model_copy(update=...)`` is validated.

pydantic's ``model_copy`` skips validation and copies the instance ``__dict__``,
where ``functools.cached_property`` keeps what was derived from the fields
(``AccessContext.policy_input``/``cache_key``, ``ToolDefinition.published``): a
copy with other fields would answer with the original's. A model that derives
from its fields, or checks them, inherits this instead of ``BaseModel``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel


class ValidatedCopies(BaseModel):
    """A ``BaseModel`` whose copies with an update are made through validation."""

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy; with ``update``, a new object validated like any other (every value
        derived from the fields computed afresh, every check made on the new fields)."""
        if not update:
            return super().model_copy(deep=deep)
        fields = {name: getattr(self, name) for name in type(self).model_fields}
        fields.update(update)
        made = type(self).model_validate(fields)
        return made.model_copy(deep=True) if deep else made
