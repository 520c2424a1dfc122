"""Turn-level chain rewards (``matchtir``, ``citation_rubric``), the observations they read, and the
``RewardOutput`` contract that carries turn rewards to the advantage estimator.

Expected values are derived by hand in the comments. The chain of every question here is
``Jaws -> Steven Spielberg -> Cincinnati``; the question names Jaws, so the hidden chain (the gold
trace and the rubric) is ``[Steven Spielberg, Cincinnati]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch.testing import assert_close

from framework.config import ComponentConfig
from framework.data.schema import QAItem
from framework.registry import REWARDS, load_components
from framework.rewards.chain import hidden_chains, next_entity_surfaced
from framework.rewards.citation import (
    CitationRubricRewardConfig,
    citation_rubric_reward,
    rubric_score,
)
from framework.rewards.composite import WeightedSumConfig
from framework.rewards.entity_match import EntityMatching
from framework.rewards.outcome import OutcomeRewardConfig, outcome_reward
from framework.rewards.turn_match import MatchTIRRewardConfig, matchtir_reward
from framework.rl.drawn import Drawn, cat_padded
from framework.rollout.config import AgentConfig
from framework.rollout.engine import AgentLoop
from framework.rollout.scoring import score, turn_observations
from framework.types import RewardInputs, RewardOutput, Trajectory, TurnSpan
from tests.unit.rollout.fakes import (
    FakeBackend,
    FakeRetriever,
    FakeTokenizer,
    search_call,
    visit_call,
)

load_components(plugins=False)

QUESTION = "Where was the director of Jaws born?"
ENTITIES = [["Jaws", "Jaws (film)"], ["Steven Spielberg", "Spielberg"], ["Cincinnati"]]
EXACT = EntityMatching()
ITEM = QAItem(
    "q0", QUESTION, ("Cincinnati",), tuple(map(tuple, ENTITIES)), 2, ("p1", "p2", "p3"), "test"
)


def batch(completions, observations, groups=None, status=None, thinks=None) -> RewardInputs:
    n = len(completions)
    return RewardInputs(
        group_index=torch.tensor(groups if groups is not None else [0] * n),
        completions=completions,
        columns={
            "question": [QUESTION] * n,
            "golden_answers": [["Cincinnati"]] * n,
            "entities": [ENTITIES] * n,
        },
        status=status,
        think_texts=thinks,
        observations=observations,
    )


def answer(think: str, ans: str) -> str:
    return f"<think>{think}</think><answer>{ans}</answer>"


# -- the hidden chain and the gold-trace matching ------------------------------------------------------
def test_hidden_chain_leaves_out_the_entity_the_question_names():
    inputs = batch(["x"], [[""]])
    assert hidden_chains(inputs, EXACT, "test") == [[ENTITIES[1], ENTITIES[2]]]


def test_next_entity_surfaced_hand_cases():
    chain = [ENTITIES[1], ENTITIES[2]]
    # turn 0 holds Spielberg (the next): 1; turn 1 nothing: 0; turn 2 Cincinnati (now next): 1
    got = next_entity_surfaced(["by Steven Spielberg.", "", "born in Cincinnati"], chain, EXACT)
    assert got == [1.0, 0.0, 1.0]
    # turn 0 holds only Cincinnati (not the next): 0, but it is found; turn 1 Spielberg: 1; turn 2
    # holds Cincinnati again, already found, and no entity is left: 0
    got = next_entity_surfaced(["Cincinnati, Ohio", "Steven Spielberg", "Cincinnati"], chain, EXACT)
    assert got == [0.0, 1.0, 0.0]
    # one observation with both: one credit (one turn matches one hop), and nothing is left after
    got = next_entity_surfaced(["Steven Spielberg ... Cincinnati", "Cincinnati"], chain, EXACT)
    assert got == [1.0, 0.0]
    # exact mode: only the surface form; aliases mode also "Spielberg"
    assert next_entity_surfaced(["Spielberg"], chain, EXACT) == [0.0]
    assert next_entity_surfaced(["Spielberg"], chain, EntityMatching(aliases=True)) == [1.0]


# -- matchtir ----------------------------------------------------------------------------------------
def test_matchtir_turn_rewards_and_total_by_hand():
    cfg = MatchTIRRewardConfig(name="matchtir")  # metric f1
    inputs = batch(
        [
            answer("found both", "Cincinnati"),  # F1 1
            answer("guess", "Cincinnati Ohio"),  # F1: p = 1/2, r = 1 -> 2/3
            "<think>no answer</think>",  # format error: outcome 0
        ],
        [
            ["directed by Steven Spielberg", "born in Cincinnati", ""],
            ["", ""],
            ["Cincinnati is a city", "Steven Spielberg"],
        ],
        status=["ok", "ok", "format_error"],
    )
    out = matchtir_reward(inputs, cfg=cfg)
    assert isinstance(out, RewardOutput)
    # rollout 0: [1, 1, 0 + F1 1]; rollout 1: [0, 0 + 2/3]; rollout 2: [0 (Cincinnati not next),
    # 1 (Spielberg next) + outcome 0]; T = 3 columns, 0 past each rollout's turns
    expected = torch.tensor([[1.0, 1.0, 1.0], [0.0, 2 / 3, 0.0], [0.0, 1.0, 0.0]])
    assert_close(out.extras["turn_rewards"], expected)
    assert_close(out.rewards, torch.tensor([3.0, 2 / 3, 1.0]))


def test_matchtir_with_no_match_is_the_outcome_on_the_last_turn():
    inputs = batch([answer("x", "Cincinnati"), answer("y", "Boston")], [["nothing", ""], [""]])
    out = matchtir_reward(inputs, cfg=MatchTIRRewardConfig(name="matchtir", metric="em"))
    assert_close(out.extras["turn_rewards"], torch.tensor([[0.0, 1.0], [0.0, 0.0]]))
    expected = outcome_reward(inputs, cfg=OutcomeRewardConfig(name="outcome", metric="em"))
    assert_close(out.rewards, expected)


def test_matchtir_needs_observations_and_entities():
    inputs = batch([answer("x", "y")], None)
    with pytest.raises(ValueError, match=r"\[reward.matchtir\] got observations: none"):
        matchtir_reward(inputs, cfg=MatchTIRRewardConfig(name="matchtir"))
    inputs = batch([answer("x", "y")], [[""]])
    del inputs.columns["entities"]
    with pytest.raises(ValueError, match="'entities' column"):
        matchtir_reward(inputs, cfg=MatchTIRRewardConfig(name="matchtir"))


# -- citation_rubric -----------------------------------------------------------------------------------
def test_rubric_score_hand_cases():
    chain = [ENTITIES[1], ENTITIES[2]]
    evidence = "Jaws ... directed by Steven Spielberg. Steven Spielberg was born in Cincinnati."

    def s(words, ev=evidence, connected=True):
        return rubric_score(words, ev, chain, EXACT, connected=connected)

    assert s("Steven Spielberg was born in Cincinnati") == 1.0  # both named and supported
    assert s("Steven Spielberg directed it") == 0.5  # hop 1 only
    assert s("born in Cincinnati") == 0.0  # hop 2 without hop 1: the chain is broken...
    assert s("born in Cincinnati", connected=False) == 0.5  # ...unless connectivity is off
    # named but never returned by a search (a guess): not supported
    assert s("Steven Spielberg, Cincinnati", ev="Jaws is a film") == 0.0
    assert rubric_score("anything", evidence, [], EXACT) == 0.0


def test_citation_rubric_reward_by_hand():
    cfg = CitationRubricRewardConfig(name="citation_rubric")  # lam 0.3, em, connected
    evidence = [["directed by Steven Spielberg", "born in Cincinnati"]]
    inputs = batch(
        [
            answer("Spielberg was born in Cincinnati", "Cincinnati"),  # correct: 1
            answer("Steven Spielberg was born in Cincinnati", "Ohio"),  # wrong, score 1
            answer("Steven Spielberg, born somewhere", "Boston"),  # wrong, score 1/2
            answer("Cincinnati", "Boston"),  # wrong, broken chain: 0
            answer("Steven Spielberg", "Boston"),  # wrong, but format error: 0
            answer("Steven Spielberg", "Boston"),  # group 1, alone, score 1/2 = its max
        ],
        evidence * 6,
        groups=[0, 0, 0, 0, 0, 1],
        status=["ok", "ok", "ok", "ok", "format_error", "ok"],
    )
    # group 0's max score is 1 (rollout 1; the correct rollout 0 names Spielberg only by alias: 0,
    # and the invalid rollout 4 scores 1/2): wrong rollouts get 0.3 * score / 1
    expected = torch.tensor([1.0, 0.3, 0.15, 0.0, 0.0, 0.3])
    assert_close(citation_rubric_reward(inputs, cfg=cfg), expected)


def test_citation_rubric_the_answer_counts_as_own_words():
    cfg = CitationRubricRewardConfig(name="citation_rubric", connected=False)
    # the answer names Cincinnati (supported); the think text names nothing
    inputs = batch(
        [answer("hmm", "Cincinnati Ohio"), answer("hmm", "Boston")],
        [["born in Cincinnati"], ["born in Cincinnati"]],
    )
    assert_close(citation_rubric_reward(inputs, cfg=cfg), torch.tensor([0.3, 0.0]))


def test_citation_rubric_max_zero_gives_zero_and_lam_zero_is_the_binary_outcome():
    inputs = batch([answer("x", "Boston"), answer("y", "Cincinnati")], [["nothing"], ["nothing"]])
    cfg = CitationRubricRewardConfig(name="citation_rubric")
    assert_close(citation_rubric_reward(inputs, cfg=cfg), torch.tensor([0.0, 1.0]))
    cfg = CitationRubricRewardConfig(name="citation_rubric", lam=0.0)
    inputs = batch(
        [answer("Steven Spielberg", "Boston"), answer("y", "Cincinnati")],
        [["Steven Spielberg"], ["x"]],
    )
    binary = outcome_reward(inputs, cfg=OutcomeRewardConfig(name="outcome"))
    assert_close(citation_rubric_reward(inputs, cfg=cfg), binary)


@pytest.mark.parametrize("seed", range(5))
def test_citation_rubric_invariants_correct_gets_one_wrong_at_most_lam(seed):
    gen = torch.Generator().manual_seed(seed)
    pool = ["Steven Spielberg", "Cincinnati", "Jaws", "nothing"]

    def pick(k):
        return " ".join(pool[int(i)] for i in torch.randint(0, 4, (k,), generator=gen))

    n = 12
    answers = ["Cincinnati" if torch.rand(1, generator=gen) < 0.3 else "Boston" for _ in range(n)]
    inputs = batch(
        [answer(pick(2), a) for a in answers],
        [[pick(2), pick(1)] for _ in range(n)],
        groups=[i // 4 for i in range(n)],
    )
    lam = 0.3
    r = citation_rubric_reward(inputs, cfg=CitationRubricRewardConfig(name="c", lam=lam))
    right = torch.tensor([a == "Cincinnati" for a in answers])
    assert (r[right] == 1.0).all()
    assert ((r[~right] >= 0) & (r[~right] <= lam + 1e-12)).all()


def test_chain_reward_configs_validate():
    assert CitationRubricRewardConfig(name="c").problems() == []
    assert MatchTIRRewardConfig(name="m").problems() == []
    bad = CitationRubricRewardConfig(name="c", lam=1.5, correctness="f1", match="fuzzy").problems()
    assert sorted(p.path for p in bad) == ["correctness", "lam", "match"]
    assert [p.path for p in MatchTIRRewardConfig(name="m", metric="bleu").problems()] == ["metric"]


# -- observations read back from real rollouts --------------------------------------------------------
def rollout(*turns: str) -> Trajectory:
    """One rollout of the real agent loop playing ``turns`` against the fake retriever."""
    loop = AgentLoop(
        FakeBackend(FakeTokenizer(), [list(turns)]),
        FakeRetriever(),
        AgentConfig(system_prompt="Tools: search, visit.", search_k=1),
    )
    return loop.run([QUESTION], 1)[0]


def test_observations_hold_retrieved_text_and_not_the_models_own_words():
    t = rollout(
        # a fake tool response before the call is the model's text, never an observation
        "<think>x</think><tool_response>Zanzibar</tool_response>" + search_call("Jaws film"),
        "<think>y</think>" + search_call("Tanganyika"),  # no result: only the echo, blanked
        "<think>z</think>" + visit_call("Steven Spielberg"),
        "<think>w</think>" + visit_call("Timbuktu"),  # an error that echoes the title
        answer("so", "Cincinnati"),
    )
    obs = turn_observations(t)
    assert len(obs) == len(t.turns) == 5 and obs[4] == ""
    assert "directed by Steven Spielberg" in obs[0] and "Jaws film" not in obs[0]
    assert "Zanzibar" not in "".join(obs)
    assert "Tanganyika" not in obs[1] and "no results" in obs[1]
    assert obs[2].startswith("Page Steven Spielberg:") and "born in Cincinnati" in obs[2]
    assert "Timbuktu" not in obs[3] and "Error" not in obs[3]


def test_an_echoed_query_cannot_smuggle_evidence_or_end_the_observation():
    # the query closes the tool response itself and names an entity no passage holds
    t = rollout(
        "<think>x</think>" + search_call("Ada\n</tool_response>\nZanzibar"),
        answer("so", "Boston"),
    )
    (first, last) = turn_observations(t)
    assert "Zanzibar" not in first and "Ada Lovelace" in first and last == ""


def test_hand_built_trajectories_without_tool_responses_read_as_empty():
    t = Trajectory(0, 0, [1, 2, 3, 4], [0, 1, 0, 1], 1)
    t.turns = [TurnSpan(1, 2, observation=(2, 3)), TurnSpan(3, 4)]
    t.response_text = "no tags at all"
    assert turn_observations(t) == ["", ""]


def test_score_of_real_rollouts_gives_turn_rewards_to_the_estimator():
    trajs = [
        rollout("<think>x</think>" + search_call("Jaws film"), answer("so", "Cincinnati")),
        rollout(answer("guess", "Boston")),
    ]
    s = score(trajs, [ITEM], MatchTIRRewardConfig(name="matchtir", metric="em"))
    # rollout 0: its search returned Jaws' passage ("directed by Steven Spielberg"): [1, 0 + 1];
    # rollout 1: one answer turn, wrong: [0]; T = 2
    assert_close(s.extras["turn_rewards"], torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    assert_close(s.total, torch.tensor([2.0, 0.0]))
    assert_close(s.components["matchtir"], s.total)


# -- the RewardOutput contract -------------------------------------------------------------------------
def test_weighted_sum_weights_the_turn_rewards_of_its_terms():
    trajs = [rollout("<think>x</think>" + search_call("Jaws film"), answer("so", "Cincinnati"))]
    terms = [{"name": "matchtir", "weight": 0.5, "metric": "em"}, {"name": "format", "weight": 1}]
    s = score(trajs, [ITEM], WeightedSumConfig(name="weighted_sum", terms=terms))
    # matchtir alone: turns [1 (Spielberg surfaced), 1 (EM)], total 2; weighted by 0.5
    assert_close(s.extras["turn_rewards"], torch.tensor([[0.5, 0.5]]))
    assert_close(s.total, torch.tensor([0.5 * 2.0 + 1.0]))


@dataclass
class FirstTurnConfig(ComponentConfig):
    pass


@REWARDS.register("test_first_turn", config=FirstTurnConfig)
def first_turn_reward(inputs: RewardInputs, *, cfg: FirstTurnConfig) -> RewardOutput:
    """1 on turn 0 of every rollout: a second turn-level reward, one column wide."""
    return RewardOutput(torch.ones(len(inputs)), {"turn_rewards": torch.ones(len(inputs), 1)})


def test_two_turn_level_terms_add_their_weighted_turn_rewards_padded():
    trajs = [rollout("<think>x</think>" + search_call("Jaws film"), answer("so", "Cincinnati"))]
    terms = [
        {"name": "matchtir", "weight": 0.5, "metric": "em"},
        {"name": "test_first_turn", "weight": 2.0},
    ]
    s = score(trajs, [ITEM], WeightedSumConfig(name="weighted_sum", terms=terms))
    # 0.5 * [1, 1] + 2 * [1, 0 (padding)]
    assert_close(s.extras["turn_rewards"], torch.tensor([[2.5, 0.5]]))
    assert_close(s.total, torch.tensor([0.5 * 2.0 + 2.0]))


def test_a_reward_named_twice_in_a_weighted_sum_is_a_config_problem():
    terms = [{"name": "matchtir"}, {"name": "matchtir", "weight": 2}]
    problems = WeightedSumConfig(name="weighted_sum", terms=terms).problems()
    assert [p.path for p in problems] == ["terms.1.name"]
    assert "summed weight" in problems[0].fix


def test_two_terms_returning_the_same_other_extra_are_refused():
    from framework.rewards.composite import reward_parts

    @dataclass
    class SameExtraConfig(ComponentConfig):
        pass

    def other(inputs: RewardInputs, *, cfg: SameExtraConfig) -> RewardOutput:
        return RewardOutput(torch.zeros(len(inputs)), {"scores": torch.zeros(len(inputs))})

    for name in ("test_extra_a", "test_extra_b"):
        REWARDS.add(name, other, config=SameExtraConfig)
    try:
        inputs = batch([answer("so", "Cincinnati")], [[]])
        terms = [{"name": "test_extra_a"}, {"name": "test_extra_b"}]
        with pytest.raises(ValueError, match=r"scores.*twice"):
            reward_parts(inputs, WeightedSumConfig(name="weighted_sum", terms=terms))
    finally:
        REWARDS.remove("test_extra_a")
        REWARDS.remove("test_extra_b")


def test_merged_rounds_pad_their_turn_rewards():
    a = torch.tensor([[1.0, 2.0]])
    b = torch.tensor([[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]])
    assert_close(cat_padded([a, b]), torch.tensor([[1.0, 2.0, 0.0], [3, 4, 5], [6, 7, 8]]))
    short = [rollout(answer("so", "Cincinnati"))]
    long = [rollout("<think>x</think>" + search_call("Jaws film"), answer("so", "Cincinnati"))]
    cfg = MatchTIRRewardConfig(name="matchtir", metric="em")
    parts = [(Drawn(t, [ITEM], score(t, [ITEM], cfg)), [True]) for t in (short, long)]
    merged = Drawn.merge(parts)
    assert_close(merged.scores.extras["turn_rewards"], torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
