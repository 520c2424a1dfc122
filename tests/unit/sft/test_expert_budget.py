"""The expert's optional steps within the agent's tool-call budget (``within_budget``): a two-hop
walk whose extra search and visits would need 5 calls keeps to 3, and the draws and the trajectory
are as before when the option is off (so are the cold start's cache keys)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from framework.data.schema import QAItem
from framework.sft.expert import ExpertConfig, _Plan


def _two_hop() -> QAItem:
    return QAItem(
        id="q",
        question="What is the capital named in the article on the river of Alpha?",
        golden_answers=("Gamma",),
        entities=(("Alpha",), ("Beta",), ("Gamma",)),
        hops=2,
        chain=("Alpha", "Beta"),
        data_source="seekrl_synth",
        extra={"clues": ["river", "capital"], "mentions": ["Beta", "Gamma"]},
    )


def _calls(cfg: ExpertConfig, max_tool_calls: int) -> list[str]:
    """The tool calls the expert writes when every search already shows the mention it wants."""
    plan = _Plan(_two_hop(), random.Random(0), cfg, max_tool_calls=max_tool_calls)
    out, observation = [], ""
    for _ in range(10):
        turn = plan.next_turn(observation)
        if "<answer>" in turn:
            assert "<answer>Gamma</answer>" in turn
            assert plan.calls == len(out)
            return out
        out.append("visit" if '"visit"' in turn else "search")
        observation = "results naming Beta and Gamma"
    raise AssertionError("the expert did not answer")


def test_every_optional_step_taken_needs_five_calls():
    cfg = ExpertConfig(extra_search_prob=1.0, visit_prob=1.0)
    # description search, search Alpha, visit Alpha, search Beta, visit Beta
    assert _calls(cfg, 3) == ["search", "search", "visit", "search", "visit"]


def test_within_budget_the_expert_keeps_to_three_calls():
    cfg = ExpertConfig(extra_search_prob=1.0, visit_prob=1.0, within_budget=True)
    # the description search leaves 2 calls for the 2 hops' searches: no visit fits
    assert _calls(cfg, 3) == ["search", "search", "search"]
    # with 5 calls every optional step fits, as without the option
    assert _calls(cfg, 5) == ["search", "search", "visit", "search", "visit"]
    # with 4: after the description search and Alpha's search (2 calls), a visit still leaves one
    # call for Beta's search (2 + 1 + 1 <= 4); Beta's visit would be a fifth
    assert _calls(cfg, 4) == ["search", "search", "visit", "search"]


@pytest.mark.parametrize("p", [0.3, 0.6])
def test_off_it_draws_and_writes_as_before(p):
    """The option off takes the same random draws as the expert before it, turn for turn."""
    for seed in range(20):
        plans = [
            _Plan(_two_hop(), random.Random(seed), ExpertConfig(extra_search_prob=p, visit_prob=p))
            for _ in range(2)
        ]
        plans[1].cfg = ExpertConfig(extra_search_prob=p, visit_prob=p, within_budget=True)
        plans[1].max_tool_calls = 100  # a budget nothing reaches: the same steps
        turns: list[list[str]] = [[], []]
        for i, plan in enumerate(plans):
            observation = ""
            while not turns[i] or "<answer>" not in turns[i][-1]:
                turns[i].append(plan.next_turn(observation))
                observation = "results naming Beta and Gamma"
        assert turns[0] == turns[1]


def test_the_option_changes_the_cold_starts_key_only_when_on(tmp_path: Path) -> None:
    from tests.unit.sft.test_warm_start_key import _key

    base = _key(tmp_path)
    assert _key(tmp_path, "warm_start.expert.within_budget=false") == base
    assert _key(tmp_path, "warm_start.expert.within_budget=true") != base
