"""The text both sides of the contamination scan are compared as: normalised word tokens, sentences, the
template threshold and the function words (shared by :mod:`ftagent.datasets.contamination` and
:mod:`ftagent.datasets.template_scan`; the steps are described in contamination's module docstring)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from ftagent.datasets.textnorm import expand_contractions, fold, operators_to_words, words_to_digits

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
# A number is one token, whole: its sign and its decimal part stay on it ("-25" and "68.25" are not 25 and 68:
# issue 39 red team), and it ends at a CJK character ("25加68" is 25, 加, 68; it was one token). A CJK character
# is a token of its own; any other run of letters and digits is one word ("abc123", "3rd").
_TOKEN = re.compile(rf"(?<![^\W_{_CJK}.])-?\d+(?:\.\d+)*(?![^\W_{_CJK}])|[{_CJK}]|[^\W_{_CJK}]+", re.UNICODE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)*")
Item = str | Sequence[str]
_OPTION_LABEL = re.compile(r"(?<![A-Za-z0-9])(?:\(\s*[A-Ha-h]\s*\)|[A-H]\s*[.):、]|[a-h]\))(?!\d)")
# A list enumerator at a line start: "1.", "2)", "(3)", "Step 4:".
_ENUMERATOR = re.compile(r"(?im)^[ \t]*(?:step[ \t]*\d{1,3}[ \t]*[.):]?|\(?\d{1,3}[.):、](?=\s))")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_APOSTROPHE = re.compile(r"(?<=[^\W\d_])['\u2019\u02bc](?=[^\W\d_])")
_LATEX_LAYOUT = re.compile(r"\\(?:left|right|displaystyle|big|Big|bigg|Bigg|mathrm|mathbf|mathit|text|textbf"
                           r"|operatorname)(?![A-Za-z])")
_LATEX_FRAC = re.compile(r"\\[dt]frac(?![A-Za-z])")


def clean(text: str) -> str:
    """The text :func:`normalise` tokenises: :func:`~ftagent.datasets.textnorm.fold` (NFKC, invisible and
    format characters, marks, any script's digits, confusable letters), contractions, labels, separators,
    LaTeX, spelled-out numbers and operator symbols (:mod:`ftagent.datasets.textnorm`)."""
    text = expand_contractions(fold(text))
    text = _ENUMERATOR.sub(" ", text)
    text = _OPTION_LABEL.sub(" ", text)
    text = _THOUSANDS.sub("", text)
    text = _APOSTROPHE.sub("", text)
    text = _LATEX_FRAC.sub(r"\\frac", text)
    text = _LATEX_LAYOUT.sub(" ", text)
    return operators_to_words(words_to_digits(text))


def normalise(text: str) -> list[str]:
    """Word tokens of ``text`` after :func:`clean` and lower-casing (whitespace and punctuation dropped); a
    number is one token, written one way (:func:`canonical_number`)."""
    return _tokens(clean(text).lower())


def _tokens(cleaned: str) -> list[str]:
    return [canonical_number(t) if t[0] in _NUMBER_START else t for t in _TOKEN.findall(cleaned)]


_NUMBER_START = frozenset("-0123456789")


def is_number(token: str) -> bool:
    """A number token of :func:`normalise` (``25``, ``-25``, ``68.25``)."""
    return bool(token) and token[0] in _NUMBER_START and _NUMBER.fullmatch(token) is not None


def canonical_number(token: str) -> str:
    """A number written one way: leading zeros and a decimal part's trailing zeros dropped (``025`` = ``25``,
    ``68.50`` = ``68.5``, ``68.0`` = ``68``, ``-0`` = ``0``); a token that is not a number, or a dotted
    version (``1.2.3``), unchanged."""
    if not _NUMBER.fullmatch(token) or token.count(".") > 1:
        return token
    sign, body = ("-", token[1:]) if token[0] == "-" else ("", token)
    whole, _, frac = body.partition(".")
    whole, frac = whole.lstrip("0") or "0", frac.rstrip("0")
    body = f"{whole}.{frac}" if frac else whole
    return body if body == "0" else sign + body


def ngrams(tokens: list[str], n: int) -> set[tuple[str, ...]]:
    """The set of n-grams of ``tokens`` (empty when shorter than ``n``)."""
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


TEMPLATE_SHARE = 0.05


def segments(item: Item) -> list[str]:
    return [item] if isinstance(item, str) else [str(part or "") for part in item]


def template_threshold(n_items: int) -> int:
    """An n-gram found in at least this many items is prompt boilerplate, not item content."""
    return max(3, math.ceil(TEMPLATE_SHARE * n_items))


_SENTENCE = re.compile(r"(?<=[.?!。？！])\s+|\n+")


def sentences(item: Item) -> list[str]:
    """The item's sentences (and lines), each as its normalised tokens joined by spaces. Each part is cleaned
    whole, then split: the sentences' tokens, in order, are :func:`normalise`'s of the part."""
    out = []
    for part in segments(item):
        for sentence in _SENTENCE.split(clean(part).lower()):
            toks = _tokens(sentence)
            if toks:
                out.append(" ".join(toks))
    return out


#: words that carry no item content (a paraphrase swaps them freely)
STOPWORDS = frozenset(
    "a an the of to in on at for by with from and or but if then than that this these those is are was were be "
    "been being it its as into out up down over under what which who whom whose when where why how do does did "
    "can could would should will shall may might must have has had not no yes so such there their they them "
    "we you your i he she his her our us me my all any each some find give let please answer question".split())
