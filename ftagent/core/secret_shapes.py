"""Where secrets are in a text: detect-secrets' detectors, applied to free text and JSON lines (issue 43).

The one masker (:mod:`ftagent.core.redact`) asks :func:`secret_spans` and replaces each span. The kinds come
from `detect-secrets <https://github.com/Yelp/detect-secrets>`_ (Yelp, Apache-2.0; 1.5.0), a maintained list
rather than a growing regex list of ours:

* the regex detectors of its token plugins (``denylist``): GitHub, GitLab, AWS access keys and AWS secrets next
  to an ``aws…key`` name, Slack tokens and webhooks, Stripe, Twilio, SendGrid, Mailchimp, npm, PyPI, OpenAI,
  Discord, Telegram, JWTs, Azure storage keys, Artifactory, Square, basic-auth URLs. A
  pattern's span is its longest captured group of 8+ characters (the secret in ``aws_secret = '<40 chars>'``),
  else the whole match (GitHub's group is only the ``ghp`` prefix), without the delimiters some patterns
  match around a token (Artifactory's ``\\s`` / ``"``): a masked JSON line stays JSON. Left out:
  ``IPPublicDetector`` (an address is no secret: masking it would hide every URL's host) and the vendor
  ``name = value`` detectors of IBM Cloud IAM, IBM COS, Cloudant and SoftLayer: their look-behind patterns
  took 90 of 200 ms on a 68 KB snapshot (every step writes one), and their names end in the keywords below
  (``…api_key``, ``…password``, ``…secret_access_key``), which mask the same values;
* private keys: the ``PrivateKeyDetector`` headers mark the block, masked from ``-----BEGIN`` to its
  ``-----END …-----`` (or to the end of the string when it is cut);
* keywords: the ``KeywordDetector`` word list (``password``, ``passwd``, ``pwd``, ``secret``, ``api_key``,
  ``private_key``, ``db_pass`` … with any suffix, so any prefix too) followed by ``=`` or ``:``; a quoted value
  to its closing quote, else to the next space, quote, comma, semicolon or ``&`` (detect-secrets' own value
  rule runs to the end of the line, which in free text would mask the rest of the sentence);
* high-entropy strings: ``Base64HighEntropyString``'s entropy (Shannon, limit 4.5) on tokens of 20+ characters
  of the base64 alphabet without ``/`` that mix upper case, lower case and digits. Decisions (measured on
  4.6 MB of real events and snapshots: no false positive; a run longer than 256 characters is data, e.g. a
  base64 image in a benchmark item, not a key): detect-secrets' own candidates are whole quoted
  strings, which in a JSON line are every value — file paths reached 4.55 there, so a ``/`` excludes a token;
  hex digests (entropy ≤ 4) and words never reach the limit; ``HexHighEntropyString`` (limit 3.0) is left out:
  it would mask every sha256 the integrity records keep.

The detectors are imported on first use (detect-secrets imports ``requests``: ~0.5 s), so commands that mask
nothing start fast. Speed: the masker runs on every event; see ``tests/unit/test_redact_detectors.py``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

_LEFT_OUT = {"IPPublicDetector", "PrivateKeyDetector"}  # no secret / masked as a block below
_TRIM_LEFT = " \t=:\"'"
_TRIM_RIGHT = " \t\"'"
_MIN_GROUP = 8
_TOKEN = re.compile(r"(?<![A-Za-z0-9+/=_\-])[A-Za-z0-9+=_\-]{20,}(?![A-Za-z0-9+/=_\-])")
_MAX_TOKEN = 256  # longer runs are data (a base64 image, an encoded blob), not a key: keys are 20-100 characters
_VALUE = r"[^\s\"',;&\\]{3,}"


def _plugin_classes() -> list[Any]:
    from detect_secrets.plugins import (
        artifactory,
        aws,
        azure_storage_key,
        basic_auth,
        discord,
        github_token,
        gitlab_token,
        jwt,
        mailchimp,
        npm,
        openai,
        pypi_token,
        sendgrid,
        slack,
        square_oauth,
        stripe,
        telegram_token,
        twilio,
    )
    from detect_secrets.plugins.base import RegexBasedDetector

    modules = (artifactory, aws, azure_storage_key, basic_auth, discord, github_token, gitlab_token, jwt, mailchimp,
               npm, openai, pypi_token, sendgrid, slack, square_oauth, stripe, telegram_token, twilio)
    return [obj for module in modules for obj in vars(module).values()
            if isinstance(obj, type) and issubclass(obj, RegexBasedDetector) and obj is not RegexBasedDetector
            and obj.__module__ == module.__name__ and obj.__name__ not in _LEFT_OUT]


@functools.cache
def _detectors() -> tuple[list[re.Pattern[str]], re.Pattern[str], re.Pattern[str], Any]:
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString
    from detect_secrets.plugins.keyword import DENYLIST
    from detect_secrets.plugins.private_key import PrivateKeyDetector

    patterns = [p for cls in _plugin_classes() for p in cls.denylist]
    headers = "|".join(re.escape(p.pattern) for p in PrivateKeyDetector.denylist)
    # the block: from its -----BEGIN to its -----END …----- (never across a JSON string's closing quote)
    block = re.compile(rf"-----(?:{headers})-----(?:[^\"]*?-----END [A-Z0-9 ]*-----|[^\"]*)")
    # case-insensitive by running on the lowered text (the (?i) alternation cost 40 ms on a 68 KB snapshot)
    keyword = re.compile(rf"(?:{'|'.join(DENYLIST)})\w*([\"'\]]{{0,2}})\s*[:=]\s*"
                         rf"(?:\\?([\"'])((?:(?!\\?\2).){{1,200}})|({_VALUE}))")
    return patterns, block, keyword, Base64HighEntropyString()


def _regex_spans(text: str, patterns: list[re.Pattern[str]]) -> Iterator[tuple[int, int]]:
    for pattern in patterns:
        for m in pattern.finditer(text):
            groups = [i for i in range(1, (pattern.groups or 0) + 1)
                      if m.group(i) is not None and len(m.group(i)) >= _MIN_GROUP]
            start, end = m.span(max(groups, key=lambda i: len(m.group(i)))) if groups else m.span()
            while start < end and text[start] in _TRIM_LEFT:
                start += 1
            while end > start and text[end - 1] in _TRIM_RIGHT:
                end -= 1
            if end > start:
                yield start, end


_LITERAL = re.compile(r"-?\d[\d.eE+\-]*|true|false|null")


def _json_literal(m: re.Match[str]) -> bool:
    """A JSON key's unquoted value (``"api_key": null``, ``"pwd": 1234``): masking it would break the JSON
    line (``"api_key": ***REDACTED***``); in free text (``password=1234``) the same value is masked."""
    return m.group(4) is not None and '"' in m.group(1) and _LITERAL.fullmatch(m.group(4).lower()) is not None


def _high_entropy(text: str, plugin: Any) -> Iterator[tuple[int, int]]:
    for m in _TOKEN.finditer(text):
        token = m.group(0)
        if len(token) <= _MAX_TOKEN and (re.search(r"[a-z]", token) and re.search(r"[A-Z]", token) and re.search(r"\d", token)
                and plugin.calculate_shannon_entropy(token) > plugin.entropy_limit):
            yield m.span()


def _json_safe(text: str, start: int, end: int) -> tuple[int, int]:
    """The span shrunk so that masking it keeps a JSON line JSON: it never starts inside an escape (``\\n``
    then a token: the ``n`` is the escape's), never reaches a closing quote (npm's ``npm_.+`` runs to the end
    of the line), never ends with half an escape."""
    if start > 0 and text[start - 1] == "\\" and (start < 2 or text[start - 2] != "\\"):
        start += 1
    quote = text.find('"', start, end)
    if quote != -1:
        end = quote
    while end > start and text[end - 1] == "\\":
        end -= 1
    return start, end


def secret_spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) of every secret the detectors find in ``text``, merged where they overlap."""
    patterns, block, keyword, entropy = _detectors()
    spans = list(_regex_spans(text, patterns))
    spans += [m.span() for m in block.finditer(text)]
    lowered = text.lower()
    if len(lowered) == len(text):  # one character each (else a rare expanding character: the slower (?i) search)
        found = keyword.finditer(lowered)
    else:
        found = re.compile(keyword.pattern, re.IGNORECASE).finditer(text)
    spans += [m.span(3) if m.group(3) is not None else m.span(4) for m in found if not _json_literal(m)]
    spans += list(_high_entropy(text, entropy))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(_json_safe(text, a, b) for a, b in spans):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def mask_spans(text: str, replacement: str) -> str:
    """``text`` with every :func:`secret_spans` span replaced by ``replacement``."""
    spans = secret_spans(text)
    if not spans:
        return text
    out, last = [], 0
    for start, end in spans:
        out += [text[last:start], replacement]
        last = end
    return "".join(out + [text[last:]])
