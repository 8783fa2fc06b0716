"""``EvidenceRecorder``: the records owed to refused calls, written before a host goes away."""

from __future__ import annotations

import time
from pathlib import Path

from sharedos.evidence import EvidenceRecord, SqliteEvidenceStore, arguments_digest
from sharedos.kernel.recorder import EvidenceRecorder


def _attempt(call: str) -> EvidenceRecord:
    return EvidenceRecord(
        turn_id="T",
        call_id=call,
        tool="files.write",
        started_at="2026-12-07T08:00:00.000000Z",
        arguments_digest=arguments_digest({"path": "/public/x"}),
        arguments={"path": "/public/x"},
        effect="allow",
        resource="/public/x",
    )


def test_settling_waits_for_owed_records_the_writer_thread_is_writing(tmp_path: Path) -> None:
    """A host about to exit settles the records it owes refused calls. When the writer
    thread had already started writing them (a write landed: the store answers again),
    ``settle_unwritten`` returned at once, saying some were still unwritten, and the host
    exited while the writer was half-way: a CI run recorded 27 of 40 refused calls. It
    waits for that pass now, and every owed record is in the store when it returns."""
    store = SqliteEvidenceStore(tmp_path / "evidence.sqlite")
    recorder = EvidenceRecorder(store)
    try:

        def slow_write(call: str) -> None:
            time.sleep(0.05)  # a lower bound: the writer is still busy when settling starts
            store.begin(_attempt(call))

        for i in range(6):
            recorder._keep_owed(lambda i=i: slow_write(f"owed{i}"))  # type: ignore[misc]
        recorder._settle_owed()  # what a landed write does: the writer thread takes them
        assert recorder.settle_unwritten() == 0
        assert sorted(r.call_id for r in store.query()) == [f"owed{i}" for i in range(6)]
    finally:
        store.close()
