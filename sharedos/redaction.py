"""Secrets out of everything SharedOS keeps or shows: the one redactor (``Redactor``).

Every place a secret value could leave SharedOS — an evidence record, a
result or refusal a model reads, a report, a harness CLI's streamed output,
an upstream's relayed text, stderr and server name — is scrubbed by a
``Redactor``, built from everything the host knows is secret at that point:
the host's own credentials (``RuntimeHost(host_secrets=...)``, a host
configuration's values), a tool's credentials (a brokered upstream's, in
every encoding below), and the values of the arguments a tool declares
secret. The kernel builds one per call (``Redactor.union`` of what it has
cached per host and per tool) and applies it to every field of the record
and every text of the answer; the upstream layer, the harness runner and the
conformance reports build theirs from the credentials they hold.

Two tools, in this order:

1. **Structural redaction** (``redact_fields``, ``non_object_marker``): a
   field a tool marks secret is replaced by ``"[redacted]"`` whatever its
   value (no length floor, no substring search); arguments that are not a
   JSON object are never stored at all (a marker with their JSON type and
   size is).
2. **Scrubbing** (``Redactor``): every secret *value* is replaced by
   ``"[redacted]"`` wherever it still occurs, in every form it can take in
   text SharedOS relays (``encodings``): raw; JSON-escaped (ASCII and UTF-8,
   also as other languages' encoders write it: PHP's ``\\/``, Go's HTML-safe
   ``\\u003c``), and JSON-escaped twice (JSON text inside a JSON string); ``repr``-escaped
   in every quote style, ``ascii()``- and ``unicode_escape``-escaped, the
   ``repr`` of its UTF-8 bytes; HTML-escaped (of the raw and the JSON forms);
   hex (lower and upper case); percent-encoded (``quote``, ``quote_plus``,
   lower-case escapes, and what JavaScript's encodeURIComponent and encodeURI and
   Go's PathEscape leave unescaped); base64 in the standard and URL-safe alphabets,
   padded or not, plus the characters that depend only on the value at each
   of the three byte alignments, so it is cut out of a longer encoded blob.
   A secret cut by line breaks (a blob wrapped at 76 or 60 columns, a hex dump at
   a width, the breaks real or written ``\\n`` in JSON text) is found with them
   taken out, and replaced breaks and all (with no step per break: ``_broken``).
   Longest forms first: an encoded form is replaced before a shorter form
   inside it could break it up. Every form is matched whatever its letters' case
   (a header value lowercased on its way, a hex dump in capitals is still the
   secret).

**One minimum length**, ``MIN_SECRET_CHARS`` (8): a shorter value is not
searched for as a substring — replacing a few characters everywhere would
mangle every message and reveal the value by the pattern of replacements, and
below 8 bytes the base64 of a value inside a longer blob has no stable
characters to find. Such a value is still redacted structurally wherever it is
a field, and an upstream credential that short is refused outright
(``sharedos.upstream.secrets``).
"""

from __future__ import annotations

import base64
import contextlib
import html
import json
import os
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote_plus

#: names of env entries, headers or query parameters that can only be credentials: one
#: holding token, secret, auth, ... anywhere, or a part (between ``_``, ``-``, ``.``) that
#: ends in key (``OPENAI_KEY``, ``ACCESS_KEY_ID``, ``MASTERKEY``, ``?key=``) or is a pass
#: (``DB_PASS``, ``PASSPHRASE``, ``PASSWD``)
SECRET_NAME_RE = re.compile(
    r"(token|secret|passw|pwd|auth|cookie|credential|session"
    r"|keys?(?:$|[_.-])|pass(?:phrase|code)|(?:^|[_.-])pass(?:$|[_.-]))",
    re.IGNORECASE,
)

#: a URL carrying a password (``postgresql://app:PASSWORD@db/app``, ``redis://:PASSWORD@h``)
#: anywhere in a text: a credential, whatever the setting holding it is named. A password
#: may hold an unencoded ``/``, ``?`` or ``#`` (a base64 one: ``app:Zm9v/YmFy@db``); what
#: follows the ``:`` is a port, not a password, when it is digits up to a ``/``, ``?`` or
#: ``#`` (``https://h:8443/pkg@1.2``), and a ``[`` starts an IPv6 host, not a user
URL_PASSWORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s:\[\]]*:(?!\d*[/?#])[^@\s]+@")
#: a URL's query (``postgresql://db/app?sslpassword=PASSWORD``, ``https://h/x?token=T``)
_URL_QUERY_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s?#]*\?([^\s#]*)")
#: a password given as a keyword, variable or option (libpq's ``host=db password=PW``,
#: ``sslpassword=``, ``PGPASSWORD=PW`` after ``env``, ``MYSQL_PWD=``, ``--db-password=PW``,
#: ``-Dssl.keyStorePassword=PW``): never a name that only starts so (``--password-file``,
#: ``PASSWORD_FILE=/run/x``), nor ``PWD=`` (a directory)
_KEYWORD_PASSWORD_RE = re.compile(
    r"(?:passw(?:or)?d|passphrase|[_-]pwd)\s*=\s*[^\s'\"&;]", re.IGNORECASE
)


#: the last word of an option, keyword or header that names a credential's value (a name
#: ending so: ``PGPASSWORD``, ``keyStorePassword``, ``--access-token``, ``clientSecret``)
_CREDENTIAL_ENDINGS = ("password", "passwd", "passphrase", "passcode", "token", "secret", "apikey")
#: what makes a last word ``key`` a credential's name (``--api-key``, ``AWS_SECRET_ACCESS_KEY``,
#: ``X-Api-Key``): never ``--sort-key``, ``--primary-key``, ``-Dcache.key``
_KEY_QUALIFIERS = frozenset(
    {"api", "access", "secret", "private", "master", "auth", "client", "license", "subscription"}
)
#: headers that carry a credential whatever their name says
_CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
_WORD_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
#: ``NAME=VALUE`` inside a text: an option (``--api-key=V``, ``-Dx.password=V``), a libpq
#: keyword (``password=V``), an env(1) assignment (``GITHUB_TOKEN=V``)
_ASSIGNMENT_RE = re.compile(r"(?:^|(?<=[\s;,&?]))-{0,2}([A-Za-z][A-Za-z0-9_.-]*)\s*=\s*(\S*)")
#: a header line given as an argument (``Authorization: Bearer V``, ``--header=X-Api-Key: V``)
_HEADER_ARG_RE = re.compile(
    r"^(?:-{1,2}[A-Za-z][A-Za-z-]*=)?\s*([A-Za-z][A-Za-z0-9-]*)\s*:\s*(\S.*)$"
)
#: a quoted key and its value inside a text: JSON or a dict given as one setting (Notion's
#: ``OPENAPI_MCP_HEADERS = '{"Authorization": "Bearer ntn_..."}'``, ``{'api_key': 'K'}``)
_QUOTED_PAIR_RE = re.compile(
    r"""(["'])([A-Za-z][A-Za-z0-9_.-]*)\1\s*[:=]\s*(?:"([^"]*)"|'([^']*)'|([^\s,;}\]"']+))"""
)
#: an unquoted JSON value that is no credential
_JSON_LITERALS = frozenset({"null", "true", "false"})
#: an option whose value is the next argument (``--api-key V``, ``--password V``)
_OPTION_RE = re.compile(r"^-{1,2}([A-Za-z][A-Za-z0-9_.-]*)$")


def credential_name(name: str) -> bool:
    """Whether an option, keyword, variable or header ``name`` names a credential's value:
    its last word ends in password, token, secret, ... (``--db-password``, ``PGPASSWORD``,
    ``keyStorePassword``, ``--access-token``), is ``pass`` or a ``pwd`` after another word
    (``DB_PASS``, ``MYSQL_PWD``; never ``PWD``, a directory), or is ``key`` after api,
    access, secret, ... (``--api-key``, ``X-Api-Key``); never a name whose last word says
    where the credential is (``--password-file``, ``--token-env``, ``--private-key-path``)."""
    words = [w.lower() for w in _WORD_RE.findall(name)]
    if not words:
        return False
    last = words[-1]
    if last.endswith(_CREDENTIAL_ENDINGS) or last == "pass":
        return True
    if last == "pwd":
        return len(words) > 1
    return last == "key" and len(words) > 1 and words[-2] in _KEY_QUALIFIERS


def credential_path(value: str) -> bool:
    """Whether ``value``, given where a credential's name says the credential itself is
    (``--api-key V``, ``API_KEY = "V"``), is a file's path holding it rather than the
    credential: relative (``./k``, ``../k``), or absolute or under ``~/`` with a ``.`` in it
    (``/etc/tls/key.pem``, ``~/.ssh/id_ed25519``). A base64 credential may start with ``/``
    (``/Zm9vYmFy...``) but never holds a ``.``, so ``/`` alone says nothing; nor is it a
    file that exists here (``--private-key /run/secrets/pk``: a container's secret file)."""
    if value.startswith(("./", "../")):
        return True
    if not value.startswith(("/", "~/")):
        return False
    if "." in value:
        return True
    try:
        return os.path.isfile(os.path.expanduser(value))
    except (OSError, ValueError):  # a NUL, a name too long: no file
        return False


#: a value that only names a variable for the program to expand, after an authorization
#: scheme at most: ``${TOKEN}``, ``$TOKEN``, ``Bearer ${TOKEN}``
_REFERENCE_VALUE_RE = re.compile(r"(?:[A-Za-z]+\s+)?(?:\$\{[A-Za-z_]\w*\}|\$[A-Za-z_]\w*)")


def _a_value(value: str, *, shell: bool = False) -> bool:
    """Whether what follows a credential's name is one: not nothing, another option, a
    reference (``${VAR}``, ``Bearer ${VAR}``: for the program to expand from its own
    environment), nor a file's path (``--private-key /etc/key.pem``: a file holds the
    credential, the command line does not; ``credential_path``).

    After an option or in a header of a shell's script (``shell``), a command's output
    (``$(op read op://v/i/k)``, ``Bearer $(cat ~/.token)``) is one: the shell puts it on
    the command line it runs."""
    value = value.strip().strip("'\"")
    if shell and "$(" in value:
        return True
    return (
        bool(value)
        and not value.startswith(("-", "$"))
        and not _REFERENCE_VALUE_RE.fullmatch(value)
        and not credential_path(value)
    )


def holds_password(text: str, *, shell: bool = False) -> bool:
    """Whether ``text`` (an argument, a setting's value) writes a password or other
    credential out: a URL with ``user:password@`` (``URL_PASSWORD_RE``) or a query parameter
    named as a credential (``SECRET_NAME_RE``: ``?password=``, ``?token=``), a ``NAME=VALUE``
    whose name is a credential's (``credential_name``: a libpq ``password=``, a
    ``PGPASSWORD=`` or ``GITHUB_TOKEN=`` assignment, ``--api-key=V``), a quoted key so named
    or a credential header with its value inside JSON or a dict (Notion's documented
    ``OPENAPI_MCP_HEADERS = '{"Authorization": "Bearer ntn_..."}'``, ``{"api_key": "K"}``),
    or a header line carrying one (``Authorization: Basic ...``, ``X-Api-Key: V``)."""
    if URL_PASSWORD_RE.search(text) or _KEYWORD_PASSWORD_RE.search(text):
        return True
    for query in _URL_QUERY_RE.findall(text):
        for item in re.split(r"[&;]", query):
            key, eq, _value = item.partition("=")
            if eq and SECRET_NAME_RE.search(unquote_plus(key)):
                return True
    if any(
        # NAME=$(...) before a command is its environment, no command line: only an
        # option's (--api-key=$(...)) is a shell's value there
        credential_name(m[1]) and _a_value(m[2], shell=shell and m[0].startswith("-"))
        for m in _ASSIGNMENT_RE.finditer(text)
    ):
        return True
    for pair in _QUOTED_PAIR_RE.finditer(text):
        name, value = pair[2], pair[3] or pair[4] or pair[5] or ""
        if (
            (name.lower() in _CREDENTIAL_HEADERS or credential_name(name))
            and _a_value(value)
            and value.lower() not in _JSON_LITERALS
        ):
            return True
    header = _HEADER_ARG_RE.match(text)
    return bool(
        header
        and (header[1].lower() in _CREDENTIAL_HEADERS or credential_name(header[1]))
        and _a_value(header[2], shell=shell)
    )


#: a line of a PEM's base64 body (never its armour, nor a header: ``Proc-Type: 4,ENCRYPTED``)
_PEM_LINE_RE = re.compile(r"[A-Za-z0-9+/=]+")
#: where a PEM's lines end: a line break, or a line break written as the two characters
#: ``\n`` (how a PEM is put in one env value or ``.env`` line: ``"-----BEGIN ...-----\nMII..."``)
_PEM_BREAK_RE = re.compile(r"\r?\n|\\r\\n|\\n|\r")


def pem_body(text: str) -> list[str]:
    """A PEM key's base64 body, the lines between its armour joined, then each line on its
    own: what a process that has the key may say of it without the armour. Its lines end
    at a line break or at a ``\\n`` written out (a key put in one env value); a line that
    is no base64 (the armour, a ``Proc-Type:`` header, shared by every key) is no part."""
    lines = (ln.strip() for ln in _PEM_BREAK_RE.split(text))
    body = [ln for ln in lines if _PEM_LINE_RE.fullmatch(ln)]
    return ["".join(body), *body] if body else []


def credential_parts(value: str) -> tuple[str, ...]:
    """The credentials inside one credential's value that an upstream may say on their own:
    a JSON value's (Notion's ``OPENAPI_MCP_HEADERS = '{"Authorization": "Bearer ntn_..."}'``)
    string under a key naming a credential or a credential header (``credential_name``),
    and that string's last word (the token after ``Bearer``); never the other strings in
    it (``"Notion-Version": "2022-06-28"``), nor a piece under ``MIN_SECRET_CHARS``.

    A PEM given as the whole value (a GitHub App's private key in ``GITHUB_PRIVATE_KEY``,
    a key file under ``credentials``) has its base64 body as parts (``pem_body``), as one
    inside JSON has: the body alone, or one of its lines, is the key as much as the
    armoured text is, and scrubbing only the whole text left them recorded verbatim."""
    if not value.lstrip().startswith(("{", "[")):
        if "-----BEGIN" not in value:
            return ()
        return tuple(dict.fromkeys(p for p in pem_body(value) if len(p) >= MIN_SECRET_CHARS))
    try:
        parsed = json.loads(value)
    except ValueError:
        return ()
    found: list[str] = []

    def walk(node: Any, depth: int) -> None:
        if depth > _MAX_DEPTH:
            return
        if isinstance(node, list):
            for item in node:
                walk(item, depth + 1)
        elif isinstance(node, dict):
            for key, item in node.items():
                if isinstance(item, str) and (
                    key.lower() in _CREDENTIAL_HEADERS or credential_name(key)
                ):
                    # a PEM's (a service account's private_key) is its base64 body, joined
                    # and line by line, never its armour's last word ("KEY-----")
                    pieces = pem_body(item) if "-----BEGIN" in item else item.split()[-1:]
                    found.extend(p for p in (item, *pieces) if len(p) >= MIN_SECRET_CHARS)
                else:
                    walk(item, depth + 1)

    walk(parsed, 0)
    return tuple(dict.fromkeys(found))


def command_line_holds_password(args: Iterable[str], *, shell: bool = False) -> bool:
    """Whether a command line writes a credential out: an argument that does
    (``holds_password``), or an option naming a credential followed by its value as the
    next argument (``--api-key V``, ``--password V``, ``--client-secret V``).

    An argument of several words is read as a command line of its own too, word by word
    as a shell reads it: a script (``bash -c 'srv --api-key K'``, ``python -c
    "os.system('srv --api-key K')"``) holds K on the command line of its interpreter and
    of the program it starts, as ``srv --api-key K`` would. In one that runs a shell
    (``shell``: ``bash -c``, ``timeout 60 sh -c``) a command's output after a credential
    option (``$(op read op://v/i/k)``, ``$(cat ~/.token)``) is a value as well: the shell
    puts it on the command line it runs, which every local user reads."""
    args = list(args)
    if _holds_password_in(args, shell=shell):
        return True
    return any(
        _holds_password_in(words, shell=shell)
        for a in args
        if a.split()[1:] and not _HEADER_REFERENCE_RE.fullmatch(a)
        for words in (_script_words(a), a.split())
    )


#: a header line whose value names a variable for the program to expand, after a scheme at
#: most (mcp-remote's ``Authorization:${AUTH_HEADER}``, ``Authorization:Bearer ${TOKEN}``):
#: one value, no script to read word by word (its first word alone, ``Authorization:Bearer``,
#: would read as a header holding a literal)
_HEADER_REFERENCE_RE = re.compile(
    r"[A-Za-z0-9][\w-]*:[ \t]*(?:[A-Za-z]+[ \t]+)?(?:\$\{[A-Za-z_]\w*\}|\$[A-Za-z_]\w*)"
)


def _holds_password_in(args: list[str], *, shell: bool) -> bool:
    previous: str | None = None
    for arg in args:
        if holds_password(arg, shell=shell):
            return True
        if previous is not None and _a_value(arg, shell=shell):
            option = _OPTION_RE.match(previous)
            if option and credential_name(option[1]):
                return True
        previous = arg
    return False


def _script_words(script: str) -> list[str]:
    """The words a shell reads ``script`` as, quotes taken off (none when its quotes do not
    close); ``command_line_holds_password`` reads its words at white space too, as a
    script of another language (``os.system('srv --api-key K')``) is split."""
    try:
        return shlex.split(script)
    except ValueError:
        return []


__all__ = [
    "MIN_SECRET_CHARS",
    "NO_SECRETS",
    "REDACTED",
    "SECRET_NAME_RE",
    "URL_PASSWORD_RE",
    "Redactor",
    "command_line_holds_password",
    "credential_name",
    "credential_parts",
    "credential_path",
    "encodings",
    "holds_password",
    "non_object_marker",
    "pem_body",
    "redact_fields",
    "secret_text",
    "secret_values",
]

#: what a secret (or a secret field) is replaced with: safe inside JSON, text and HTML
REDACTED = "[redacted]"
#: secret values shorter than this are redacted as fields but not scrubbed as substrings
MIN_SECRET_CHARS = 8
#: the shortest base64 piece scrubbed on its own (the aligned middle of an encoding)
_MIN_BASE64_CORE = 10
_MAX_DEPTH = 64
#: a line break that may wrap a secret's encoding: where ``base64`` (76 columns), MIME and
#: PEM (64) or GitHub's contents API (60) wrap an encoded blob, real or written ``\\n`` in
#: JSON text (``Redactor._wrapped_spans``)
_WRAP_RE = re.compile(r"\r?\n|\\r\\n|\\n")
_PERCENT_ESCAPE = re.compile(r"%[0-9A-F]{2}")
_JSON_ASCII = json.JSONEncoder(ensure_ascii=True).encode
_JSON_UTF8 = json.JSONEncoder(ensure_ascii=False).encode


def _base64_forms(raw: bytes) -> Iterator[str]:
    """The value's base64 (both alphabets, padded and not) and its aligned cores: the
    characters that depend only on ``raw`` when it sits at byte offset 0, 1 or 2 of a
    longer encoded blob."""
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        whole = encode(raw).decode("ascii")
        yield whole
        yield whole.rstrip("=")
        for k in range(3):
            text = encode(b"\0" * k + raw).decode("ascii")
            start = -(-k * 8 // 6)  # the first character with no bit of the prefix
            end = ((k + len(raw)) * 8) // 6  # the last with no bit of what follows
            core = text[start:end]
            if len(core) >= _MIN_BASE64_CORE:
                yield core


#: what other percent-encoders leave as it is: JavaScript's encodeURIComponent and
#: encodeURI, Go's url.PathEscape (Python's ``quote`` escapes all of these but ``/``)
_URI_KEPT = ("!'()*~", ";,/?:@&=+$!'()*#~", "!$&'()*+,;=:@~")
#: how Go's encoding/json (HTML-safe by default) writes these in a string
_GO_JSON = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def _json_variants(once: str) -> set[str]:
    """A JSON string body (``once``) as every JSON encoder SharedOS meets may write it:
    Python's; with ``/`` escaped (PHP's json_encode, some Java); HTML-safe (Go); both."""
    go = once
    for char, escaped in _GO_JSON.items():
        go = go.replace(char, escaped)
    return {once, once.replace("/", "\\/"), go, go.replace("/", "\\/")}


def encodings(value: str) -> frozenset[str]:
    """Every form ``value`` can take in text SharedOS keeps or relays (see the module docstring)."""
    forms = {value}
    for encode in (_JSON_ASCII, _JSON_UTF8):
        once = encode(value)[1:-1]
        # and as other JSON encoders write it: PHP's "\/", Go's HTML-safe "\u003c" (an
        # upstream in any language echoes a credential in its own JSON)
        for variant in _json_variants(once):
            forms.add(variant)
            forms.add(encode(variant)[1:-1])  # JSON text that was itself put in a JSON string
    body = repr(value)[1:-1]
    plain_quote = body.replace("\\'", "'")  # the body as a double-quoted repr writes it
    forms.update((body, plain_quote, plain_quote.replace("'", "\\'")))
    forms.add(ascii(value)[1:-1])
    forms.add(value.encode("unicode_escape").decode("ascii"))
    raw = value.encode("utf-8", "surrogatepass")
    forms.add(repr(raw)[2:-1])
    forms.update({html.escape(f) for f in list(forms)})
    forms.update({html.escape(f, quote=False) for f in list(forms)})
    forms.update((raw.hex(), raw.hex().upper()))
    percents: tuple[str, ...] = ()
    with contextlib.suppress(UnicodeEncodeError):  # a lone surrogate has no percent-encoding
        percents = (
            quote(value, safe=""),
            quote(value),
            quote_plus(value, safe=""),
            *(quote(value, safe=kept) for kept in _URI_KEPT),
        )
    for percent in percents:
        forms.add(percent)
        forms.add(_PERCENT_ESCAPE.sub(lambda m: m.group(0).lower(), percent))
    forms.update(_base64_forms(raw))
    forms.discard("")
    return frozenset(forms)


def secret_text(value: object) -> str | None:
    """The text form of a secret value (``SecretStr`` unwrapped; numbers as text), or None."""
    reveal = getattr(value, "get_secret_value", None)
    if callable(reveal):
        value = reveal()
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return str(value)
    return None


#: how a capped text marks its cut (``scrub`` looks for a cut secret before the mark)
_CUT_MARKS = ("…", "...")


class Redactor:
    """A set of secret values and every encoding of them; scrubs them out of text and JSON.

    Immutable once built; ``union`` makes a new one (sharing the work already
    done). Building costs some tens of microseconds per value, so the kernel
    builds one per host and one per tool once and unions them per call.
    ``values`` holds every value given, short ones too (a component that
    redacts fields needs them); only values of ``MIN_SECRET_CHARS`` or more
    are searched for. ``needles`` (the forms searched for, longest first) is
    empty exactly when there is nothing to scrub: test it, or the object's
    truth, before scrubbing on a hot path.
    """

    # __weakref__: a per-turn redactor keys caches that must die with its turn
    __slots__ = ("__weakref__", "_cuts", "_forms", "needles", "values")

    def __init__(self, values: Iterable[object] = ()) -> None:
        texts = [t for t in (secret_text(v) for v in values) if t]
        self.values: frozenset[str] = frozenset(texts)
        #: value -> its forms, for the values long enough to scrub
        self._forms: dict[str, frozenset[str]] = {
            v: encodings(v) for v in self.values if len(v) >= MIN_SECRET_CHARS
        }
        self.needles: tuple[str, ...] = self._order(self._forms)
        self._cuts = _cuts(self.needles)

    @staticmethod
    def _order(forms: Mapping[str, frozenset[str]]) -> tuple[str, ...]:
        # searched case-folded: a secret upper- or lower-cased on its way (a header value
        # the SDK lowercases, a hex dump in capitals) is still the secret
        every = {_folded(f) for f in set().union(*forms.values())} if forms else set()
        return tuple(sorted(every, key=lambda f: (-len(f), f)))

    def __bool__(self) -> bool:
        return bool(self.needles)

    def __repr__(self) -> str:
        return f"Redactor({len(self.values)} values, {len(self.needles)} forms)"

    def union(self, other: Redactor | Iterable[object]) -> Redactor:
        """A ``Redactor`` of both sets of values (``self`` when ``other`` adds nothing)."""
        if not isinstance(other, Redactor):
            other = Redactor(other)
        if other.values <= self.values:
            return self
        if self.values <= other.values:
            return other
        made = Redactor.__new__(Redactor)
        made.values = self.values | other.values
        made._forms = {**self._forms, **other._forms}
        made.needles = Redactor._order(made._forms)
        made._cuts = _cuts(made.needles)
        return made

    def found_in(self, text: str) -> bool:
        """True when some secret, in some encoding, occurs in ``text`` (across the line
        breaks of a wrapped blob too: ``_wrapped_spans``)."""
        folded = _folded(text)
        return any(n in folded for n in self.needles) or bool(self._wrapped_needles(text))

    def _wrapped_needles(self, text: str) -> list[str]:
        """The needles ``text`` holds with every line break (``_WRAP_RE``) taken out.

        The breaks are taken out by ``str.replace``, escaped ones first, as the expression
        would find them (no escaped break holds a real one, and no two overlap): the
        expression's ``sub`` made a 1 MB result with a break every other character cost
        0.3 s where the search itself costs 0.01, every scrub, found or not."""
        if not self.needles or ("\n" not in text and "\\n" not in text):
            return []
        joined = text.replace("\\r\\n", "").replace("\\n", "")
        joined = _folded(joined.replace("\r\n", "").replace("\n", ""))
        return [needle for needle in self.needles if needle in joined]

    def _wrapped_spans(self, text: str) -> list[tuple[int, int]]:
        """Where in ``text`` a secret occurs cut by line breaks (``_WRAP_RE``): the base64
        of a text that holds it, as ``base64`` or a MIME part wraps it (at 76 columns the
        secret's encoding straddles a break at most alignments), a hex dump or a token
        wrapped at a width, the breaks real or written ``\\n`` inside JSON text. Each span
        runs from the secret's first character to its last, breaks included.

        Searched in ``text`` with every line break taken out: a text of several lines is
        searched twice, once as it is (``scrub``) and once so. Each needle found so is
        then found in ``text`` by an expression that lets a break between any two of its
        characters (``_broken``): no map of every break is made, which cost 1.7 s for a
        1 MB text with a break every other character that held a secret, 15 s for 10 MB."""
        found = self._wrapped_needles(text)
        if not found:
            return []
        folded = _folded(text)
        return [m.span() for needle in found for m in _broken(needle).finditer(folded)]

    def scrub(self, text: str) -> str:
        """``text`` with every occurrence of every encoding of every secret replaced, and a
        secret cut by the end (or the start) of ``text`` as well: a text capped, or read up
        to a byte limit, in the middle of a secret would otherwise keep all of the secret
        before the cut (a cut marked ``…`` or ``...``: before the mark). A piece shorter
        than ``MIN_SECRET_CHARS`` is left, as a short secret is."""
        # Found in the case-folded text, cut out of the text itself: the two have the same
        # length (``_folded``), so a place in one is the same place in the other.
        folded = _folded(text)
        for needle in self.needles:
            if needle in folded:
                text, folded = _cut_out(text, folded, needle)
        # and one a line break cuts (a wrapped base64 blob holding it), breaks and all
        spans = self._wrapped_spans(text)
        if spans:
            out, end = [], 0
            for start, stop in sorted(spans):
                if start >= end:
                    out += [text[end:start], REDACTED]
                end = max(end, stop)
            text = "".join(out) + text[end:]
            folded = _folded(text)
        heads, tails, grams = self._cuts
        if not heads or len(text) < MIN_SECRET_CHARS:
            return text
        # a text capped and marked so ("…", "...") ends its cut piece before the mark
        mark = next((m for m in _CUT_MARKS if text.endswith(m)), "")
        if mark:
            text, folded = text[: -len(mark)], folded[: -len(mark)]
        # A head of a secret ends with some MIN_SECRET_CHARS characters of it (a tail starts
        # with some): one set lookup answers "no piece here" for nearly every text.
        if len(text) >= MIN_SECRET_CHARS and folded[-MIN_SECRET_CHARS:] in grams:
            # the longest piece first, so a cut secret is replaced whole
            for k in range(
                min(len(heads) - 1 + MIN_SECRET_CHARS, len(text)), MIN_SECRET_CHARS - 1, -1
            ):
                if folded[-k:] in heads[k - MIN_SECRET_CHARS]:
                    text, folded = text[:-k] + REDACTED, folded[:-k] + REDACTED
                    break
        if folded[:MIN_SECRET_CHARS] in grams:
            for k in range(
                min(len(tails) - 1 + MIN_SECRET_CHARS, len(text)), MIN_SECRET_CHARS - 1, -1
            ):
                if folded[:k] in tails[k - MIN_SECRET_CHARS]:
                    text = REDACTED + text[k:]
                    break
        return text + mark

    def safe_cut(self, text: str, at: int) -> int:
        """The largest place at or before ``at`` where ``text`` can be cut in two without
        splitting an occurrence of a secret (in any encoding): the start of the earliest
        occurrence that would straddle ``at``, or ``at`` itself.

        What a stream hands on piece by piece must be cut there and scrubbed *raw*:
        ``scrub`` takes a head of a secret at the end of a text for a cut secret and
        replaces it, and the rest of that secret, arriving later in the middle of the next
        piece, would then be found by nothing."""
        at = max(0, min(at, len(text)))
        if not self.needles or at == 0:
            return at
        folded = _folded(text)
        while at > 0:
            first: int | None = None
            for needle in self.needles:
                i = folded.find(needle, max(0, at - len(needle) + 1))
                if i != -1 and i < at and (first is None or i < first):
                    first = i
            if first is None:
                return at
            at = first
        return at

    def scrub_json(self, value: Any, depth: int = 0) -> Any:
        """A copy of a JSON-like value with every string (keys too) scrubbed; others unchanged."""
        if not self.needles:
            return value
        if isinstance(value, str):
            return self.scrub(value)
        if depth > _MAX_DEPTH:
            # too deep to walk: kept only when no secret occurs anywhere in it (fail closed)
            try:
                text = _JSON_UTF8(value)
            except Exception:  # not JSON, or too deep even for the encoder
                return REDACTED
            return REDACTED if self.found_in(text) else value
        if isinstance(value, Mapping):
            return {
                (self.scrub(k) if isinstance(k, str) else k): self.scrub_json(v, depth + 1)
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.scrub_json(v, depth + 1) for v in value]
        return value

    def find(self, value: Any, where: str = "") -> list[str]:
        """Where in a JSON value a secret occurs: dotted paths (``inputSchema.properties.
        token.default``; a key holding one is named by its scrubbed form), never the value
        itself. Empty when there is none."""
        if not self.needles:
            return []
        if isinstance(value, str):
            return [where or "(value)"] if self.found_in(value) else []
        found: list[str] = []
        if isinstance(value, Mapping):
            for key, item in value.items():
                name = str(key)
                path = f"{where}.{self.scrub(name)}" if where else self.scrub(name)
                if self.found_in(name):
                    found.append(f"{path} (its name)")
                found.extend(self.find(item, path))
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                found.extend(self.find(item, f"{where}[{i}]"))
        return found


_Cuts = tuple[tuple[frozenset[str], ...], tuple[frozenset[str], ...], frozenset[str]]


def _broken(needle: str) -> re.Pattern[str]:
    """An expression for ``needle`` with any run of line breaks (``_WRAP_RE``) between two
    of its characters, from its first character to its last (``Redactor._wrapped_spans``).
    Made only for a needle found so; not cached here (a closed turn's secrets are not kept
    by the host), beyond ``re``'s own bounded cache."""
    return re.compile(f"(?:{_WRAP_RE.pattern})*".join(map(re.escape, needle)))


def _folded(text: str) -> str:
    """``text`` lower-cased character by character, with its length kept: a character whose
    lower case is longer (``"İ"``) is kept as it is, so indexes into the result are indexes
    into ``text``."""
    low = text.lower()
    if len(low) == len(text):  # lower() never shortens: no character grew
        return low
    return "".join(c if len(f := c.lower()) != 1 else f for c in text)


def _cut_out(text: str, folded: str, needle: str) -> tuple[str, str]:
    """``text`` and its ``folded`` twin with every occurrence of ``needle`` in ``folded``
    replaced by ``REDACTED`` in both (they stay the same length)."""
    pieces = folded.split(needle)
    out: list[str] = []
    at = 0
    for piece in pieces[:-1]:
        out.append(text[at : at + len(piece)])
        at += len(piece) + len(needle)
    out.append(text[at:])
    return REDACTED.join(out), REDACTED.join(pieces)


def _cuts(needles: tuple[str, ...]) -> _Cuts:
    """Every proper head and tail of every needle, of ``MIN_SECRET_CHARS`` characters or
    more, by length (index 0: ``MIN_SECRET_CHARS``): what a cut through a secret leaves;
    and every run of ``MIN_SECRET_CHARS`` characters of a needle (the quick test)."""
    if not needles:
        return (), (), frozenset()
    top = len(needles[0]) - 1  # needles are longest first; a whole one is found whole
    heads: list[set[str]] = [set() for _ in range(MIN_SECRET_CHARS, top + 1)]
    tails: list[set[str]] = [set() for _ in range(MIN_SECRET_CHARS, top + 1)]
    for needle in needles:
        for k in range(MIN_SECRET_CHARS, len(needle)):
            heads[k - MIN_SECRET_CHARS].add(needle[:k])
            tails[k - MIN_SECRET_CHARS].add(needle[-k:])
    grams = frozenset(
        n[i : i + MIN_SECRET_CHARS] for n in needles for i in range(len(n) - MIN_SECRET_CHARS + 1)
    )
    return tuple(map(frozenset, heads)), tuple(map(frozenset, tails)), grams


#: the redactor of a host that knows no secrets
NO_SECRETS = Redactor()


def secret_values(value: Any, depth: int = 0) -> Iterator[str]:
    """The scrubbable text of an argument value: itself, or every key and scalar leaf inside it."""
    if isinstance(value, Mapping):
        if depth < _MAX_DEPTH:
            for k, v in value.items():
                if isinstance(k, str):
                    yield k
                yield from secret_values(v, depth + 1)
        return
    if isinstance(value, list | tuple):
        if depth < _MAX_DEPTH:
            for v in value:
                yield from secret_values(v, depth + 1)
        return
    text = secret_text(value)
    if text is not None:
        yield text


def redact_fields(arguments: Any, secret_names: Iterable[str]) -> Any:
    """``arguments`` with the values of the named top-level fields replaced by ``"[redacted]"``."""
    names = frozenset(secret_names)
    if not names or not isinstance(arguments, Mapping):
        return arguments
    return {k: (REDACTED if k in names else v) for k, v in arguments.items()}


def non_object_marker(arguments: Any) -> dict[str, Any]:
    """What is stored for arguments that are not a JSON object: their type and size, never them.

    Such a call is refused before any decision (``invalid_arguments``), its
    tool may take a secret, and a bare string or number cannot say which part
    is one; so the content is not kept at all.
    """
    if isinstance(arguments, str):
        kind, size = "string", len(arguments)
    elif isinstance(arguments, bool):
        kind, size = "boolean", 1
    elif isinstance(arguments, int | float):
        kind, size = "number", len(repr(arguments))
    elif isinstance(arguments, list | tuple):
        kind, size = "array", len(arguments)
    else:
        kind, size = type(arguments).__name__, 0
    return {"$nonobject": kind, "$size": size}
