"""Undo the disguises that keep a judge from reading words (normaliser ``normalize_v3``).

Pure functions, no model. Each step is written so that ordinary text passes
through unchanged; each returns how many spans it rewrote, so a report can show
what the judges were given:

1. emoji and flags become their names in brackets (``🧓`` -> ``[older person]``,
   ``🇫🇷`` -> ``[flag of France]``, the rainbow flag -> ``[rainbow flag (LGBTQ+)]``):
   a picture of a group stands for the group;
2. letters spelled one at a time (``w o m e n``, ``w.o.m.e.n``, ``w-o-m-e-n``) are
   joined, for runs of four or more single letters;
3. leetspeak inside words (``w0men``, ``4sians``, ``l@zy``): digits and symbols that
   stand for letters become the letters, only in a token that has at least three
   letters (or one common stand-in between two letters: ``b4d``) and where the stand-ins are not the token's tail (``mp3``, ``covid19``,
   ``3pm`` and ``2nd`` stay as written);
4. look-alike letters that NFKC does not fold (Latin small capitals ``ᴡᴏᴍᴇɴ``).

Mixed-script confusables (a Cyrillic ``а`` inside a Latin word) are folded by
``normalize.fold_confusables``, which runs before these steps.
"""

from __future__ import annotations

import re
import unicodedata

# Regional-indicator pairs: the countries most often used as stand-ins in chat. Others
# are written as their two-letter code ("[flag of XY]"), which a judge still reads.
_FLAG_NAMES = {
    "US": "the United States", "GB": "the United Kingdom", "FR": "France", "DE": "Germany",
    "IT": "Italy", "ES": "Spain", "PT": "Portugal", "NL": "the Netherlands", "PL": "Poland",
    "RO": "Romania", "UA": "Ukraine", "RU": "Russia", "TR": "Turkey", "GR": "Greece",
    "IE": "Ireland", "MX": "Mexico", "BR": "Brazil", "AR": "Argentina", "CO": "Colombia",
    "VE": "Venezuela", "CU": "Cuba", "HT": "Haiti", "JM": "Jamaica", "CA": "Canada",
    "CN": "China", "JP": "Japan", "KR": "South Korea", "IN": "India", "PK": "Pakistan",
    "BD": "Bangladesh", "PH": "the Philippines", "VN": "Vietnam", "ID": "Indonesia",
    "IL": "Israel", "PS": "Palestine", "SA": "Saudi Arabia", "IR": "Iran", "IQ": "Iraq",
    "SY": "Syria", "AF": "Afghanistan", "EG": "Egypt", "MA": "Morocco", "DZ": "Algeria",
    "NG": "Nigeria", "GH": "Ghana", "KE": "Kenya", "ET": "Ethiopia", "SO": "Somalia",
    "ZA": "South Africa", "AU": "Australia", "AL": "Albania", "RS": "Serbia",
}  # fmt: skip
_REGIONAL = re.compile("([\U0001f1e6-\U0001f1ff])([\U0001f1e6-\U0001f1ff])")
# ZWJ sequences that mean something other than their parts.
_SEQUENCES = {
    "\U0001f3f3\ufe0f\u200d\U0001f308": "rainbow flag (LGBTQ+)",
    "\U0001f3f3\u200d\U0001f308": "rainbow flag (LGBTQ+)",
    "\U0001f3f3\ufe0f\u200d\u26a7\ufe0f": "transgender flag",
    "\U0001f3f3\ufe0f\u200d\u26a7": "transgender flag",
    "\U0001f3f3\u200d\u26a7\ufe0f": "transgender flag",
}
_MODIFIERS = re.compile("[\U0001f3fb-\U0001f3ff\ufe0e\ufe0f]")
_ZWJ = "\u200d"


def _is_pictograph(ch: str) -> bool:
    cp = ord(ch)
    return unicodedata.category(ch) == "So" and (
        0x1F000 <= cp <= 0x1FAFF or 0x2600 <= cp <= 0x27BF or 0x2B00 <= cp <= 0x2BFF
    )


def _emoji_name(ch: str) -> str:
    name = unicodedata.name(ch, "").lower()
    return name.removeprefix("emoji ") if name else ""


def name_emoji(text: str) -> tuple[str, int]:
    """Emoji, ZWJ sequences and flags as ``[name]``; (text, emoji named)."""
    count = 0
    for seq, name in _SEQUENCES.items():
        if seq in text:
            count += text.count(seq)
            text = text.replace(seq, f" [{name}] ")

    def flag(match: re.Match[str]) -> str:
        nonlocal count
        count += 1
        code = "".join(chr(ord(c) - 0x1F1E6 + ord("A")) for c in match.groups())
        return f" [flag of {_FLAG_NAMES.get(code, code)}] "

    text = _REGIONAL.sub(flag, text)
    if not any(_is_pictograph(ch) for ch in text):
        return text, count
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        nonlocal count
        if run:
            count += 1
            out.append(" [" + " ".join(run) + "] ")
            run.clear()

    i = 0
    while i < len(text):
        ch = text[i]
        if _is_pictograph(ch) and (name := _emoji_name(ch)):
            run.append(name)
            # A ZWJ sequence (woman + wheelchair) is one picture: its parts, one bracket.
            j = i + 1
            while j < len(text) and (_MODIFIERS.match(text[j]) or text[j] == _ZWJ):
                j += 1
            if j < len(text) and text[j - 1 : j] == _ZWJ and _is_pictograph(text[j]):
                i = j
                continue
            flush()
            i = j
            continue
        out.append(ch)
        i += 1
    flush()
    return "".join(out), count


# w.o.m.e.n / w-o-m-e-n / w_o_m_e_n: four or more single letters, one separator.
_SPACED = re.compile(r"(?<!\w)[A-Za-z](?P<sep>[.\-_*])(?:[A-Za-z](?P=sep)){2,}[A-Za-z](?!\w)")
# w o m e n  a r e: single letters one space apart (words two or more spaces apart).
_SPACED_RUN = re.compile(r"(?<!\S)[A-Za-z](?: [A-Za-z]){3,}(?!\S)")
_LETTER_RUN = re.compile(r"(?<!\S)[A-Za-z](?: [A-Za-z])+(?!\S)")


def join_spaced_letters(text: str) -> tuple[str, int]:
    """Runs of four or more single letters, one separator apart, as words; (text, runs)."""
    count = 0

    def join(match: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return match.group(0).replace(match.group("sep"), "")

    def join_run(match: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return match.group(0).replace(" ", "")

    lines = []
    for line in text.split("\n"):
        if _SPACED_RUN.search(line):
            # The line is spelled out: every single-spaced run is a word, wide gaps are spaces.
            line = re.sub(r" {2,}", "  ", line)
            line = _LETTER_RUN.sub(join_run, line)
            line = re.sub(r" {2,}", " ", line)
        lines.append(line)
    return _SPACED.sub(join, "\n".join(lines)), count


_LEET = {"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s",
         "!": "i", "8": "b", "9": "g"}  # fmt: skip
# A number with a unit written against it (40KHz, 16GB) or a long number: not leetspeak.
_MEASURE = re.compile(r"\d{2,}[A-Z]|\d{3,}")
# A three-character word with one common stand-in between two letters (b4d, h0t).
_SHORT_LEET = re.compile(r"[A-Za-z][013457@$][A-Za-z]")
_TOKEN = re.compile(r"[A-Za-z0-9@$!]+")
_NUMERIC_TAIL = re.compile(
    r"^\d+(?:st|nd|rd|th|am|pm|k|m|s|h|x|d|g|kg|km|gb|mb|min|hrs?|yrs?|yo|ish|ft|cm|mm|ml)?$",
    re.IGNORECASE,
)


def undo_leetspeak(text: str) -> tuple[str, int]:
    """Digits and symbols standing for letters inside words; (text, words rewritten)."""
    count = 0

    def fix(match: re.Match[str]) -> str:
        nonlocal count
        token = match.group(0)
        before = text[match.start() - 1] if match.start() else " "
        if before in ".,:/" or before.isdigit():
            return token  # the tail of a number: 120.75dbm, $1,00per
        if token[0].isdigit() and (token[1:2].isdigit() or sum(c.isalpha() for c in token) < 4):
            return token  # a quantity with its unit: 1atm, 00per
        letters = sum(ch.isalpha() for ch in token)
        stand_ins = [i for i, ch in enumerate(token) if ch in _LEET]
        if not stand_ins or letters < 2 or _NUMERIC_TAIL.match(token) or _MEASURE.search(token):
            return token
        if letters == 2 and not _SHORT_LEET.fullmatch(token):
            return token
        core = token.rstrip("!")  # "lazy!" is punctuation, not leetspeak
        if not any(ch in _LEET for ch in core):
            return token
        # The stand-ins must sit before a letter (w0men, 4sians), not only at the tail (mp3).
        if not any(i + 1 < len(core) and core[i + 1].isalpha() for i, ch in enumerate(core)
                   if ch in _LEET):  # fmt: skip
            return token
        if sum(ch.isdigit() for ch in core) > letters:
            return token
        count += 1
        return "".join(_LEET.get(ch, ch) for ch in core) + token[len(core) :]

    return _TOKEN.sub(fix, text), count


_SMALL_CAPS = str.maketrans({
    "ᴀ": "a", "ʙ": "b", "ᴄ": "c", "ᴅ": "d", "ᴇ": "e", "ꜰ": "f", "ɢ": "g", "ʜ": "h", "ɪ": "i",
    "ᴊ": "j", "ᴋ": "k", "ʟ": "l", "ᴍ": "m", "ɴ": "n", "ᴏ": "o", "ᴘ": "p", "ʀ": "r", "ꜱ": "s",
    "ᴛ": "t", "ᴜ": "u", "ᴠ": "v", "ᴡ": "w", "ʏ": "y", "ᴢ": "z",
})  # fmt: skip


def fold_small_caps(text: str) -> tuple[str, int]:
    """Latin small capitals (not folded by NFKC) as plain letters; (text, letters)."""
    folded = text.translate(_SMALL_CAPS)
    return folded, sum(a != b for a, b in zip(text, folded, strict=True))


def deobfuscate(text: str) -> tuple[str, int]:
    """Every step above in order; (text, spans rewritten)."""
    total = 0
    for step in (fold_small_caps, join_spaced_letters, undo_leetspeak):
        text, n = step(text)
        total += n
    return text, total
