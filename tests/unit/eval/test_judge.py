"""Judges: rule metrics, and the LLM judge asking a backend only about inexact answers."""

from __future__ import annotations

from framework.eval.judge import JudgeInputs, LLMJudge, LLMJudgeConfig, RuleJudge, RuleJudgeConfig
from framework.types import Generation

INPUTS = JudgeInputs(
    questions=["q1", "q2", "q3", "q4"],
    answers=["Paris", "the city of Paris", None, "Lyon"],
    golds=[["Paris"], ["Paris"], ["Paris"], ["Paris"]],
)


def test_rule_judge_metrics():
    em = RuleJudge(cfg=RuleJudgeConfig(name="rule"))(INPUTS)
    assert em == [True, False, False, False]
    sub = RuleJudge(cfg=RuleJudgeConfig(name="rule", metric="substring"))(INPUTS)
    assert sub == [True, True, False, False]
    f1 = RuleJudge(cfg=RuleJudgeConfig(name="rule", metric="f1", f1_threshold=0.5))(INPUTS)
    assert f1 == [True, True, False, False]  # "city paris" vs "paris": F1 2/3


class _Tok:
    def apply_chat_template(self, messages, **kwargs):
        return [ord(c) for c in messages[0]["content"]]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)


class _Backend:
    """Says yes when the prompt's proposed answer mentions Paris."""

    tokenizer = _Tok()

    def __init__(self):
        self.asked = []

    def generate(self, sequences, max_new_tokens, stop):
        out = []
        for seq in sequences:
            text = "".join(chr(i) for i in seq)
            self.asked.append(text)
            proposed = text.split("Proposed answer: ")[1].split("\n")[0]
            reply = "Yes." if "Paris" in proposed else "No"
            out.append(Generation([ord(c) for c in reply], "eos"))
        return out


def test_llm_judge_asks_only_about_inexact_answers():
    backend = _Backend()
    verdicts = LLMJudge(cfg=LLMJudgeConfig(name="llm"), backend=backend)(INPUTS)
    assert verdicts == [True, True, False, False]
    assert len(backend.asked) == 2  # the exact match and the missing answer are not asked
    assert "Gold answer(s): Paris" in backend.asked[0]
