"""The redaction pass every text of a support bundle goes through before it is written: private keys, tokens,
certificate keys, kubeconfig credentials and passwords are replaced by REDACTED, wherever they stand.

It errs on the side of taking out too much: a value under any key that names a secret goes, whatever it looks
like; and what has a secret's own shape (a PEM private key, a kubeadm bootstrap token, a JSON web token, a
password in a URL) goes wherever it appears, under any key or none.
"""
from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable

REDACTED = "REDACTED"

# Names that say their value is secret, as keys (YAML, JSON, TOML, INI, env), flags and headers spell them: a word
# that holds one of these, or "pass" as a part of its own (DB_PASS, db-pass; not Bypass, compass).
_SECRET_WORDS = (r"password|passwd|passphrase|secret|token|certificate[-_]?key|client[-_]key[-_]data|private[-_]?key|"
                 r"api[-_]?key|access[-_]?key|credentials?|auth(?:orization)?")
_SECRET_NAME = (rf"(?:[A-Za-z0-9_.-]*(?:{_SECRET_WORDS})[A-Za-z0-9_.-]*|"
                r"(?:[A-Za-z0-9.-]*[_.-])?pass(?:[_.-][A-Za-z0-9_.-]*)?)")
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # PEM private keys (RSA, EC, OPENSSH, ENCRYPTED ...), also cut short by a size limit (no END line).
    (re.compile(r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(?:-----END \1PRIVATE KEY-----|\Z)", re.S | re.A),
     rf"-----BEGIN \1PRIVATE KEY----- {REDACTED} -----END \1PRIVATE KEY-----"),
    # Authorization headers: the credential after the scheme.
    (re.compile(r"(?i)(authorization[ \t]*[:=][ \t]*[\"']?(?:bearer|basic|token)[ \t]+)[^\s\"',]+", re.A),
     rf"\1{REDACTED}"),
    # key: value, key = value, "key": "value", KEY=value (the value to the end of its quotes, or to a delimiter).
    (re.compile(rf"(?i)((?:^|[\s{{,\[(;&\"'-])[\"']?{_SECRET_NAME}[\"']?[ \t]*[:=][ \t]*)"
                r"(\"[^\"\n]*\"|'[^'\n]*'|[^\s,;}\]\"']+)", re.M | re.A), rf"\1{REDACTED}"),
    # --token VALUE, --certificate-key VALUE, --password VALUE (flags with a space before their value). Whatever
    # follows goes, a value that starts with a dash too: the word after a flag that is not followed by a value (a
    # switch such as --skip-token-print) is lost with it, which is the side to err on.
    (re.compile(rf"(?i)(--{_SECRET_NAME}[ \t]+)([^\s\"']+|\"[^\"\n]*\"|'[^'\n]*')", re.A), rf"\1{REDACTED}"),
    # An env var in a manifest or description: `name: DB_PASSWORD` and, on the next line, `value: ...`.
    (re.compile(rf"(?i)(name:\s*[\"']?{_SECRET_NAME}[\"']?\s*\n\s*value:\s*)(\S.*)", re.A), rf"\1{REDACTED}"),
    # Passwords in URLs: scheme://user:password@host.
    (re.compile(r"(?i)([a-z][a-z0-9+.-]*://[^/\s:@]+:)[^@\s/]+(@)", re.A), rf"\1{REDACTED}\2"),
    # kubeadm bootstrap tokens (abcdef.0123456789abcdef) wherever they stand.
    (re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b", re.A), REDACTED),
    # JSON web tokens (service-account tokens): three base64url parts, the first two JSON objects.
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", re.A), REDACTED),
)


# A PEM document base64-encoded (a Secret's data, a kubeconfig's *-data): "-----BEGIN" encodes to LS0tLS1CRUdJTi.
_BASE64_PEM = re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/=]{16,}", re.A)


def _base64_key(match: re.Match[str]) -> str:
    """The encoded document taken out when it is a private key (a certificate stays)."""
    blob = match.group(0)
    try:
        decoded = base64.b64decode(blob + "=" * (-len(blob) % 4), validate=False).decode("ascii", "replace")
    except (ValueError, binascii.Error):
        return REDACTED
    return REDACTED if "PRIVATE KEY" in decoded or "-----END" not in decoded else blob


def redact(text: str, known: Iterable[str] = ()) -> tuple[str, int]:
    """`text` with every secret replaced, and how many replacements were made. `known`: secrets this run holds
    (a become password) taken out by their value, wherever they stand."""
    count = 0
    for secret in known:
        if secret and len(secret) >= 4:
            count += text.count(secret)
            text = text.replace(secret, REDACTED)
    text, found = _BASE64_PEM.subn(_base64_key, text)
    count += found
    for pattern, replacement in _PATTERNS:
        text, found = pattern.subn(replacement, text)
        count += found
    return text, count
