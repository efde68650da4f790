"""The one place that masks secrets in anything ftagent persists (issue 34 item 7).

Events (``events.jsonl``), session snapshots, LLM records, reports (built from those) and the dumped
settings all pass through :func:`mask_text` / :func:`mask_obj` before they reach the disk. Masked are:

- every secret value the process was configured with (``SecretStr`` settings register themselves via
  :func:`register_secret` when :class:`~ftagent.core.settings.Settings` is built), plus any extra
  values a caller passes to :class:`Redactor`;
- common API-key shapes (``sk-...``, ``hf_...``, ``Bearer ...``, AWS / Google ids, ``api_key=...``);
- the userinfo of any URL (``https://user:password@host/v1`` -> ``https://***REDACTED***@host/v1``),
  e.g. credentials written into ``OPENAI_API_BASE``;
- URL query parameters whose name looks like a credential (``?api_key=``, ``&token=``, ``&sig=`` ...);
- what detect-secrets' detectors find (issue 43: a ``ghp_…`` GitHub token and ``password=…`` in a run file's
  ``user_target_scenario`` reached events and snapshots in clear): GitHub/GitLab/Slack/Stripe/… tokens, AWS
  keys, private-key blocks, basic-auth URLs, ``password=``/``secret:``-style assignments, high-entropy
  tokens — :mod:`ftagent.core.secret_shapes` says which detectors, with what exceptions, and why.

Add a new shape here (or in :mod:`ftagent.core.secret_shapes`), never in a writer: a writer only calls
:func:`mask_text` / :func:`mask_obj`. What a tool process may see of ftagent's environment is decided with the same
shapes (issue 39, red team B5): :func:`without_url_credentials` and :func:`carries_secret`, used by
:func:`ftagent.runners.process.passthrough_env`.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from ftagent.core.secret_shapes import mask_spans

REDACTED = "***REDACTED***"

# (pattern, keeps group 1): group 1 is a prefix that stays readable (the URL scheme, the parameter name)
_PATTERNS: list[re.Pattern[str]] = [
    re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"),  # OpenAI, Anthropic (sk-ant-...), many proxies
    re.compile(r"\bhf_[A-Za-z0-9]{16,}"),  # Hugging Face tokens
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"),  # Google API keys
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._\-]{8,}"),
    re.compile(r"(?i)((?:api[_-]?key|access[_-]?token|secret)[\"']?\s*[:=]\s*[\"']?)[^\s\"',;&]{6,}"),
    # URL userinfo (RFC 3986 3.2.1: ``scheme://user:password@host``); the host stays readable
    re.compile(r"(?i)(\b[a-z][a-z0-9+.\-]*://)[^\s/?#@\"'<>\\]+(?=@)"),
    # URL query parameters that carry a credential (``?api_key=…``, ``&access_token=…``, ``&sig=…``)
    re.compile(r"(?i)([?&][a-z0-9_.\-]*(?:key|token|secret|password|passwd|pwd|sig|signature|auth|credential)s?=)"
               r"[^&#\s\"'<>\\]+"),
]

# URL userinfo with its "@" (RFC 3986 3.2.1), for removal: group 1 is the scheme and "//", kept
_USERINFO = re.compile(r"(?i)(\b[a-z][a-z0-9+.\-]*://)[^\s/?#@\"'<>\\]+@")

_registered: set[str] = set()
_registered_lock = threading.Lock()
_MIN_SECRET_LEN = 4  # masking "x" everywhere would destroy the record and protect nothing
# a value registered for the whole process is masked in every event and snapshot: placeholders that
# local servers take as keys ("EMPTY", "dummy", "none") are shorter than any real credential and are
# not masked, or every "EMPTY" in a record would be destroyed
_MIN_REGISTERED_LEN = 8


def register_secret(value: str | None) -> None:
    """Mask ``value`` in everything written from now on (by every :class:`Redactor` and :func:`mask_text`)."""
    if value and len(value) >= _MIN_REGISTERED_LEN:
        with _registered_lock:
            _registered.add(value)


class Redactor:
    """Masks registered and given secret values, key shapes and URL credentials in text and JSON-like data."""

    def __init__(self, secrets: list[str | None] | None = None) -> None:
        self.extra = {s for s in (secrets or []) if s and len(s) >= _MIN_SECRET_LEN}

    @property
    def secrets(self) -> list[str]:
        # longest first, so a key that contains another is masked whole
        with _registered_lock:
            values = self.extra | _registered
        return sorted(values, key=len, reverse=True)

    def text(self, value: str) -> str:
        """Redact one string."""
        for secret in self.secrets:
            value = value.replace(secret, REDACTED)
        for pattern in _PATTERNS:
            if pattern.groups:
                value = pattern.sub(lambda m: m.group(1) + REDACTED, value)
            else:
                value = pattern.sub(REDACTED, value)
        return mask_spans(value, REDACTED)

    def obj(self, value: Any) -> Any:
        """Redact every string inside dicts/lists/tuples (keys included)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.obj(k): self.obj(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.obj(v) for v in value]
        return value


_DEFAULT = Redactor()


def mask_text(value: str) -> str:
    """``value`` with every secret masked (registered values, key shapes, URL credentials)."""
    return _DEFAULT.text(value)


def mask_obj(value: Any) -> Any:
    """Like :func:`mask_text` for every string inside JSON-like data."""
    return _DEFAULT.obj(value)


def without_url_credentials(value: str) -> str:
    """``value`` with the userinfo of every URL in it removed (``https://user:password@host/simple`` ->
    ``https://host/simple``; a value may hold several URLs, as ``PIP_EXTRA_INDEX_URL`` does)."""
    return _USERINFO.sub(r"\1", value)


def carries_secret(value: str) -> bool:
    """True when the one masker would mask something in ``value``: a registered secret, a key shape, URL
    credentials (userinfo, a ``?token=`` parameter) or what detect-secrets' detectors find."""
    return mask_text(value) != value
