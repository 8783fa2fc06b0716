"""Planted-secret grep: look for a secret in every artifact a test produced.

A test plants a secret (a random value in a forbidden file, a credential in
host configuration, a secret tool argument), runs the real system, and then
asks: does the value appear anywhere it must not — in any encoding it could
have been turned into on the way? Use it like this::

    from tests.adversarial.planted import SecretScan, plant

    secret = plant("salary")                 # a fresh, unguessable value
    ...run the system...
    scan = SecretScan(secret)                # or SecretScan(s1, s2, ...)
    scan.text("tool result", json.dumps(result.to_mcp()))
    scan.evidence(db_path)                   # `sharedos evidence export` + the raw db/WAL bytes
    scan.tree(reports_dir)                   # every file below a directory
    scan.file(log_path)
    scan.captured(capfd)                     # pytest's captured stdout/stderr so far
    scan.assert_clean()                      # fails, naming artifact, encoding and offset

``SecretScan.check(...)`` returns the findings instead of failing. Each
secret is searched in these forms (``encodings_of``): raw; JSON string
escaping (``ensure_ascii`` on and off, and JSON inside JSON); ``repr`` /
``ascii`` escaping; other languages' JSON (PHP's ``\\/``, Go's ``\\u0026``); HTML
escaping; percent-encoding (``quote``, ``quote_plus``, JavaScript's
``encodeURIComponent``); base64 (standard and URL-safe, at each of the three byte
alignments, so the value is found inside a longer encoded blob); hex. The
search folds ASCII case (an upper-cased or lower-hex copy is still a leak).
Everything is searched as bytes for the UTF-8 of every form (and the raw
value as UTF-16), so binary artifacts (SQLite pages) are covered too.

Secrets shorter than ``MIN_SECRET`` characters are refused: a short value
matches by chance and would make a test flaky rather than strict.
"""

from __future__ import annotations

import base64
import html
import json
import os
import secrets as _secrets
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

#: the shortest secret a scan accepts (shorter ones match by chance)
MIN_SECRET = 12
#: the shortest base64 core searched for (the aligned middle of an encoding)
_MIN_B64_CORE = 12


def plant(label: str = "secret") -> str:
    """A fresh secret value, unguessable and easy to spot: ``PLANTED-<label>-<32 hex>``."""
    return f"PLANTED-{label}-{_secrets.token_hex(16)}"


def files_below(directory: str | os.PathLike[str]) -> Iterator[Path]:
    """Every regular file below ``directory``, any depth (iterative; links not followed)."""
    stack = [Path(directory)]
    while stack:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                stack.append(Path(e.path))
            elif e.is_file(follow_symlinks=False):
                yield Path(e.path)


def sharedos_cli() -> list[str]:
    """The ``sharedos`` command of this environment (the installed console script)."""
    script = Path(sys.executable).parent / "sharedos"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from sharedos.cli.main import main; main()"]


def _b64_cores(raw: bytes) -> list[tuple[str, str]]:
    """The base64 characters that depend only on ``raw``, at each byte alignment."""
    out: list[tuple[str, str]] = []
    for name, enc in (("base64", base64.b64encode), ("base64url", base64.urlsafe_b64encode)):
        for k in range(3):
            text = enc(b"\0" * k + raw).decode("ascii")
            start = -(-k * 8 // 6)  # the first character with no bit of the prefix
            end = ((k + len(raw)) * 8) // 6  # the last with no bit of what follows
            core = text[start:end]
            if len(core) >= _MIN_B64_CORE:
                out.append((f"{name}@{k}", core))
    return out


def encodings_of(secret: str) -> dict[str, str]:
    """Every textual form ``secret`` may take in an artifact, by name (duplicates dropped)."""
    if len(secret) < MIN_SECRET:
        raise ValueError(f"a planted secret needs at least {MIN_SECRET} characters")
    raw = secret.encode("utf-8")
    forms: dict[str, str] = {
        "raw": secret,
        "json": json.dumps(secret)[1:-1],
        "json-unicode": json.dumps(secret, ensure_ascii=False)[1:-1],
        "json-in-json": json.dumps(json.dumps(secret)[1:-1])[1:-1],
        # other languages' JSON: PHP escapes "/", Go writes <, > and & as \u003c...
        "json-slash": json.dumps(secret)[1:-1].replace("/", "\\/"),
        "json-go": json.dumps(secret)[1:-1]
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026"),
        "repr": repr(secret)[1:-1],
        "ascii": ascii(secret)[1:-1],
        "bytes-repr": repr(raw)[2:-1],
        "html": html.escape(secret),
        "percent": quote(secret, safe=""),
        "percent-plus": quote_plus(secret, safe=""),
        "percent-js": quote(secret, safe="!'()*~"),  # JavaScript's encodeURIComponent
        "hex": raw.hex(),
    }
    forms.update(_b64_cores(raw))
    unique: dict[str, str] = {}
    for name, form in forms.items():
        if form and form not in unique.values():
            unique[name] = form
    return unique


@dataclass(frozen=True, slots=True)
class Finding:
    """One place a secret was found."""

    artifact: str
    encoding: str
    offset: int
    excerpt: str

    def __str__(self) -> str:
        return f"{self.artifact} @ {self.offset} ({self.encoding}): ...{self.excerpt}..."


class SecretScan:
    """Collects artifacts and reports every place one of the secrets appears."""

    def __init__(self, *secret_values: str) -> None:
        if not secret_values:
            raise ValueError("SecretScan needs at least one secret")
        self._forms: list[tuple[str, bytes]] = []
        for value in secret_values:
            for name, form in encodings_of(value).items():
                self._forms.append((name, form.encode("utf-8").lower()))
            self._forms.append(("utf-16", value.encode("utf-16-le").lower()))
        self.findings: list[Finding] = []
        self.scanned: list[str] = []

    # -- artifacts ------------------------------------------------------------------
    def text(self, artifact: str, value: str | bytes) -> list[Finding]:
        """Search one string (or bytes) named ``artifact``."""
        data = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
        folded = data.lower()  # ASCII case folding: same length, so offsets stay true
        self.scanned.append(artifact)
        found: list[Finding] = []
        for name, needle in self._forms:
            if name == "utf-16" and isinstance(value, str):
                continue  # a str cannot hold UTF-16 code units as bytes
            at = folded.find(needle)
            while at != -1:
                lo, hi = max(0, at - 30), at + len(needle) + 30
                excerpt = data[lo:hi].decode("utf-8", "backslashreplace")
                found.append(Finding(artifact, name, at, excerpt))
                at = folded.find(needle, at + 1)
        # one finding per place: the raw form also matches inside e.g. "json-unicode"
        seen: set[tuple[str, int]] = set()
        for f in found:
            if (f.artifact, f.offset) not in seen:
                seen.add((f.artifact, f.offset))
                self.findings.append(f)
        return found

    def json_value(self, artifact: str, value: Any) -> list[Finding]:
        """Search a JSON-able value, encoded both with and without ``ensure_ascii``."""
        found = self.text(artifact, json.dumps(value, default=repr, ensure_ascii=False))
        found += self.text(artifact + " (ascii json)", json.dumps(value, default=repr))
        return found

    def file(self, path: str | os.PathLike[str]) -> list[Finding]:
        """Search one file's bytes (missing files are recorded as scanned, not an error)."""
        p = Path(path)
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            self.scanned.append(f"{p} (absent)")
            return []
        return self.text(str(p), data)

    def tree(self, directory: str | os.PathLike[str]) -> list[Finding]:
        """Search every regular file below ``directory`` (links are not followed)."""
        found: list[Finding] = []
        for path in files_below(directory):
            found += self.file(path)
        return found

    def evidence(self, db: str | os.PathLike[str], *, turn: str | None = None) -> list[Finding]:
        """Search an evidence store: the CLI's export (``sharedos evidence export``) and raw bytes.

        The export is what an operator publishes; the raw database, WAL and
        journal bytes catch a value stored in a column the export omits.
        """
        db = Path(db)
        cmd = [*sharedos_cli(), "evidence", "export", "--db", str(db)]
        if turn is not None:
            cmd += ["--turn", turn]
        proc = subprocess.run(cmd, capture_output=True, timeout=120, check=False)
        if proc.returncode != 0:
            raise AssertionError(
                f"sharedos evidence export failed ({proc.returncode}): "
                f"{proc.stderr.decode('utf-8', 'replace')[-2000:]}"
            )
        found = self.text(f"evidence export of {db.name}", proc.stdout)
        found += self.text(f"evidence export of {db.name} (stderr)", proc.stderr)
        for suffix in ("", "-wal", "-journal", "-shm"):
            found += self.file(f"{db}{suffix}")
        return found

    def captured(self, capture: Any) -> list[Finding]:
        """Search what pytest's ``capsys``/``capfd`` captured so far (re-emitted unchanged)."""
        out, err = capture.readouterr()
        sys.stdout.write(out)
        sys.stderr.write(err)
        return self.text("captured stdout", out) + self.text("captured stderr", err)

    def check(self, sources: Iterable[tuple[str, str | bytes]] = ()) -> list[Finding]:
        """Search extra ``(artifact, text)`` pairs; return every finding so far."""
        for artifact, value in sources:
            self.text(artifact, value)
        return list(self.findings)

    def assert_clean(self) -> None:
        """Fail, listing each artifact, encoding and offset, if any secret was found."""
        if self.findings:
            lines = "\n  ".join(str(f) for f in self.findings[:50])
            more = len(self.findings) - 50
            raise AssertionError(
                f"a planted secret leaked ({len(self.findings)} places"
                + (f", first 50 shown; {more} more" if more > 0 else "")
                + f"):\n  {lines}"
            )
