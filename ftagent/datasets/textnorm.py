"""What the contamination scan does to a text before it compares it (issue 39 item 5): one function per
step, the same on both sides (benchmark items and training rows).

Measured threat (issue 39): 9 rewordings of "What is a + b?" passed the scan -- operands swapped, "plus" in
words, equation form, spelled-out numbers, a contraction, a Cyrillic letter, a combining grapheme joiner,
Arabic-Indic digits, a different verb. The steps below remove the *spelling* differences; the template
match (:mod:`ftagent.datasets.template_scan`) removes the *wording* ones.

* :func:`fold` -- Unicode NFKC; every ``Default_Ignorable_Code_Point`` (Unicode's DerivedCoreProperties:
  zero-width spaces and joiners, the combining grapheme joiner U+034F, variation selectors, soft hyphen,
  bidi controls, tags) and every other format character (category Cf) removed; combining marks removed
  (NFD, drop Mn/Me, NFC: "Whát" = "What"); a decimal digit of any script (category Nd: Arabic-Indic ``٣``,
  Devanagari ``३``, fullwidth ``３``) as its ASCII digit; a letter that Unicode's confusables table
  (``confusables.txt`` of UTS #39, through the maintained ``confusable_homoglyphs`` package) lists as a
  homoglyph of one ASCII letter folded to that letter (Cyrillic ``а`` → ``a``, Greek ``ο`` → ``o``).
  Only non-ASCII characters are folded, and digits first: UTS #39's skeleton would also turn ``1`` into
  ``l`` and ``0`` into ``O``, which would merge numbers with words. Why not ``unidecode``: it
  *transliterates* (Cyrillic ``р`` → ``r``), while a cheat uses the letter that *looks* Latin (``р`` that
  reads as ``p``): folding by appearance is what undoes it.
* :func:`expand_contractions` -- the English clitics (``'s 're 've 'll 'd 'm n't``) as words: "What's" =
  "What is". The closed grammatical set is written here (7 patterns); the ``contractions`` package would
  add three dependencies for the same table.
* :func:`words_to_digits` -- spelled-out English numbers as digits ("forty-five" → ``45``, "one hundred
  and five" → ``105``) with the maintained ``text2num`` package (``alpha2digit``), only when the text
  holds a number word (a cheap test first). Other languages' number words are not converted.
* :func:`operators_to_words` -- ``+``, ``−``/``-`` between numbers (a minus right before a number that does not
  follow one -- "What is -25 + 68?" -- is the number's sign and stays on it), ``×``/``*``/``x``/``·`` between
  numbers, ``÷`` (and ``/`` between numbers) and ``=`` as the words ``plus minus times over equals``, so
  "12 + 45" and "12 plus 45" read the same.

What it cannot undo: a paraphrase that changes the words (the fuzzy scan and the template match's
operation phrases handle some), numbers written in other languages' words, an item encoded (base64,
a cipher) or split across rows. Those are why the selection part of validation, which no planner ever
sees, alone decides the best model (docs/benchmarks.md, "Feedback and selection").
"""

from __future__ import annotations

import functools
import re
import unicodedata

# Default_Ignorable_Code_Point (Unicode 15.1 DerivedCoreProperties.txt), as ranges
_IGNORABLE_RANGES = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x061C, 0x061C), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)
_IGNORABLE = re.compile("[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in _IGNORABLE_RANGES) + "]")
_MARKS = {"Mn", "Me"}


@functools.lru_cache(maxsize=1)
def confusable_table() -> dict[int, str]:
    """Non-ASCII code point → the one ASCII letter Unicode's confusables table says it looks like."""
    from confusable_homoglyphs import confusables

    table: dict[int, str] = {}
    for char, glyphs in confusables.confusables_data.items():
        if len(char) != 1 or char.isascii() or unicodedata.category(char) == "Nd":
            continue
        for glyph in glyphs:
            c = glyph.get("c", "")
            if len(c) == 1 and c.isascii() and c.isalpha():
                table[ord(char)] = c
                break
    return table


def _digits(text: str) -> str:
    if text.isascii():
        return text
    return "".join(str(unicodedata.decimal(ch)) if not ch.isascii() and unicodedata.category(ch) == "Nd" else ch
                   for ch in text)


def fold(text: str) -> str:
    """NFKC, ignorable and format characters out, marks out, digits ASCII, confusable letters Latin."""
    text = unicodedata.normalize("NFKC", text or "")
    if text.isascii():
        return text
    text = _IGNORABLE.sub("", text)
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    decomposed = unicodedata.normalize("NFD", text)
    text = unicodedata.normalize("NFC", "".join(ch for ch in decomposed if unicodedata.category(ch) not in _MARKS))
    return _digits(text).translate(confusable_table())


_APOS = "['\u2019\u02bc\u2032]"
_CONTRACTIONS = (
    (re.compile(rf"(?i)\b(can){_APOS}t\b"), r"\1 not"),
    (re.compile(rf"(?i)\b(won){_APOS}t\b"), "will not"),
    (re.compile(rf"(?i)n{_APOS}t\b"), " not"),
    (re.compile(rf"(?i){_APOS}re\b"), " are"),
    (re.compile(rf"(?i){_APOS}ve\b"), " have"),
    (re.compile(rf"(?i){_APOS}ll\b"), " will"),
    (re.compile(rf"(?i){_APOS}d\b"), " would"),
    (re.compile(rf"(?i){_APOS}m\b"), " am"),
    (re.compile(rf"(?i)(?<=[a-z]){_APOS}s\b"), " is"),
)


def expand_contractions(text: str) -> str:
    """English clitics as words ("What's" → "What is", "isn't" → "is not")."""
    if not re.search(_APOS, text):
        return text
    for pattern, repl in _CONTRACTIONS:
        text = pattern.sub(repl, text)
    return text


NUMBER_WORDS = frozenset(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty thirty forty fourty fifty sixty seventy eighty ninety hundred thousand "
    "million billion".split())
_LETTERS = re.compile(r"[a-z]+")


def words_to_digits(text: str) -> str:
    """Spelled-out English numbers as digits (``text2num.alpha2digit``); unchanged without a number word."""
    if NUMBER_WORDS.isdisjoint(_LETTERS.findall(text.lower())):
        return text
    from text_to_num import alpha2digit

    return alpha2digit(text, "en")


_OPERATORS = (
    (re.compile(r"\+"), " plus "),
    # binary: after a number or a closing bracket, or standing alone; a minus glued to the number after a word
    # or at the start is its sign and stays on it ("-25 + 68" asks about -25, not 25: issue 39 red team)
    (re.compile(r"(?<=[\d)\]}])\s*[-\u2212\u2013]\s*(?=[\d(\[{\u2212\u2013-])|(?<=\s)[-\u2212\u2013](?=\s)"
                r"|[\u2212\u2013](?!\d)"), " minus "),
    (re.compile(r"[\u2212\u2013](?=\d)"), "-"),
    (re.compile(r"[\u00d7\u22c5\u00b7\u2217*]|(?<=\d)\s*[xX]\s*(?=\d)"), " times "),
    (re.compile(r"\u00f7|(?<=\d)\s*/\s*(?=\d)"), " over "),  # "/" between numbers too (relay round r1)
    (re.compile(r"="), " equals "),
)


_ANY_OPERATOR = re.compile(r"[+=*\u00d7\u00f7\u00b7\u2212\u2013\u22c5\u2217-]|\d\s*[xX/]\s*\d")


def operators_to_words(text: str) -> str:
    """``+ − × ÷ =`` (and ``-``, ``x``, ``*``, ``/`` between numbers) as ``plus minus times over equals``."""
    if not _ANY_OPERATOR.search(text):
        return text
    for pattern, word in _OPERATORS:
        text = pattern.sub(word, text)
    return text
