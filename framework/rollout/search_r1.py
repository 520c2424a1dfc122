"""``search_r1``: Search-R1's agent protocol, as its code has it.

Search-R1 (Jin et al., arXiv 2503.09516; github.com/PeterGriffinJin/Search-R1, Apache-2.0). The
strings below are reproduced from its code, the code itself is not copied:

- prompt: ``make_prefix`` of ``scripts/data_process/qa_search_train_merge.py`` (template
  ``base``): its instruction, then ``Question: {question}\\n``, as ONE user message through the
  chat template (Search-R1's data rows carry the question already stripped and ending in ``?``;
  the protocol takes it as given). There is no system message.
- stop: generation stops after ``</search>`` or ``</answer>``; the backend cuts the turn after the
  first of them (Search-R1 cuts its decoded string the same way, then re-tokenises it; here the
  sampled tokens are kept as they are, token in, token out).
- action: the first ``<search>...</search>`` or ``<answer>...</answer>`` span of the turn
  (``postprocess_predictions`` of ``search_r1/llm_agent/generation.py``: ``re.search(
  r"<(search|answer)>(.*?)</\\1>", turn, re.DOTALL)``, content stripped), found here in linear
  time (:func:`first_action`). An answer ends the rollout; a search is one query.
- observation: ``\\n\\n<information>{results.strip()}</information>\\n\\n`` with, per hit,
  ``Doc {i}(Title: {title}) {text}\\n`` (``execute_predictions`` and ``_passages2string``), title
  and text split from the hit's ``contents`` (:func:`passages_text`); top-k is ``agent.search_k``.
  The retriever is asked only through ``search`` (an HTTP retriever posts to ``/retrieve``); there
  is no ``visit`` tool.
- invalid action (no span): the message of ``execute_predictions`` is appended and the rollout
  goes on, as in Search-R1 (it ends at ``agent.max_turns`` or a token budget instead;
  ``agent.max_invalid_calls`` does not apply). The turn counts as one invalid call in the stats.

Where seekrl differs, and why: a query the retriever refuses (an empty ``<search></search>``)
gets ``search failed: <reason>`` inside ``<information>`` (Search-R1 would send it to its server);
Search-R1's ``max_obs_length`` cut of long observations is not applied (``agent.max_total_tokens``
bounds the rollout); Search-R1's ``max_turns`` counts search rounds and adds one final turn
without search, ``agent.max_turns`` counts model turns.

E-GRPO's entity reward reads the ``<think>`` text, which this protocol collects as ``seekrl`` does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from framework.registry import AGENT_PROTOCOLS
from framework.registry.protocols import Retriever, Tokenizer
from framework.rollout.config import AgentConfig
from framework.rollout.parser import Turn
from framework.rollout.policy import chat_prompt_ids
from framework.rollout.protocol import Observation, ProtocolConfig, encode
from framework.rollout.tools import Tool, ToolResult, clean, parse_search, search_results
from framework.types import Hit, ToolCall

# -- Search-R1's strings (PeterGriffinJin/Search-R1, Apache-2.0) -----------------------------------
#: make_prefix (template "base") of scripts/data_process/qa_search_train_merge.py, before the
#: question
INSTRUCTION = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every "
    "time you get new information. After reasoning, if you find you lack some knowledge, you can "
    "call a search engine by <search> query </search> and it will return the top searched results "
    "between <information> and </information>. You can search as many times as your want. If you "
    "find no further external knowledge needed, you can directly provide the answer inside "
    "<answer> and </answer>, without detailed illustrations. For example, <answer> Beijing "
    "</answer>. Question: "
)
#: execute_predictions of search_r1/llm_agent/generation.py: the observation of an invalid action
INVALID_ACTION = (
    "\nMy previous action is invalid. If I want to search, I should put the query between "
    "<search> and </search>. If I want to give the final answer, I should put the answer between "
    "<answer> and </answer>. Let me try again.\n"
)
SEARCH = ("<search>", "</search>")
ANSWER = ("<answer>", "</answer>")
INFORMATION = ("<information>", "</information>")
THINK = ("<think>", "</think>")
# --------------------------------------------------------------------------------------------------

NO_ACTION = "no <search> and no <answer> span"
_OPEN = re.compile(r"<(search|answer)>")
_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL)


def first_action(text: str) -> tuple[str, str] | None:
    """``(kind, content)`` of the first ``<search>``/``<answer>`` span, content unstripped; None
    when there is none.

    The same span as ``re.search(r"<(search|answer)>(.*?)</\\1>", text, re.DOTALL)``: the
    leftmost opening tag whose closing tag follows, up to the first such closing tag. Linear: once
    a kind's closing tag is missing after one opening, no later opening of that kind is tried.
    """
    unclosed: set[str] = set()
    for m in _OPEN.finditer(text):
        kind = m.group(1)
        if kind in unclosed:
            continue
        end = text.find(f"</{kind}>", m.end())
        if end >= 0:
            return kind, text[m.end() : end]
        unclosed.add(kind)
        if len(unclosed) == 2:
            return None
    return None


def passages_text(hits: Sequence[Hit]) -> str:
    """Search-R1's ``_passages2string`` of the hits: ``Doc {i}(Title: {title}) {text}\\n`` each.

    Search-R1 splits each passage's ``contents`` at its newlines: title = the first line, text =
    the other lines joined by newlines. The same split is made of :meth:`Hit.contents`
    (``"{title}"\\n{text}``, what seekrl's retrieval server serves as ``contents``), so a wiki-18
    passage reads as in Search-R1, its title in quotes: ``Doc 1(Title: "Jaws (film)") Jaws is ...``.
    """
    out = ""
    for idx, hit in enumerate(hits):
        lines = hit.contents().split("\n")
        title, text = lines[0], "\n".join(lines[1:])
        out += f"Doc {idx + 1}(Title: {title}) {text}\n"
    return out


def answer_search(
    calls: Sequence[ToolCall], retriever: Retriever, cfg: AgentConfig
) -> list[ToolResult]:
    """Each call's query's top ``cfg.search_k`` passages as :func:`passages_text` (all evidence),
    or why its search failed (none)."""
    results = search_results(calls, retriever, cfg.search_k)
    out = []
    for call in calls:
        got = results.get(call.queries[0], [])
        text = got if isinstance(got, str) else passages_text(got)
        out.append(ToolResult(text, "" if isinstance(got, str) else text))
    return out


#: Search-R1 has one tool, a search with one query per turn
TOOLS: dict[str, Tool] = {
    "search": Tool(parse_search, answer_search, stat="queries", count=lambda c: len(c.queries)),
}


@dataclass
class SearchR1ProtocolConfig(ProtocolConfig):
    paper: ClassVar[str] = "Search-R1, arXiv 2503.09516 (PeterGriffinJin/Search-R1)"
    fidelity: ClassVar[str] = "exact"


@AGENT_PROTOCOLS.register("search_r1", config=SearchR1ProtocolConfig)
class SearchR1Protocol:
    """Search-R1's protocol (module docstring)."""

    stop: tuple[str, ...] = (SEARCH[1], ANSWER[1])
    retry_invalid = True
    segment_tags: tuple[tuple[str, str, str], ...] = (
        ("think", *THINK),
        ("tool_call", *SEARCH),
        ("answer", *ANSWER),
    )

    def __init__(self, *, cfg: SearchR1ProtocolConfig) -> None:
        self.cfg = cfg

    @property
    def tools(self) -> Mapping[str, Tool]:
        return TOOLS

    def prompt_ids(self, tokenizer: Tokenizer, question: str) -> list[int]:
        """Search-R1's instruction with the question, one user message, chat-templated."""
        return chat_prompt_ids(tokenizer, [{"role": "user", "content": prompt_text(question)}])

    def parse(self, text: str) -> Turn:
        """The turn's first action (:func:`first_action`) and its ``<think>`` text; never raises."""
        try:
            text = text if isinstance(text, str) else str(text)
            think = "\n".join(t for t in (m.strip() for m in _THINK.findall(text)) if t)
            action = first_action(text)
        except Exception as exc:  # the loop must never die on model output
            return Turn(malformed=f"unparseable output ({type(exc).__name__})")
        if action is None:
            return Turn(think=think, malformed=NO_ACTION)
        kind, content = action
        if kind == "answer":
            return Turn(think=think, answer=content.strip())
        return Turn(think=think, calls=[ToolCall("search", queries=(clean(content),))])

    def observation(self, obs: Observation, tokenizer: Tokenizer) -> tuple[str, list[int]]:
        """``\\n\\n<information>{results}</information>\\n\\n`` after a search, Search-R1's
        invalid-action message after a turn that is no action; tokenised alone."""
        if obs.invalid is not None or not obs.results:
            text = INVALID_ACTION
        else:
            results = "".join(x.text for x in obs.results)
            text = f"\n\n{INFORMATION[0]}{results.strip()}{INFORMATION[1]}\n\n"
        return text, encode(tokenizer, text)


def prompt_text(question: str) -> str:
    """Search-R1's user message for ``question`` (``make_prefix``)."""
    return f"{INSTRUCTION}{question}\n"
