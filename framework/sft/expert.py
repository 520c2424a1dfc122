"""Expert ReAct trajectories that follow each synthesized question's chain, against the real retriever.

For a question built from the walk ``e0 -> e1 -> ... -> ek`` the expert thinks about what to look up,
searches with queries made from the known name and the next entity's description, reads the real
results, names the next entity in its next think once it is visible in an observation (visiting the
article when the snippets are cut short), and finally answers ``ek``. The expert runs inside the
ordinary agent loop as a scripted rollout backend, so its trajectories have exactly the token layout
of policy rollouts (chat template, observation tokenisation, loss mask).

The expert writes the ``seekrl`` protocol's format (``<tool_call>`` JSON, ``<tool_response>``
observations), so it runs only with ``agent.protocol=seekrl``
(:func:`expert_protocol_problems`).

A trajectory is kept only when every entity it names was really in an observation before it named
it and it ends with the gold answer; otherwise it is dropped and the reason counted. Wording, number
of queries, extra (failed) searches and optional visits vary with a seeded RNG.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from framework.config import ConfigError, Problem, check_range, option
from framework.data.schema import QAItem
from framework.data.synthesis import with_article
from framework.rewards.text import exact_match
from framework.rollout.config import AgentConfig
from framework.rollout.engine import AgentLoop
from framework.types import STATUS_OK, STATUS_OVER_BUDGET, Generation, Trajectory

#: the protocol whose format the expert's scripted turns are written in
EXPERT_PROTOCOL = "seekrl"


def expert_protocol_problems(agent: AgentConfig, what: str, instead: str = "") -> list[Problem]:
    """A problem when ``agent.protocol`` is not the expert's (its turns are seekrl text).

    Args:
        agent: the agent config of the run.
        what: what uses the expert, for the message (``warm_start.sft=true``).
        instead: the other way out, for the fix (``set warm_start.sft=false ...``).
    """
    if agent.protocol == EXPERT_PROTOCOL:
        return []
    fix = f"set agent.protocol={EXPERT_PROTOCOL}" + (f", or {instead}" if instead else "")
    return [
        Problem(
            "agent.protocol",
            agent.protocol,
            f"'{EXPERT_PROTOCOL}' with {what}: the cold-start expert writes seekrl's <tool_call> "
            "format only",
            fix,
        )
    ]


@dataclass
class ExpertConfig:
    """How expert trajectories are made."""

    questions: int = option(600, "training questions to write (0 = all)")
    seed: int = 0
    extra_search_prob: float = option(0.15, "chance of a first search on the description alone")
    visit_prob: float = option(0.15, "chance of visiting the article even when not needed")
    max_queries: int = option(3, "queries per search call (1 to 3)")
    batch_questions: int = option(64, "questions rolled out together")
    within_budget: bool = option(
        False,
        "take an optional step (the first search on the description alone, a visit the "
        "snippets made unneeded) only when the tool calls it leaves under agent.max_tool_calls "
        "still allow one search per hop left; false = as before, and a trajectory over the "
        "budget is dropped (issue 79: 165 of 600 two-hop questions of a 1,200-question cold "
        "start were)",
    )

    def problems(self) -> list[Problem]:
        out = check_range(self.questions, "questions", low=0)
        out += check_range(self.extra_search_prob, "extra_search_prob", low=0.0, high=1.0)
        out += check_range(self.visit_prob, "visit_prob", low=0.0, high=1.0)
        out += check_range(self.max_queries, "max_queries", low=1, high=3)
        out += check_range(self.batch_questions, "batch_questions", low=1)
        return out


PLAN = (
    "I need the {clue} that the article on {name} mentions. Let me search for {name}.",
    "First, find the Wikipedia article about {name} and look for {a_clue} in it.",
    "The question starts from {name}. I will search for it and look for {a_clue}.",
)
FOUND = (
    "The article on {name} mentions {found}, which fits {a_clue}.",
    "According to the results, {name} mentions {found}: that is the {clue}.",
    "{found} appears in the article on {name}; it is {a_clue}.",
)
NEXT = (
    " Now I need the {clue} mentioned in the article on {name}.",
    " Next, search for {name} and find {a_clue} there.",
    " The next step is the article on {name}, which should mention {a_clue}.",
)
VISIT = (
    "The snippet about {name} is cut short. Let me read the whole article.",
    "I do not see {a_clue} in the snippets yet; I will open the article on {name}.",
)
FAILED = (
    "Searching the description alone did not clearly point to it. Let me search for {name} directly.",
    "That search was too vague. I should look up {name} itself.",
)
ANSWER = (
    "So the answer is {answer}.",
    "Therefore the {clue} is {answer}.",
    "The answer is {answer}.",
)


def _a(phrase: str) -> str:
    return with_article(phrase)


@dataclass
class _Plan:
    """The expert's state for one question while the loop runs."""

    item: QAItem
    rng: random.Random
    cfg: ExpertConfig
    hop: int = 1  # the entity being looked for (1..k)
    seen: int = 0  # tokens of the sequence already read
    phase: str = "start"  # start | extra | searched | visited | done
    found_in_search: bool = False
    failure: str | None = None
    extra_search: bool = False  # began with an unhelpful search on the description alone
    max_tool_calls: int = 0  # the agent's budget, heeded by optional steps with within_budget
    calls: int = 0  # tool calls written so far

    @property
    def names(self) -> list[str]:
        return [e[0] for e in self.item.entities or ()]

    @property
    def clues(self) -> list[str]:
        return list(self.item.extra.get("clues") or [])

    @property
    def mentions(self) -> list[str]:
        return list(self.item.extra.get("mentions") or [])

    def _search_call(self, name: str, clue: str) -> str:
        queries = [name, f"{name} {clue}", clue]
        n = self.rng.randint(1, self.cfg.max_queries)
        chosen = queries[:n] if n < 3 else queries
        return _call("search", {"queries": chosen})

    def next_turn(self, observation: str) -> str:
        """The expert's next model turn, given the text that arrived since its last turn."""
        turn = self._next_turn(observation)
        self.calls += "<tool_call>" in turn
        return turn

    def _affords(self, searches_left: int) -> bool:
        """Whether an optional tool call now still leaves ``searches_left`` mandatory searches
        within the agent's budget (always, unless ``within_budget``)."""
        if not self.cfg.within_budget or self.max_tool_calls <= 0:
            return True
        return self.calls + 1 + searches_left <= self.max_tool_calls

    def _next_turn(self, observation: str) -> str:
        k = len(self.names) - 1
        name, clue = self.names[self.hop - 1], self.clues[self.hop - 1]
        mention = self.mentions[self.hop - 1]
        kw = {"name": name, "clue": clue, "a_clue": _a(clue)}
        if self.phase == "start":
            extra = self.rng.random() < self.cfg.extra_search_prob
            if self.hop == 1 and extra and self._affords(searches_left=k):
                self.phase = "extra"
                self.extra_search = True
                think = f"I need to identify {_a(clue)}. Let me try searching for the description."
                return _turn(think, _call("search", {"queries": [clue]}))
            self.phase = "searched"
            return _turn(self.rng.choice(PLAN).format(**kw), self._search_call(name, clue))
        if self.phase == "extra":
            self.phase = "searched"
            return _turn(self.rng.choice(FAILED).format(**kw), self._search_call(name, clue))
        if self.phase in ("searched", "visited"):
            found = mention in observation or (self.phase == "visited" and self.found_in_search)
            visit_anyway = (
                self.phase == "searched"
                and self.rng.random() < self.cfg.visit_prob
                and self._affords(searches_left=k - self.hop)
            )
            if (not found or visit_anyway) and self.phase == "searched":
                self.phase = "visited"
                self.found_in_search = found
                goal = f"find {_a(clue)}"
                call = _call(
                    "visit", {"title": (self.item.chain or ())[self.hop - 1], "goal": goal}
                )
                return _turn(self.rng.choice(VISIT).format(**kw), call)
            if not found:
                self.failure = "evidence not retrieved"
                self.phase = "done"
                return _turn(f"I could not find {_a(clue)}.", "<answer>unknown</answer>")
            self.found_in_search = False
            said = self.rng.choice(FOUND).format(found=mention, **kw)
            if self.hop == k:
                self.phase = "done"
                answer = self.item.golden_answers[0]
                end = self.rng.choice(ANSWER).format(answer=answer, clue=clue)
                return _turn(f"{said} {end}", f"<answer>{answer}</answer>")
            self.hop += 1
            nxt = self.names[self.hop - 1]
            kw2 = {"name": nxt, "clue": self.clues[self.hop - 1]}
            kw2["a_clue"] = _a(kw2["clue"])
            think = said + self.rng.choice(NEXT).format(**kw2)
            self.phase = "searched"
            return _turn(think, self._search_call(nxt, kw2["clue"]))
        return _turn("", "<answer>unknown</answer>")


def _call(name: str, arguments: dict[str, Any]) -> str:
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>{body}</tool_call>"


def _turn(think: str, action: str) -> str:
    return f"<think>{think}</think>\n{action}" if think else action


class ExpertBackend:
    """A rollout backend whose "generations" are the expert's scripted turns.

    Rollouts are told apart by their prompt tokens; each question must appear once per run.
    """

    def __init__(self, tokenizer: Any, plans: dict[tuple[int, ...], _Plan]) -> None:
        self.tokenizer = tokenizer
        self.plans = plans
        self.calls = 0

    def generate(
        self,
        sequences: Sequence[Sequence[int]],
        max_new_tokens: Sequence[int],
        stop: Sequence[str],
        seeds: Sequence[int] | None = None,  # scripted turns: nothing to seed
    ) -> list[Generation]:
        out = []
        for seq, limit in zip(sequences, max_new_tokens, strict=True):
            key, plan = next((k, p) for k, p in self.plans.items() if tuple(seq[: len(k)]) == k)
            start = plan.seen or len(key)  # first turn: everything after the prompt is new
            observation = self.tokenizer.decode(list(seq[start:]), skip_special_tokens=False)
            text = plan.next_turn(observation)
            ids = [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]
            finish = "stop"
            if len(ids) > limit:
                ids, finish = ids[:limit], "length"
                plan.failure = (
                    plan.failure or "expert turn longer than agent.max_new_tokens_per_turn"
                )
            plan.seen = len(seq) + len(ids)
            out.append(Generation(ids, finish))
        self.calls += 1
        return out

    def update_weights(
        self, model: torch.nn.Module
    ) -> None:  # nothing to update: the expert is a script
        return None


@dataclass
class ExpertReport:
    """What happened to every question handed to the expert."""

    requested: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)
    hops_kept: Counter = field(default_factory=Counter)
    visits: int = 0
    extra_searches: int = 0
    mean_tokens: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "requested": self.requested,
            "kept": self.kept,
            "dropped": dict(self.dropped),
            "kept_by_hops": {str(k): v for k, v in sorted(self.hops_kept.items())},
            "trajectories_with_visit": self.visits,
            "trajectories_with_extra_search": self.extra_searches,
            "mean_tokens": round(self.mean_tokens, 1),
        }


#: what the expert reads from a question besides its text and answers: the walk it follows
EXPERT_FIELDS = (
    "extra_info.entities (2 or more: the anchor the question names, then one per hop, the answer "
    "last), extra_info.chain (per entity the title of its article in the retriever's corpus: the "
    "expert visits chain[k] when the snippets fall short) and extra_info.clues / "
    "extra_info.mentions (one per hop: the description the question gives of entity k, and the "
    "name under which entity k-1's article mentions it), as seekrl-synth writes them"
)


def usable_questions(items: Sequence[QAItem]) -> tuple[list[QAItem], Counter]:
    """The questions the expert can follow, and why each other one is dropped before it runs.

    The expert follows a question's walk ``e0 -> ... -> ek`` (:data:`EXPERT_FIELDS`), so a question
    needs at least two entities, a chain with a document per hop, and one clue and one mention per
    hop; a question asked twice is written once. What needs the retriever (is each mention in the
    results?) is checked only when the expert runs.

    Returns:
        The usable questions in order, and a count per drop reason.
    """
    usable: list[QAItem] = []
    dropped: Counter = Counter()
    seen_questions: set[str] = set()
    for it in items:
        hops = len(it.entities or ()) - 1
        if hops < 1:
            dropped["fewer than 2 entities"] += 1
        elif not it.chain:
            dropped["no chain"] += 1
        elif len(it.chain) < hops:
            dropped["chain shorter than its hops"] += 1
        elif not (
            _per_hop(it.extra.get("clues"), hops) and _per_hop(it.extra.get("mentions"), hops)
        ):
            dropped["no clues or mentions (not a seekrl-synth question)"] += 1
        elif it.question in seen_questions:
            dropped["duplicate question"] += 1
        else:
            seen_questions.add(it.question)
            usable.append(it)
    return usable, dropped


def _per_hop(values: Any, hops: int) -> bool:
    """Whether ``values`` is a list of ``hops`` non-blank strings."""
    return (
        isinstance(values, list)
        and len(values) == hops
        and all(isinstance(v, str) and v.strip() for v in values)
    )


def expert_trajectories(
    items: Sequence[QAItem],
    retriever: Any,
    tokenizer: Any,
    agent: AgentConfig,
    cfg: ExpertConfig,
    *,
    progress: Any = None,
) -> tuple[list[tuple[QAItem, Trajectory]], ExpertReport]:
    """Expert trajectories for ``items`` (those that pass the evidence check) and the report.

    Raises:
        ConfigError: ``agent.protocol`` is not ``seekrl`` (the expert writes seekrl's format).
    """
    wrong = expert_protocol_problems(agent, "expert trajectories")
    if wrong:
        raise ConfigError(wrong)
    report = ExpertReport(requested=len(items))
    kept: list[tuple[QAItem, Trajectory]] = []
    usable, dropped = usable_questions(items)
    report.dropped.update(dropped)
    rng = random.Random(cfg.seed)
    step = cfg.batch_questions
    for start in range(0, len(usable), step):
        batch = usable[start : start + step]
        plans: dict[tuple[int, ...], _Plan] = {}
        backend = ExpertBackend(tokenizer, plans)
        loop = AgentLoop(backend, retriever, agent)
        for it in batch:
            plans[tuple(loop.prompt_ids(it.question))] = _Plan(
                it, random.Random(rng.getrandbits(64)), cfg, max_tool_calls=agent.max_tool_calls
            )
        trajs = loop.run([it.question for it in batch], 1)
        for it, plan, t in zip(batch, plans.values(), trajs, strict=True):
            reason = _drop_reason(it, plan, t)
            if reason:
                report.dropped[reason] += 1
                continue
            kept.append((it, t))
            report.hops_kept[len(it.entities or ()) - 1] += 1
            report.visits += t.stats.get("visits", 0) > 0
            report.extra_searches += plan.extra_search
        if progress is not None:
            progress(min(start + step, len(usable)), len(usable))
    report.kept = len(kept)
    if kept:
        report.mean_tokens = sum(len(t.token_ids) for _, t in kept) / len(kept)
    return kept, report


def _drop_reason(item: QAItem, plan: _Plan, t: Trajectory) -> str | None:
    if plan.failure:
        return plan.failure
    if t.status == STATUS_OVER_BUDGET:
        return f"over budget ({t.end_reason})"
    if t.status != STATUS_OK:
        return f"format error ({t.end_reason})"
    if t.answer is None or not exact_match(t.answer, item.golden_answers):
        return "wrong answer"
    return None
