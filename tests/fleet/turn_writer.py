"""One writer of a shared turn: ``python -m tests.fleet.turn_writer URL NAME CALLS``.

Opens the PostgreSQL store at URL and writes CALLS attempts with their outcomes
(``begin``, ``finish``) into turn ``T`` as fast as it can, while other writers do
the same; prints ``FAILED <n> <first error>`` (``FAILED 0 -`` when none failed).
"""

from __future__ import annotations

import sys

from sharedos.evidence.postgres import PostgresEvidenceStore
from sharedos.evidence.store import EvidenceStoreError
from tests.evidence.test_postgres import OK, attempt


def main(url: str, name: str, calls: int) -> None:
    store = PostgresEvidenceStore(url)
    errors: list[str] = []
    try:
        for i in range(calls):
            try:
                store.finish(store.begin(attempt(f"{name}{i}", "T")), OK)
            except EvidenceStoreError as exc:
                errors.append(str(exc))
    finally:
        store.close()
    print(f"FAILED {len(errors)} {errors[0] if errors else '-'}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
