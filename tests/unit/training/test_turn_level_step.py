"""Turn-level methods through the training step: IGPO's gold-answer probabilities (checked against a
direct forward pass of the tiny policy), and ``algorithm=igpo / matchtir / citation_rubric`` running
:func:`rl_step` with the real agent loop, a scripted policy and the fake retriever."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from framework.algorithms.advantages.turns import PROBE_PREFIX
from framework.cli.app import load_config
from framework.data.schema import QAItem
from framework.rl.answer_probs import BeliefProbes, answer_probs, probe_prefix_ends
from framework.rl.step import StepParts, rl_step
from framework.rl.update import loss_spec
from framework.training.schedule import optimizer_and_schedule
from framework.types import GroupRequest, Trajectory, TurnSpan
from tests.unit.rollout.fakes import EOS, search_call
from tests.unit.training.test_step import TOK, ScriptedLoop, tiny_lm

ITEM = QAItem(
    "q0",
    "Where was the director of Jaws born?",
    ("Cincinnati",),
    (("Jaws", "Jaws (film)"), ("Steven Spielberg",), ("Cincinnati",)),
    2,
    ("p1", "p2", "p3"),
    "t",
)
SEARCH = "<think>look it up</think>" + search_call("Jaws film")


def answer(think: str, ans: str) -> str:
    return f"<think>{think}</think><answer>{ans}</answer>"


# -- the belief probes -------------------------------------------------------------------------------
def _trajectory(tok, group: int, *texts: str) -> Trajectory:
    """Prompt, then model turns alternating with tool responses (``texts``), as the loop lays out."""
    ids = tok.encode("Question: where is it?", add_special_tokens=False)
    t = Trajectory(0, group, list(ids), [0] * len(ids), len(ids))
    for k, text in enumerate(texts):
        new = tok.encode(text, add_special_tokens=False)
        start = len(t.token_ids)
        t.token_ids += new
        if k % 2 == 0:
            t.loss_mask += [1] * len(new)
            t.turns.append(TurnSpan(start, len(t.token_ids)))
        else:
            t.loss_mask += [0] * len(new)
            last = t.turns[-1]
            t.turns[-1] = TurnSpan(last.start, last.end, observation=(start, len(t.token_ids)))
    return t


def _direct_prob(model, tok, prefix: list[int], gold: str) -> float:
    """exp(mean log p) of the gold answer's tokens after ``prefix`` and the scaffold, from one
    unpadded forward pass with full logits, of the released code's whole probe (the answer closed
    by ``</answer>``, which cannot change the answer's probability)."""
    head = tok.encode(PROBE_PREFIX, add_special_tokens=False)
    ans = tok.encode(gold, add_special_tokens=False)
    tail = tok.encode("\n</answer>", add_special_tokens=False)
    ids = prefix + head + ans + tail
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    logp = torch.log_softmax(logits, -1)
    start = len(prefix) + len(head)
    picked = [float(logp[j - 1, ids[j]]) for j in range(start, start + len(ans))]
    return float(torch.tensor(picked).mean().exp())


def test_answer_probs_match_a_direct_forward_pass(tiny_policy):
    model, tok = tiny_policy
    model.eval()
    search = '<think>search</think><tool_call>{"name": "search"}</tool_call>'
    obs = "\n<tool_response>\nParis is the capital of France.\n</tool_response>\n"
    trajs = [
        _trajectory(tok, 0, search, obs, search, obs, answer("so", "Paris")),
        _trajectory(tok, 1, answer("guess", "Bonn")),
    ]
    items = [
        QAItem("a", "capital of France?", ("Paris",), None, 1, None, "t"),
        QAItem("b", "capital of Germany?", ("Berlin",), None, 1, None, "t"),
    ]
    got = answer_probs(model, trajs, items, BeliefProbes(tok, tok.pad_token_id, batch_size=3))
    assert got.shape == (2, 3)
    # rollout 0 has 3 turns: probes before turn 0 (the prompt) and after turns 0 and 1 (each
    # after its tool response); rollout 1 has one turn: one probe, the rest of its row is 0
    t0 = trajs[0]
    assert probe_prefix_ends(t0) == [
        t0.prompt_len,
        t0.turns[0].observation[1],
        t0.turns[1].observation[1],
    ]
    for k, end in enumerate(probe_prefix_ends(t0)):
        want = _direct_prob(model, tok, t0.token_ids[:end], "Paris")
        assert float(got[0, k]) == pytest.approx(want, rel=1e-4, abs=1e-7)
    want = _direct_prob(model, tok, trajs[1].token_ids[: trajs[1].prompt_len], "Berlin")
    assert float(got[1, 0]) == pytest.approx(want, rel=1e-4, abs=1e-7)
    assert got[1, 1:].eq(0).all()
    # padding and batching do not change a probe
    one = answer_probs(model, trajs, items, BeliefProbes(tok, tok.pad_token_id, batch_size=1))
    assert_close(one, got, rtol=1e-4, atol=1e-7)


# -- the step ----------------------------------------------------------------------------------------
def run(algorithm: str, scripts):
    cfg = load_config("train", [f"algorithm={algorithm}", "optim.lr=1e-2"])
    policy = tiny_lm()
    spec = loss_spec(cfg.loss, cfg.kl)
    parts = StepParts(
        policy, ScriptedLoop([scripts]), cfg.reward, cfg.advantage, spec, cfg.optim, pad_id=EOS
    )
    opt, sched = optimizer_and_schedule(policy, cfg.optim, 1)
    return rl_step(parts, [GroupRequest(0, len(scripts))], [ITEM], opt, sched), cfg


def turn_values(result, i: int) -> list[float]:
    """Rollout ``i``'s advantage per turn, checking it is constant over the turn's generated
    tokens and 0 on its tool responses."""
    adv, inputs = result.advantages, result.batch
    out = []
    for t in inputs.turns[i]:
        values = adv[i, t.start : t.end]
        assert torch.equal(values, values[:1].expand_as(values))
        if t.observation is not None:
            assert adv[i, t.observation[0] : t.observation[1]].eq(0).all()
        out.append(float(values[0]))
    return out


def test_matchtir_step_by_hand():
    scripts = [[SEARCH, answer("Spielberg", "Cincinnati")], [answer("guess", "Boston")]]
    result, _ = run("matchtir", scripts)
    # rollout 0: its search returned Jaws' passage (Steven Spielberg, the next hop): turn 0 earns
    # 1, the answer turn F1 1; rollout 1: one answer turn, F1 0. R = [2, 0]
    assert_close(result.batch.extras["turn_rewards"], torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    assert_close(result.scores.total, torch.tensor([2.0, 0.0]))
    # A_traj = ±1/√2 (group of two); turn 0's returns 1 + 0.9 = 1.9 and 0: ±1/√2; turn 1 only
    # rollout 0 has: 0. A = (A_traj + A_turn) / 2
    h = 2**-0.5
    assert turn_values(result, 0) == pytest.approx([h, h / 2], rel=1e-4)
    assert turn_values(result, 1) == pytest.approx([-h], rel=1e-4)


def test_citation_rubric_step_by_hand():
    scripts = [
        [SEARCH, answer("Steven Spielberg was born in Cincinnati", "Cincinnati")],  # correct
        [SEARCH, answer("Jaws was directed by Steven Spielberg", "Boston")],  # hop 1 of 2
        [answer("Steven Spielberg, I think", "Boston")],  # named, never searched: 0
    ]
    result, _ = run("citation_rubric", scripts)
    # rollout 0 scores 1 (both hops named and returned by its search), the group's max;
    # rollout 1 0.3 * 1/2; rollout 2 0
    assert_close(result.scores.total, torch.tensor([1.0, 0.15, 0.0]))
    assert result.advantages.dim() == 1  # advantage=grpo, a plain reward


def test_igpo_step_probes_the_policy_before_the_update():
    scripts = [[SEARCH, answer("so", "Cincinnati")], [answer("guess", "Boston")]]
    result, cfg = run("igpo", scripts)
    assert cfg.reward.name == "outcome" and cfg.reward.metric == "f1"
    probs = result.batch.extras["answer_probs"]
    # the step's probes are the pre-update policy's (tiny_lm() is seeded: a fresh one is a copy)
    want = answer_probs(tiny_lm(), result.trajectories, [ITEM], BeliefProbes(TOK, EOS))
    assert_close(probs, want)
    assert probs.shape == (2, 2) and probs[1, 1] == 0 and (probs[:, 0] > 0).all()
    # rollout 0: [p1 - p0, outcome 1]; rollout 1: [outcome 0]; z-normalised over the three turns
    r = torch.tensor([float(probs[0, 1] - probs[0, 0]), 1.0, 0.0])
    z = (r - r.mean()) / (r.std() + 1e-6)
    assert turn_values(result, 0) == pytest.approx([float(z[0] + z[1]), float(z[1])], rel=1e-4)
    assert turn_values(result, 1) == pytest.approx([float(z[2])], rel=1e-4, abs=1e-6)
