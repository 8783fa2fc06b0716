"""OpenTelemetry for evidence: a log record per committed attempt and a span per concluded one.

Optional (``pip install 'sharedos[otel]'``; host configuration ``[evidence]
otlp_endpoint``). ``TelemetryStore`` wraps any evidence store: it forwards
every call unchanged and, *after* a row is committed, emits

* a log record ``sharedos.attempt`` when an attempt is committed (so an
  attempt that never gets an outcome — the host died — is still seen), and
* a span ``sharedos.tool_call`` when it is concluded, from ``started_at`` to
  ``finished_at``, with the outcome and reason (status ERROR for ``failed``;
  a denial is a correct decision, not an error).

Attributes: ``sharedos.turn_id``, ``sharedos.call_id``, ``sharedos.seq``,
``gen_ai.tool.name``, ``sharedos.outcome``, ``sharedos.reason``,
``sharedos.effect``, ``sharedos.resource``, ``sharedos.action``,
``sharedos.rule_ids``, ``sharedos.principal``, ``sharedos.tenant``,
``sharedos.catalog_hash``, ``sharedos.policy_hash``,
``sharedos.policy_revision``, ``sharedos.policy_kept`` (true when the record's
identity carries ``policyBundleKept``; absent otherwise). Arguments, diagnostics and error texts are
never exported. The evidence store stays the record: telemetry is batched
and best effort, and a failing exporter never fails a call (the SDK's
batch processors drop on overflow and export off the caller's thread).
"""

from __future__ import annotations

import logging
import threading
import urllib.parse
from collections import OrderedDict
from datetime import UTC, datetime, timedelta
from typing import Any

from sharedos.evidence.record import EvidenceRecord, OutcomeRecord

__all__ = ["TelemetryStore", "otlp_providers"]

logger = logging.getLogger("sharedos.evidence")
_MAX_OPEN = 65536
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ns(stamp: str | None) -> int | None:
    if not stamp:
        return None
    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        # integer arithmetic: a float timestamp loses the microseconds
        return ((moment - _EPOCH) // timedelta(microseconds=1)) * 1000
    except (ValueError, OverflowError):
        return None


def _attributes(rec: EvidenceRecord, seq: int) -> dict[str, Any]:
    identity = rec.identity if isinstance(rec.identity, dict) else {}
    pairs: dict[str, Any] = {
        "sharedos.turn_id": rec.turn_id,
        "sharedos.call_id": rec.call_id,
        "sharedos.seq": seq,
        "gen_ai.tool.name": rec.tool,
        "sharedos.effect": rec.effect,
        "sharedos.resource": rec.resource,
        "sharedos.namespace": rec.namespace,
        "sharedos.action": rec.action,
        "sharedos.rule_ids": list(rec.rule_ids) or None,
        "sharedos.principal": rec.principal,
        "sharedos.tenant": rec.tenant,
        "sharedos.catalog_hash": rec.catalog_hash,
        "sharedos.policy_hash": rec.policy_hash,
        "sharedos.policy_revision": identity.get("policyBundleRevision"),
        # the record's policy was put in force from the host's kept copy (its source
        # failing): told apart here as on the record itself; absent otherwise
        "sharedos.policy_kept": True if identity.get("policyBundleKept") is True else None,
    }
    return {k: v for k, v in pairs.items() if v is not None}


def otlp_providers(endpoint: str, *, service_name: str = "sharedos") -> tuple[Any, Any]:
    """(TracerProvider, LoggerProvider) exporting OTLP/HTTP to ``endpoint`` in batches."""
    try:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise RuntimeError(
            "an OTLP endpoint is configured but OpenTelemetry is not installed "
            f"(pip install 'sharedos[otel]'): {exc}"
        ) from None
    resource = Resource.create({"service.name": service_name})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=signal_url(endpoint, "traces"), timeout=5))
    )
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(
        BatchLogRecordProcessor(OTLPLogExporter(endpoint=signal_url(endpoint, "logs"), timeout=5))
    )
    _mask_in_exporter_logs(endpoint)
    return tracer_provider, logger_provider


def signal_url(endpoint: str, signal: str) -> str:
    """The OTLP/HTTP URL of one signal (``traces``, ``logs``) under the base ``endpoint``:
    ``/v1/<signal>`` appended to its path, its query (an ``?api-key=`` some collectors
    take) kept after it."""
    parts = urllib.parse.urlsplit(endpoint)
    return urllib.parse.urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}/v1/{signal}"))


class _MaskSecrets(logging.Filter):
    """Rewrites a log record with the given texts masked, its traceback included.

    The exporters and the HTTP library below them log the URL they failed to reach
    (``Max retries exceeded with url: /v1/traces?api-key=...``) when the collector is
    down; an endpoint's credentials must not reach the host's stderr that way."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not format: shown as its template
            message = str(record.msg)
        trace = record.exc_text
        if record.exc_info and not trace:
            trace = logging.Formatter().formatException(record.exc_info)
        # the longest first: a percent-decoded value may hold an encoded one
        for secret in sorted(self.secrets, key=len, reverse=True):
            message = message.replace(secret, "***")
            if trace:
                trace = trace.replace(secret, "***")
        record.msg, record.args = message, ()
        record.exc_info, record.exc_text = None, trace
        return True


#: the loggers (by name prefix) that may print an exporter's URL
_EXPORT_LOGGERS = ("opentelemetry", "urllib3", "requests")


def _mask_in_exporter_logs(endpoint: str) -> None:
    from sharedos.bundles.source import url_credentials

    # what a host holds as the endpoint's credentials (its password, a query value named
    # as one, the fragment); a value of a few characters would mask every digit it holds
    secrets = {value for value in url_credentials(endpoint) if len(value) >= 4}
    if not secrets:
        return
    manager = logging.Logger.manager
    names = [n for n in list(manager.loggerDict) if n.split(".", 1)[0] in _EXPORT_LOGGERS]
    for name in (*_EXPORT_LOGGERS, *names):
        # a filter applies to the records of its own logger only, not its children's
        target = logging.getLogger(name)
        mask = next((f for f in target.filters if isinstance(f, _MaskSecrets)), None)
        if mask is None:
            mask = _MaskSecrets()
            target.addFilter(mask)
        mask.secrets |= secrets


class TelemetryStore:
    """An evidence store that also tells OpenTelemetry about every attempt (see the module docs)."""

    def __init__(self, inner: Any, tracer_provider: Any, logger_provider: Any) -> None:
        self.inner = inner
        self._tracer = tracer_provider.get_tracer("sharedos.evidence")
        self._logger = logger_provider.get_logger("sharedos.evidence")
        self._providers = (tracer_provider, logger_provider)
        self._open: OrderedDict[int, EvidenceRecord] = OrderedDict()
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        # everything else (query, counts, iter_links, open_turn, seal_turn, ...) is the store's
        return getattr(self.inner, name)

    # -- writes: forwarded, then told ---------------------------------------------------

    def begin(self, attempt: EvidenceRecord) -> int:
        """The store's ``begin``; then a log record for the committed attempt."""
        seq = int(self.inner.begin(attempt))
        with self._lock:
            self._open[seq] = attempt
            if len(self._open) > _MAX_OPEN:
                self._open.popitem(last=False)
        self._quietly(self._log, attempt, seq)
        return seq

    def finish(self, seq: int, outcome: OutcomeRecord) -> None:
        """The store's ``finish``; then the attempt's span."""
        self.inner.finish(seq, outcome)
        with self._lock:
            attempt = self._open.pop(int(seq), None)
        if attempt is not None:
            self._quietly(self._span, attempt.with_outcome(outcome), int(seq))

    def record(self, record: EvidenceRecord) -> int:
        """The store's ``record``; then its log record and span."""
        seq = int(self.inner.record(record))
        self._quietly(self._log, record, seq)
        self._quietly(self._span, record, seq)
        return seq

    def commit_group(self, ops: list[tuple[str, tuple[Any, ...]]]) -> list[tuple[bool, Any]]:
        """The store's group commit; then what each write that landed tells, as alone."""
        results: list[tuple[bool, Any]] = self.inner.commit_group(ops)
        for (kind, args), (ok, value) in zip(ops, results, strict=True):
            if ok:
                self._tell(kind, args, value)
        return results

    def try_now(self, kind: str, *args: Any) -> tuple[bool, Any]:
        """The store's no-wait commit (``SqliteEvidenceStore.try_now``, the recorder's usual
        way to an idle store); then what the write tells, as alone. ``(False, None)`` (go
        the long way) for a store without one."""
        inner = getattr(self.inner, "try_now", None)
        if inner is None:
            return False, None
        done, value = inner(kind, *args)
        if done:
            self._tell(kind, args, value)
        return done, value

    def _tell(self, kind: str, args: tuple[Any, ...], value: Any) -> None:
        """Telemetry for one landed write (``begin``, ``finish`` or ``record``) given as
        ``(kind, args)`` with the store's answer ``value``."""
        if kind == "begin":
            with self._lock:
                self._open[int(value)] = args[0]
                if len(self._open) > _MAX_OPEN:
                    self._open.popitem(last=False)
            self._quietly(self._log, args[0], int(value))
        elif kind == "finish":
            with self._lock:
                attempt = self._open.pop(int(args[0]), None)
            if attempt is not None:
                self._quietly(self._span, attempt.with_outcome(args[1]), int(args[0]))
        else:
            self._quietly(self._log, args[0], int(value))
            self._quietly(self._span, args[0], int(value))

    # -- emitting --------------------------------------------------------------------------

    def _quietly(self, emit: Any, rec: EvidenceRecord, seq: int) -> None:
        try:
            emit(rec, seq)
        except Exception as exc:  # telemetry never fails a call
            logger.warning("sharedos: OpenTelemetry emit failed: %s", exc)

    def _log(self, rec: EvidenceRecord, seq: int) -> None:
        from opentelemetry._logs import SeverityNumber

        self._logger.emit(
            timestamp=_ns(rec.started_at),
            severity_number=SeverityNumber.INFO,
            severity_text="INFO",
            body=f"attempt {rec.call_id} {rec.tool} in turn {rec.turn_id}",
            attributes=_attributes(rec, seq),
            event_name="sharedos.attempt",
        )

    def _span(self, rec: EvidenceRecord, seq: int) -> None:
        from opentelemetry.trace import SpanKind, Status, StatusCode

        start = _ns(rec.started_at)
        end = _ns(rec.finished_at) or start
        attrs = _attributes(rec, seq)
        attrs["sharedos.outcome"] = str(rec.outcome)
        if rec.reason is not None:
            attrs["sharedos.reason"] = str(rec.reason)
        span = self._tracer.start_span(
            "sharedos.tool_call", kind=SpanKind.INTERNAL, start_time=start, attributes=attrs
        )
        if str(rec.outcome) == "failed":
            span.set_status(Status(StatusCode.ERROR, str(rec.reason or "failed")))
        span.end(end_time=end)

    def close(self) -> None:
        """Flush telemetry, then close the store."""
        for provider in self._providers:
            try:
                provider.force_flush()
                provider.shutdown()
            except Exception as exc:
                logger.warning("sharedos: OpenTelemetry shutdown failed: %s", exc)
        self.inner.close()

    def __enter__(self) -> TelemetryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
