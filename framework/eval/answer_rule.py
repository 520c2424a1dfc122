"""Which text of a rollout is its final answer: the rule an evaluation records beside its figures.

A published EM is only comparable with another taken by the same extraction rule, so every
evaluation writes :data:`ANSWER_RULE` into ``results.json`` (``answer_rule``) and its report.

seekrl's rule (the rollout engine, :func:`framework.rollout.parser.parse_turn`): the answer is the
whitespace-stripped body of the closed ``<answer>...</answer>`` block of the model turn that ended
the rollout. ``</answer>`` is a stop string, so generation stops at the first one and the rollout
ends on it: the block is the first closed ``<answer>`` span of the response and also its last. Text
in a ``<think>`` block and in tool responses is not searched. A rollout that ends without one (a
format error, over budget) has no answer and scores 0 on every metric.

Search-R1's rule (``verl/utils/reward_score/qa_em.py``, ``extract_solution``): the last
``<answer>(.*?)</answer>`` span of the decoded prompt + response, and no answer when there are
fewer than two spans, because its instruction prompt holds one example span (``For example,
<answer> Beijing </answer>.``). On that prompt "at least two spans in prompt + response, the last"
is "at least one span in the response, the last": seekrl's answer. They can differ only where
Search-R1 also counts a span seekrl does not read (inside ``<think>``, or in a retrieved passage's
``<information>`` text) or where a prompt holds no example span or several (Search-R1's count
shifts; seekrl reads the response alone). Both normalise as SQuAD does before EM.
"""

from __future__ import annotations

from collections.abc import Mapping

#: what ``results.json`` records under ``answer_rule`` (the module docstring says why)
ANSWER_RULE: dict[str, str] = {
    "name": "last_answer_span_of_response",
    "rule": (
        "the stripped body of the closed <answer>...</answer> block that ended the rollout: "
        "generation stops at the first </answer>, so it is the first and the last <answer> span "
        "of the response; <think> blocks and tool responses are not searched; no block: no "
        "answer (0 on every metric); EM and F1 after SQuAD normalisation"
    ),
    "search_r1": (
        "Search-R1 (verl/utils/reward_score/qa_em.py) takes the last <answer> span of prompt + "
        "response when there are at least two, its prompt holding one example span: the last "
        "span of the response, as here (they differ only on spans inside <think> or retrieved "
        "passages, which Search-R1 counts, or on a prompt without exactly one example span)"
    ),
}


def answer_rule_markdown(rule: Mapping[str, str]) -> list[str]:
    """The report's lines on the answer-extraction rule ``rule`` (an evaluation's recorded
    :data:`ANSWER_RULE`)."""
    return [f"Answers: {rule['rule']} (`{rule['name']}`). {rule['search_r1']}.", ""]
