"""Judges decide whether a final answer is correct: rule-based (default) or an LLM asked through a
rollout backend. One signature: ``judge(JudgeInputs) -> list[bool]``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from framework.config import ComponentConfig, Problem, check_choice, check_range, option
from framework.registry.kinds import JUDGES
from framework.rewards.text import ANSWER_METRICS, answer_metric
from framework.rollout.policy import chat_prompt_ids
from framework.types import Generation


class JudgeTokenizer(Protocol):
    """What the LLM judge needs of a tokenizer beyond its chat template: decoding a verdict."""

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = ...) -> str: ...


class JudgeBackend(Protocol):
    """What the LLM judge needs of a rollout backend: its tokenizer and batched generation."""

    tokenizer: JudgeTokenizer

    def generate(
        self, sequences: Sequence[Sequence[int]], max_new_tokens: Sequence[int], stop: Sequence[str]
    ) -> list[Generation]: ...


@dataclass
class JudgeInputs:
    """Questions, the final answers (``None`` when a rollout gave none) and the gold answers."""

    questions: Sequence[str]
    answers: Sequence[str | None]
    golds: Sequence[Sequence[str]]


@dataclass
class RuleJudgeConfig(ComponentConfig):
    metric: str = option(
        "em", f"one of {tuple(ANSWER_METRICS)}; a graded one (f1) with the threshold"
    )
    f1_threshold: float = option(0.8, "graded metrics (f1): correct at or above")

    def problems(self) -> list[Problem]:
        out = check_choice(self.metric, "metric", ANSWER_METRICS)
        out += check_range(self.f1_threshold, "f1_threshold", low=0.0, high=1.0)
        return out


@JUDGES.register("rule", config=RuleJudgeConfig)
class RuleJudge:
    """An answer metric's verdict: normalised exact match (default), substring match, or token F1
    at or above a threshold (:data:`~framework.rewards.text.ANSWER_METRICS`)."""

    def __init__(self, *, cfg: RuleJudgeConfig, backend: JudgeBackend | None = None) -> None:
        self.cfg = cfg

    def __call__(self, inputs: JudgeInputs) -> list[bool]:
        metric = answer_metric(self.cfg.metric, "judge.metric")
        return [
            answer is not None and metric.correct(answer, golds, self.cfg.f1_threshold)
            for answer, golds in zip(inputs.answers, inputs.golds, strict=True)
        ]


JUDGE_PROMPT = """Question: {question}
Gold answer(s): {golds}
Proposed answer: {answer}
Does the proposed answer mean the same as a gold answer? Reply with one word, yes or no."""


@dataclass
class LLMJudgeConfig(ComponentConfig):
    max_new_tokens: int = option(4, "tokens of the verdict")
    rule_first: bool = option(True, "accept exact matches without asking the model")

    def problems(self) -> list[Problem]:
        return check_range(self.max_new_tokens, "max_new_tokens", low=1)


@JUDGES.register("llm", config=LLMJudgeConfig)
class LLMJudge:
    """Asks a language model (any rollout backend) whether each answer matches a gold answer.

    Args:
        cfg: verdict length and whether exact matches skip the model.
        backend: the rollout backend that generates the verdicts (the eval app passes its own).
    """

    def __init__(self, *, cfg: LLMJudgeConfig, backend: JudgeBackend | None = None) -> None:
        if backend is None:
            raise ValueError(
                "[judge] got judge=llm without a rollout backend. Fix: run it from seekrl-eval, "
                "which passes the configured backend, or use judge=rule."
            )
        self.cfg = cfg
        self.backend = backend
        self.rule = RuleJudge(cfg=RuleJudgeConfig(name="rule"))

    def __call__(self, inputs: JudgeInputs) -> list[bool]:
        verdicts = self.rule(inputs) if self.cfg.rule_first else [False] * len(inputs.answers)
        ask = [
            i for i, (v, a) in enumerate(zip(verdicts, inputs.answers, strict=True)) if not v and a
        ]
        if not ask:
            return verdicts
        tok = self.backend.tokenizer
        prompts = []
        for i in ask:
            text = JUDGE_PROMPT.format(
                question=inputs.questions[i],
                golds="; ".join(inputs.golds[i]),
                answer=inputs.answers[i],
            )
            prompts.append(chat_prompt_ids(tok, [{"role": "user", "content": text}]))
        outs = self.backend.generate(prompts, [self.cfg.max_new_tokens] * len(prompts), [])
        for i, gen in zip(ask, outs, strict=True):
            reply = tok.decode(gen.token_ids, skip_special_tokens=True).strip().lower()
            verdicts[i] = reply.startswith("yes")
        return verdicts
