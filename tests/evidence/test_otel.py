# ruff: noqa: F811  (pytest fixtures imported from tests.evidence.stores)
"""OpenTelemetry per attempt: a log record when the attempt commits, a span when it concludes.

Checked twice: with the SDK's in-memory exporters (what was emitted), and over
real OTLP/HTTP to a collector stand-in on 127.0.0.1 that decodes the protobuf
requests with the OpenTelemetry protocol package (what goes on the wire).
"""

from __future__ import annotations

import contextlib
import http.server
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from sharedos.evidence import EvidenceRecord, arguments_digest
from sharedos.evidence.otel import TelemetryStore, otlp_providers
from sharedos.evidence.record import OutcomeRecord
from sharedos.outcomes import Outcome, ReasonCode
from tests.evidence.stores import Opener, backend, opener, store  # noqa: F401  (fixtures)


def attempt(call: str, **kw: Any) -> EvidenceRecord:
    base: dict[str, Any] = {
        "turn_id": "T",
        "call_id": call,
        "tool": "files.write",
        "started_at": "2026-12-02T10:00:00.000000Z",
        "arguments_digest": arguments_digest({"path": "/public/x", "token": "s3cret"}),
        "arguments": {"path": "/public/x", "token": "s3cret-value"},
        "resource": "/public/x",
        "principal": "alice",
        "identity": {"policyBundleRevision": "r7"},
        "policy_hash": "p" * 64,
    }
    base.update(kw)
    return EvidenceRecord(**base)


def _told(store: Any) -> tuple[TelemetryStore, InMemorySpanExporter, Any]:
    """``store`` behind a ``TelemetryStore`` exporting to memory: (it, its spans, its logs)."""
    spans = InMemorySpanExporter()
    logs = InMemoryLogRecordExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    lp = LoggerProvider()
    lp.add_log_record_processor(SimpleLogRecordProcessor(logs))
    return TelemetryStore(store, tp, lp), spans, logs


@pytest.fixture
def telemetry(store: Any) -> Iterator[tuple[TelemetryStore, InMemorySpanExporter, Any]]:
    yield _told(store)


def test_a_span_and_a_log_record_per_attempt(telemetry: Any) -> None:
    tstore, spans, logs = telemetry
    a = tstore.begin(attempt("a1"))
    tstore.finish(a, OutcomeRecord(Outcome.SUCCEEDED, "2026-12-02T10:00:00.250000Z", 250.0))
    b = tstore.begin(attempt("a2"))  # never concluded: the host "died"
    tstore.finish(
        tstore.begin(attempt("a3")),
        OutcomeRecord(Outcome.FAILED, "2026-12-02T10:00:01Z", 1000.0, ReasonCode.HANDLER_ERROR),
    )
    tstore.record(
        attempt(
            "d1",
            outcome=Outcome.DENIED,
            reason=ReasonCode.FORBIDDEN,
            finished_at="2026-12-02T10:00:00.000100Z",
            duration_ms=0.1,
        )
    )
    # the store got everything, unchanged
    assert tstore.counts().total == 4 and tstore.counts().interrupted == 1
    # one log record per committed attempt, the interrupted one included
    records = [r.log_record for r in logs.get_finished_logs()]
    assert sorted(r.attributes["sharedos.call_id"] for r in records) == ["a1", "a2", "a3", "d1"]
    interrupted = next(r for r in records if r.attributes["sharedos.call_id"] == "a2")
    assert interrupted.attributes["sharedos.seq"] == b
    # one span per concluded attempt, timed from started_at to finished_at
    finished = {s.attributes["sharedos.call_id"]: s for s in spans.get_finished_spans()}
    assert sorted(finished) == ["a1", "a3", "d1"]
    ok = finished["a1"]
    assert ok.name == "sharedos.tool_call"
    assert (ok.end_time - ok.start_time) == 250_000_000
    assert ok.attributes["sharedos.outcome"] == "succeeded"
    assert ok.attributes["gen_ai.tool.name"] == "files.write"
    assert ok.attributes["sharedos.policy_revision"] == "r7"
    assert finished["a3"].status.status_code is StatusCode.ERROR
    assert finished["d1"].attributes["sharedos.reason"] == "forbidden"
    assert finished["d1"].status.status_code is StatusCode.UNSET
    # arguments never leave through telemetry
    for item in [*records, *finished.values()]:
        assert "s3cret" not in repr(dict(item.attributes))


def test_a_record_of_a_run_on_the_kept_bundle_says_so_in_telemetry(telemetry: Any) -> None:
    """A record of a run whose bundle was put in force from the host's kept copy (its
    source failing) carries ``policyBundleKept`` in its identity; its span and log record
    carried the revision only, so a collector could not tell those calls from calls
    decided on a release fetched. They now carry ``sharedos.policy_kept``."""
    tstore, spans, logs = telemetry
    kept = {"policyBundleRevision": "r7", "policyBundleKept": True}
    done = OutcomeRecord(Outcome.SUCCEEDED, "2026-12-02T10:00:00.250000Z", 250.0)
    tstore.finish(tstore.begin(attempt("k1", identity=kept)), done)
    tstore.finish(tstore.begin(attempt("f1")), done)
    emitted = [r.log_record for r in logs.get_finished_logs()] + list(spans.get_finished_spans())
    by_call: dict[str, list[Any]] = {}
    for item in emitted:
        by_call.setdefault(item.attributes["sharedos.call_id"], []).append(item)
    assert [i.attributes.get("sharedos.policy_kept") for i in by_call["k1"]] == [True, True]
    assert all("sharedos.policy_kept" not in i.attributes for i in by_call["f1"])


def test_a_failing_exporter_never_fails_a_call(store: Any) -> None:
    class Broken:
        def get_tracer(self, name: str) -> Any:
            raise_on = self

            class T:
                def start_span(self, *a: Any, **k: Any) -> Any:
                    raise RuntimeError("collector down")

            del raise_on
            return T()

        def get_logger(self, name: str) -> Any:
            class L:
                def emit(self, *a: Any, **k: Any) -> None:
                    raise RuntimeError("collector down")

            return L()

    tstore = TelemetryStore(store, Broken(), Broken())
    seq = tstore.begin(attempt("x"))
    tstore.finish(seq, OutcomeRecord(Outcome.SUCCEEDED, "2026-12-02T10:00:01Z", 1.0))
    assert store.counts().by_outcome == {"succeeded": 1}


class _Collector(http.server.BaseHTTPRequestHandler):
    """A stand-in OTLP/HTTP collector: decodes what it is sent, answers 200."""

    received: dict[str, list[bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.received.setdefault(self.path, []).append(body)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _collector() -> Iterator[http.server.ThreadingHTTPServer]:
    """A real OTLP/HTTP collector on a free port; ``received`` maps each path to its bodies."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    server.received = {}  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _export_one(store: Any, endpoint: str) -> None:
    tp, lp = otlp_providers(endpoint)
    tstore = TelemetryStore(store, tp, lp)
    seq = tstore.begin(attempt("wire"))
    tstore.finish(seq, OutcomeRecord(Outcome.SUCCEEDED, "2026-12-02T10:00:01Z", 1.0))
    tstore.close()  # flushes both batch processors


def test_spans_and_logs_reach_an_otlp_http_endpoint(store: Any) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    with _collector() as server:
        _export_one(store, f"http://127.0.0.1:{server.server_port}")
    received = server.received  # type: ignore[attr-defined]
    traces = trace_service_pb2.ExportTraceServiceRequest()
    traces.ParseFromString(b"".join(received["/v1/traces"][:1]))
    (span,) = [s for rs in traces.resource_spans for ss in rs.scope_spans for s in ss.spans]
    attrs = {a.key: a.value for a in span.attributes}
    assert span.name == "sharedos.tool_call"
    assert attrs["sharedos.call_id"].string_value == "wire"
    assert attrs["sharedos.outcome"].string_value == "succeeded"
    logs = logs_service_pb2.ExportLogsServiceRequest()
    logs.ParseFromString(b"".join(received["/v1/logs"][:1]))
    (log,) = [r for rl in logs.resource_logs for sl in rl.scope_logs for r in sl.log_records]
    assert "wire" in log.body.string_value


def test_an_endpoint_with_a_path_and_a_query_keeps_both(store: Any) -> None:
    """``/v1/traces`` goes after the endpoint's path, its ``?api-key=`` after that (it was
    appended to the query: ``/otel?api-key=K/v1/traces``, a path no collector serves)."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    with _collector() as server:
        _export_one(store, f"http://127.0.0.1:{server.server_port}/otel/?api-key=K1")
    assert sorted(server.received) == [  # type: ignore[attr-defined]
        "/otel/v1/logs?api-key=K1",
        "/otel/v1/traces?api-key=K1",
    ]


def test_a_collector_that_is_down_is_logged_without_the_endpoints_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The exporter logs the URL it failed to reach; the endpoint's key is masked there."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    caplog.set_level(logging.WARNING)
    tp, lp = otlp_providers(f"http://user:PW-7c1e@127.0.0.1:{port}/o?api-key=KEY-93ab&x=1")
    with tp.get_tracer("t").start_as_current_span("s"):
        pass
    # the batch's export retries for up to 5 s; a shutdown waits for it: flush beside it
    flushing = threading.Thread(target=tp.force_flush, daemon=True)
    flushing.start()
    deadline = time.monotonic() + 10
    while "Transient error" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.02)
    tp.shutdown()
    lp.shutdown()
    flushing.join()
    assert "Transient error" in caplog.text  # the exporter did log its failure
    assert "/o/v1/traces?api-key=***&x=1" in caplog.text
    assert "KEY-93ab" not in caplog.text and "PW-7c1e" not in caplog.text


def test_writes_the_host_commits_at_once_are_told_too(tmp_path: Any) -> None:
    """The host writes through ``EvidenceRecorder``, whose usual way to an idle SQLite
    store is its no-wait commit (``try_now``): ``TelemetryStore`` forwarded it to the
    store untold, so ``sharedos run`` with ``otlp_endpoint`` exported nothing at all."""
    import asyncio

    from sharedos.evidence.sqlite import SqliteEvidenceStore
    from sharedos.kernel.recorder import EvidenceRecorder

    tstore, spans, logs = _told(SqliteEvidenceStore(tmp_path / "e.sqlite"))
    done = OutcomeRecord(Outcome.SUCCEEDED, "2026-12-02T10:00:01Z", 1.0)

    async def host() -> None:
        recorder = EvidenceRecorder(tstore)
        seq = await recorder.begin(attempt("fast"), lambda why: done)
        await recorder.finish(seq, done, lambda why: done)
        denied = attempt(
            "refused", outcome=Outcome.DENIED, reason=ReasonCode.FORBIDDEN, duration_ms=0.1
        )
        await recorder.record(denied, lambda why: done)

    try:
        asyncio.run(host())
        assert tstore.counts().total == 2
        told = [r.log_record.attributes["sharedos.call_id"] for r in logs.get_finished_logs()]
        assert sorted(told) == ["fast", "refused"]
        spanned = [s.attributes["sharedos.call_id"] for s in spans.get_finished_spans()]
        assert sorted(spanned) == ["fast", "refused"]
    finally:
        tstore.close()
