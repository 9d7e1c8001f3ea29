"""Is a memory written in English? A cheap test that decides who may judge it.

The embedding first stage (MiniLM, ``first_stage``) was trained on English text
only: its score on a French or Polish stereotype says nothing. The LLM auditor
(Qwen2.5) reads many languages. So text that is probably not English is never
cleared by the first stage alone and its score is not combined with the LLM's
(``stages.StagedAuditor``); the LLM judges it.

The test counts common function words: English ones against those of the
languages users of this proxy write most (Spanish, French, German, Italian,
Portuguese, Dutch, Polish), plus letters outside Latin-1 that English text
rarely has. No model, microseconds per memory. It errs towards "not English" for
mixed text, which only costs an LLM call.
"""

from __future__ import annotations

import re

_ENGLISH_WORDS = (
    "the a an and or but is are was were be been to of in on at for with that this it "
    "i you he she we they my your our their not no do does did have has had can will "
    "would should what how why who which when where if so as from by about there just"
)
_OTHER_WORDS = (
    # es
    "el la los las un una y o pero es son fue en con que por para del al se su sus muy "
    "como más pero yo tú él ella nosotros ellos mi tu no sí porque cuando siempre todos "
    # fr
    "le les des une et ou mais est sont était dans avec pour par du au aux ce cette "
    "ces je tu il elle nous vous ils elles mon ma mes ne pas qui sur très toujours tous "
    # de
    "der die das den dem ein eine einen und oder aber ist sind war mit für von zu im "
    "auf ich du er sie wir ihr mein nicht kein immer alle sehr auch wie weil "
    # it
    "il lo gli di da una e ma sono era con per che non sempre tutti molto mio mia "
    # pt
    "o os as um uma é são em com para por não mas muito sempre todos meu minha "
    # nl
    "de het een en of maar zijn was met voor van niet altijd ook ik jij hij zij wij "
    # pl
    "i w z na się nie jest są to że do jak ale od po tak już tylko zawsze wszyscy"
)
_ENGLISH = frozenset(_ENGLISH_WORDS.split())
_OTHER = frozenset(_OTHER_WORDS.split()) - _ENGLISH
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_LATIN = re.compile(r"[a-zà-ɏ]")
_NON_ENGLISH_LETTER = re.compile(r"[àâäæçéèêëîïôœùûüÿñáíóúãõßąćęłńśźżåøěščřžýůőű]", re.I)


def probably_english(text: str) -> bool:
    """Whether ``text`` reads as English (short or wordless text counts as English)."""
    words = [w.lower() for w in _WORD.findall(text)]
    if len(words) < 4:
        return True
    english = sum(w in _ENGLISH for w in words)
    other = sum(w in _OTHER or not _LATIN.match(w) for w in words)
    accents = len(_NON_ENGLISH_LETTER.findall(text))
    # A few borrowed words ("café", "naïve") stay English; a sentence of them does not.
    return english >= other + accents // 3
