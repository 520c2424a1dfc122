"""Rollout augmenters (framework/rl/augment.py) through the real step: the agent loop with a
scripted policy, a tiny trainable LM and the algorithm bundles that select them (S-GRPO's early
exits, SPO's Monte-Carlo boundary values, R³'s replay and reflection, HiLL's hinted groups)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.testing import assert_close

from framework.cli.app import load_config
from framework.config import ConfigError
from framework.data.schema import QAItem
from framework.rl.augmenters import ReplayReflect, attempt_text, chain_hints
from framework.rl.drawn import Drawn
from framework.rl.step import StepParts, rl_step
from framework.rollout.config import AgentConfig
from framework.rollout.engine import AgentLoop
from framework.rollout.records import trajectory_from_state, trajectory_state
from framework.training.schedule import optimizer_and_schedule
from framework.types import STATUS_OVER_BUDGET, GroupRequest, Trajectory
from tests.unit.rollout.fakes import EOS, FakeBackend, FakeRetriever, FakeTokenizer
from tests.unit.training.test_step import ANSWER, SEARCH, tiny_lm

TOK = FakeTokenizer()
RIGHT, WRONG = ANSWER.format("Steven Spielberg"), ANSWER.format("Boston")
DATASET = [
    QAItem(
        "q0",
        "Who directed the film about a shark?",
        ("Steven Spielberg",),
        (("Jaws",), ("Steven Spielberg",)),
        2,
        None,
        "t",
    ),
]


FAILED = Trajectory(question=0, group=0, token_ids=[1, 2], loss_mask=[0, 1], prompt_len=1)


class RoundsLoop(AgentLoop):
    """The real loop whose policy plays ``rounds[i]`` in its ``i``-th run or run_from; records
    the questions of each ``run``."""

    def __init__(self, rounds) -> None:
        self.rounds = list(rounds)
        self.questions: list[list[str]] = []
        super().__init__(
            FakeBackend(TOK, self.rounds[0]), FakeRetriever(), AgentConfig(system_prompt="T.")
        )

    def run(self, questions, *args, **kwargs):
        self.questions.append(list(questions))
        self.backend = FakeBackend(TOK, self.rounds.pop(0))
        return super().run(questions, *args, **kwargs)

    def run_from(self, prefixes, **kwargs):
        self.backend = FakeBackend(TOK, self.rounds.pop(0))
        return super().run_from(prefixes, **kwargs)

    def generate(self, sequences, max_new_tokens, stop):
        self.backend = FakeBackend(TOK, self.rounds.pop(0))
        return super().generate(sequences, max_new_tokens, stop)


class Run:
    """Steps of one run (one policy, optimiser and augmenter)."""

    def __init__(self, *overrides: str) -> None:
        self.cfg = load_config("train", ["optim.lr=1e-2", *overrides])
        self.policy = tiny_lm()
        self.loop = RoundsLoop([[]])
        self.parts = StepParts.of(self.cfg, self.policy, self.loop, EOS)
        self.opt, self.sched = optimizer_and_schedule(self.policy, self.cfg.optim, 4)

    def step(self, *rounds, size=2):
        self.loop.rounds = list(rounds)
        return rl_step(self.parts, [GroupRequest(0, size)], DATASET, self.opt, self.sched)


def test_s_grpo_trains_serial_groups_of_early_exits():
    run = Run("algorithm=s_grpo")
    result = run.step(
        [[SEARCH, RIGHT], [SEARCH, WRONG]], [["Steven Spielberg</answer>"], ["Boston</answer>"]]
    )
    trajs = result.trajectories
    # each rollout's serial group: its exit after the search, then itself
    assert [t.group for t in trajs] == [0, 0, 1, 1]
    assert result.batch.extras["exit_position"].tolist() == [0, 1, 0, 1]
    assert result.batch.extras["exit_correct"].tolist() == [True, True, False, False]
    # rewards 2^0, 2^-1 in the first serial group, none in the second -> A = [0.25, -0.25, 0, 0]
    assert_close(result.rollout_advantages(), torch.tensor([0.25, -0.25, 0.0, 0.0]))
    exit0 = trajs[0]
    cut = exit0.turns[0].observation[1]
    forced = len("<answer>")
    assert TOK.decode(exit0.token_ids[cut : cut + forced]) == "<answer>"
    assert exit0.loss_mask[cut : cut + forced] == [0] * forced
    assert result.figures["augment/rollouts"] == 2.0 and result.figures["augment/exits"] == 2.0
    assert result.figures["timing/augment"] > 0


def test_spo_values_turn_boundaries_by_continuations():
    run = Run("algorithm=spo")
    conts = [[RIGHT], [RIGHT], [RIGHT], [WRONG]]  # from rollout 0's boundary after its search
    result = run.step([[SEARCH, RIGHT], [WRONG]], conts)
    values = result.batch.extras["boundary_values"]
    assert_close(values, torch.tensor([[0.5, 0.75, 1.0], [0.5, 0.0, 0.0]]))
    adv, inputs = result.advantages, result.batch
    t0, t1 = result.trajectories[0].turns
    p = result.trajectories[0].prompt_len
    assert_close(adv[0, t0.start - p], torch.tensor(0.25))  # V(s1) - V(s0)
    assert_close(adv[0, t1.start - p], torch.tensor(0.25))  # r - V(s1)
    assert_close(adv[1, 0], torch.tensor(-0.5))
    assert float(adv[~inputs.token_mask].abs().sum()) == 0.0
    assert result.figures["augment/rollouts"] == 4.0


def test_r3_replays_the_other_outcome_into_a_one_outcome_group():
    run = Run("algorithm=r3")
    first = run.step([[RIGHT], [WRONG]])  # nothing stored yet
    assert first.figures["augment/replayed"] == first.figures["augment/reflected"] == 0.0
    second = run.step([[WRONG], [WRONG]])
    # CCR: the stored correct rollout joins the all-wrong group (G_mix of 3)
    assert second.batch.extras["replayed"].tolist() == [False, False, True]
    assert [t.group for t in second.trajectories] == [0, 0, 0]
    assert second.trajectories[2].answer == "Steven Spielberg"
    assert second.scores.total.tolist() == [0.0, 0.0, 1.0]
    adv = second.rollout_advantages()  # SERR ranks the two wrong ones below 0.2
    assert float(adv[2]) > float(adv[:2].max()) and abs(float(adv.sum())) < 1e-4
    # earlier mean correctness 1/2 is not below tau = 0.2: no reflection
    assert second.figures["augment/reflected"] == 0.0
    third = run.step([[RIGHT], [RIGHT]])  # all right: a stored wrong one joins
    assert third.batch.extras["replayed"].tolist() == [False, False, True]
    assert third.scores.total.tolist() == [1.0, 1.0, 0.0]
    memory = run.parts.augmenter.buffer[0]
    assert (memory.seen, memory.correct) == (6, 3)
    assert [t.answer for t in memory.stored[True]] == ["Steven Spielberg"] * 3  # newest first
    # the buffer survives a checkpoint
    restored = ReplayReflect(cfg=run.cfg.augment)
    restored.load_state_dict(run.parts.augmenter.state_dict())
    assert restored.buffer == run.parts.augmenter.buffer and restored.steps == 3
    with pytest.raises(ValueError, match="older format"):
        restored.load_state_dict({"buffer": {"0": {"1": {}}}})


def test_r3_reflects_a_hard_question_in_a_group_of_its_own():
    run = Run("algorithm=r3")
    run.step([[WRONG], [WRONG], [WRONG]], size=3)
    result = run.step([[WRONG], [WRONG]], [[RIGHT], [WRONG]])
    # 0 of 3 earlier rollouts right (< tau = 0.2), none right stored to replay: ISR adds the
    # reflected prompt's group, as many rollouts as the question's own group
    assert result.batch.extras["replayed"].tolist() == [False] * 4
    assert result.batch.extras["reflected"].tolist() == [False, False, True, True]
    assert [t.group for t in result.trajectories] == [0, 0, 1, 1]
    assert result.scores.total.tolist() == [0.0, 0.0, 1.0, 0.0]
    prompt = run.loop.questions[-1][0]
    assert prompt.startswith(DATASET[0].question) and "Answer: Boston" in prompt
    assert result.figures["augment/reflected_groups"] == 1.0


def test_r3_counts_an_over_budget_rollout_but_never_stores_it():
    augmenter = ReplayReflect(cfg=load_config("train", ["algorithm=r3"]).augment)
    over = replace(FAILED, status=STATUS_OVER_BUDGET)
    augmenter._remember(Drawn([FAILED, over], list(DATASET), None), [False, False])
    memory = augmenter.buffer[0]
    assert (memory.seen, memory.correct) == (2, 0)
    assert memory.stored[False] == [FAILED] and memory.stored[True] == []


def test_r3_shows_a_failed_attempt_cut_from_the_front():
    t = replace(FAILED, think_text="x" * 50 + "the end", answer="Boston")
    text = attempt_text(t, 30)
    assert text.endswith("the end\nAnswer: Boston") and len(text) <= 30 and text.startswith("...")
    assert attempt_text(replace(FAILED, think_text="", answer=None), 30) == "Answer: (none)"


def test_hill_puts_a_hinted_group_in_place_of_an_all_wrong_one():
    assert chain_hints(DATASET[0], 4) == ["The answer is connected to Jaws."]
    run = Run("algorithm=hill", "augment.rollouts=2")
    result = run.step([[WRONG], [WRONG]], [[RIGHT], [WRONG]])
    assert run.loop.questions[-1] == [
        DATASET[0].question + "\nHint: The answer is connected to Jaws."
    ]
    assert result.batch.extras["hinted"].tolist() == [True, True]
    assert result.scores.total.tolist() == [1.0, 0.0]
    assert result.figures["augment/replaced_groups"] == 1.0
    assert 0.0 < result.figures["augment/hint_reward"] <= 0.5  # non_deg(1/2, n=2) = 0.5


def test_a_trajectory_state_round_trips():
    run = Run("algorithm=grpo")
    result = run.step([[SEARCH, RIGHT], [WRONG]])
    for t in result.trajectories:
        assert trajectory_from_state(trajectory_state(t)) == t


def test_an_estimator_needing_an_augmenters_input_names_it():
    with pytest.raises(ConfigError, match="augment=early_exits"):
        load_config("train", ["advantage=s_grpo"])


@pytest.mark.parametrize(
    ("algorithm", "augment"),
    [
        ("spo", "mc_values"),
        ("hiper", "mc_values"),
        ("s_grpo", "early_exits"),
        ("r3", "replay_reflect"),
        ("hill", "hints"),
        ("grpo", "none"),
    ],
)
def test_each_bundle_selects_its_augmenter(algorithm, augment):
    assert load_config("train", [f"algorithm={algorithm}"]).augment.name == augment


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("augment=hints augment.source=oracle", "augment.source"),
        ("augment=hints augment.rollouts=1", "augment.rollouts"),
        ("augment=replay_reflect augment.prompt=again", "augment.prompt"),
        ("augment=replay_reflect augment.replays=0", "augment.replays"),
        ("augment=replay_reflect augment.prompt='{question} {attempt} {answer}'", "augment.prompt"),
        ("augment=replay_reflect augment.hard_below=2", "augment.hard_below"),
        ("augment=mc_values augment.continuations=0", "augment.continuations"),
        ("augment=early_exits augment.forced=' '", "augment.forced"),
    ],
)
def test_bad_augmenter_settings_name_their_field(override, field):
    with pytest.raises(ConfigError, match=rf"\[{field}\]"):
        load_config("train", override.split(" ", 1))


def test_hill_with_the_policy_as_hinter_gates_a_leaking_hint():
    # two hints written by the policy: one names the answer (gated), one does not
    run = Run("algorithm=hill", "augment.rollouts=2", "augment.hints=2", "augment.source=policy")
    hints = [["Steven Spielberg directed it."], ["Think of the 1975 film."]]
    result = run.step([[WRONG], [WRONG]], hints, [[RIGHT], [WRONG]])
    assert run.loop.questions[-1] == [DATASET[0].question + "\nHint: Think of the 1975 film."]
    assert result.figures["augment/gated_hints"] == 1.0
    assert result.figures["augment/replaced_groups"] == 1.0
    assert result.batch.extras["hinted"].tolist() == [True, True]


@pytest.mark.parametrize("algorithm", ["s_grpo", "spo", "r3", "hill"])
def test_a_step_that_keeps_no_group_runs_every_augmenter(algorithm):
    run = Run(f"algorithm={algorithm}")
    run.loop.rounds = [[[RIGHT], [WRONG]]]
    groups = [GroupRequest(0, 2)]
    result = rl_step(run.parts, groups, DATASET, run.opt, run.sched, keep=lambda r, c: False)
    assert result.trajectories == [] and result.figures["augment/rollouts"] == 0.0
