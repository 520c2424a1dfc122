"""The RL update moves the policy the right way: a tiny policy learns a toy task.

The policy is a randomly initialised 2-layer Llama, the tiny policy's architecture with a 64-token
vocabulary (a 49k-token softmax would make the same test ten times slower without testing more).
Task: after a fixed prompt the policy emits ``LENGTH`` tokens; the reward is the share of them in a
target half of the vocabulary (even token ids), so chance is 0.5. Rollouts are sampled from the
policy, rewards go through the configured advantage estimator, and the update is the training step's
own :func:`policy_update` with the configured loss (composed from the shipped config files, presets
included). Every shipped advantage and loss must take the mean reward from chance to above 0.9; the
control flips the advantage's sign and must drive it towards 0, so a sign error anywhere (estimator,
loss, aggregation weights, gradient accumulation) fails this file.
"""

from __future__ import annotations

import pytest
import torch

from framework.cli.app import load_config
from framework.registry import ADVANTAGES
from framework.rl.batch import RolloutBatch
from framework.rl.update import loss_spec, plan_options, policy_update
from framework.training.schedule import adamw, lr_multiplier
from framework.types import AdvantageInputs, Trajectory, TurnSpan

LENGTH = 3  # tokens per rollout
PROMPTS = 4  # questions per step
GROUP = 8  # rollouts per question
STEPS = 30
TARGET = 0.9
VOCAB = 64
PAD = 0
LR = 1e-2

# the shipped options of the two groups (conf/advantage, conf/loss and the registered names)
ADVANTAGE_OPTIONS = [
    "grpo",
    "dr_grpo",
    "rloo",
    "reinforce_pp_baseline",
    "mc_grpo",
    "ngrpo",
    "a_grae",
    "igpo",
    "matchtir",
    "gigpo",
    "hgpo",
    "raft",
    "copo",
    "salt",
    "hapo",
    "dppo",
    "d3s",
    "spae",
    "info_reasoner",
    "dagrpo",
    "arena",
    "spo",
    "hiper",
    "s_grpo",
    "r3",
]
# estimators that must NOT learn: the placebo control (framework/algorithms/advantages/placebo.py)
CONTROL_OPTIONS = ["placebo"]
LOSS_OPTIONS = [
    "ppo_clip",
    "gspo",
    "dr_grpo",
    "ngrpo",
    "nsr",
    "etr",
    "cispo",
    "disco",
    "llds",
    "sapo_search",
    "hapo",
    "d3s",
    "seeupo",
]
#: losses whose added term acts from the second optimisation pass (their configs require it)
TWO_PASSES = {"llds", "sapo_search"}


def _rollouts(model, prompts: list[list[int]], gen: torch.Generator) -> list[Trajectory]:
    """``GROUP`` sampled continuations of every prompt (group = prompt index)."""
    rows = [(q, p) for q, p in enumerate(prompts) for _ in range(GROUP)]
    ids = torch.tensor([p for _, p in rows])
    with torch.no_grad():
        for _ in range(LENGTH):
            logits = model(input_ids=ids).logits[:, -1].float()
            nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)
            ids = torch.cat([ids, nxt], dim=1)
    n = len(prompts[0])
    return [
        Trajectory(
            question=q,
            group=q,
            token_ids=ids[i].tolist(),
            loss_mask=[0] * n + [1] * LENGTH,
            prompt_len=n,
            turns=[TurnSpan(n, n + LENGTH)],  # one model turn, no tool response
        )
        for i, (q, _) in enumerate(rows)
    ]


def _reward(trajs: list[Trajectory]) -> torch.Tensor:
    return torch.tensor(
        [sum(t % 2 == 0 for t in tr.token_ids[tr.prompt_len :]) / LENGTH for tr in trajs]
    )


def _policy() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        pad_token_id=PAD,
    )
    return LlamaForCausalLM(config).eval()


def _learn(overrides: list[str], sign: float = 1.0) -> list[float]:
    """Mean reward per step of a short run with the composed config's advantage and loss."""
    # one micro-batch per step (the accumulation over micro-batches has its own tests)
    cfg = load_config(
        "train", [f"optim.lr={LR}", f"optim.micro_batch_size={PROMPTS * GROUP}", *overrides]
    )
    model = _policy()
    reference = None
    if cfg.kl.coef > 0:
        import copy

        reference = copy.deepcopy(model).eval().requires_grad_(False)
    spec = loss_spec(cfg.loss, cfg.kl)
    advantage_fn = ADVANTAGES.bind(cfg.advantage)
    o = cfg.optim
    opt = adamw(model.parameters(), fused=o.fused, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lr_multiplier(o.schedule, o.warmup_steps, STEPS * o.policy_epochs)
    )
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(1, VOCAB, (PROMPTS, 6), generator=gen).tolist()
    curve = []
    for step in range(STEPS):
        model.eval()
        trajs = _rollouts(model, prompts, gen)
        rewards = _reward(trajs)
        curve.append(float(rewards.mean()))
        group_index = torch.tensor([t.group for t in trajs])
        inputs = _advantage_inputs(rewards, group_index, trajs, step / STEPS)
        adv = advantage_fn(inputs).float()
        batch = RolloutBatch.build(trajs, pad_id=PAD)
        batch.extras.update(inputs.extras)  # what the losses require (d3s: training_progress)
        policy_update(
            model,
            batch.plan(sign * adv, plan_options(o, spec)),
            spec,
            opt,
            sched,
            o,
            reference=reference,
        )
    return curve


def _advantage_inputs(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    trajs: list[Trajectory],
    progress: float,
) -> AdvantageInputs:
    """The toy rollouts as the trainer describes them: one model turn of ``LENGTH`` generated
    tokens, no tool response. Turn-level estimators get that turn's extras: the reward as its turn
    reward (``matchtir``), a belief that never moves (``igpo``, ``spae``) and no information gain
    (``info_reasoner``), so each reduces to GRPO here; the other inputs as their providers would
    make them: the generated tokens as the answer and the thinking (``copo``, ``salt``,
    ``dagrpo``), the tournament judged by reward with ties shared (``arena``), the run's progress
    (``d3s``). The inputs augmenters make: Monte-Carlo
    boundary values that are the group's mean before the turn and the reward after it (``spo``,
    ``hiper``: Dr. GRPO here), each group taken as one serial group in sampling order with
    "correct" = the reward above 1/2 (``s_grpo``), and ``(E_peak, E_global) = (r, -r)``, so that a
    higher reward dominates in R³'s ranking (``r3``; the toy has no entropy pattern to rank by)."""
    from framework.algorithms.advantages.arena import share_equal, single_elimination_rewards

    n = len(rewards)
    texts = [" ".join(str(x) for x in t.token_ids[t.prompt_len :]) for t in trajs]
    arena = torch.zeros(n)
    for g in group_index.unique().tolist():
        rows = (group_index == g).nonzero().flatten().tolist()
        r = [float(rewards[i]) for i in rows]
        places = single_elimination_rewards(len(rows), lambda a, b, r=r: (r[a], r[b]))
        for k, x in zip(rows, share_equal(places, r), strict=True):
            arena[k] = x
    flat = torch.zeros((n, 1))
    mean = torch.zeros(int(group_index.max()) + 1).index_add(0, group_index, rewards)
    mean = mean / torch.bincount(group_index).float()
    order = torch.zeros(n, dtype=torch.long)
    for g in group_index.unique().tolist():
        rows = (group_index == g).nonzero().flatten()
        order[rows] = torch.arange(rows.numel())
    return AdvantageInputs(
        rewards=rewards,
        group_index=group_index,
        token_mask=torch.ones((n, LENGTH), dtype=torch.bool),
        turn_index=torch.zeros((n, LENGTH), dtype=torch.long),
        turns=[[TurnSpan(0, LENGTH)] for _ in range(n)],
        extras={
            "turn_rewards": rewards.unsqueeze(-1),
            "answer_probs": flat,
            "gold_potential": flat,
            "context_gain": torch.zeros(n),
            "answers": texts,
            "think_texts": texts,
            "arena_rewards": arena,
            "training_progress": progress,
            "boundary_values": torch.stack([mean[group_index], rewards], dim=-1),
            "switch_flags": torch.zeros((n, 1), dtype=torch.bool),
            "exit_position": order,
            "exit_correct": rewards > 0.5,
            "entropy_profile": torch.stack([rewards, -rewards], dim=-1),
        },
    )


def _start_and_end(curve: list[float]) -> tuple[float, float]:
    return curve[0], sum(curve[-5:]) / 5  # before any update; the last five steps


#: estimators whose inputs an augmenter makes (the config requires it selected)
AUGMENT = {"spo": "mc_values", "hiper": "mc_values", "s_grpo": "early_exits"}
CASES = [
    *[
        [f"advantage={a}", "loss=ppo_clip", *([f"augment={AUGMENT[a]}"] if a in AUGMENT else [])]
        for a in ADVANTAGE_OPTIONS
    ],
    *[
        [
            "advantage=grpo",
            f"loss={loss}",
            *(["optim.policy_epochs=2"] if loss in TWO_PASSES else []),
        ]
        for loss in LOSS_OPTIONS
        if loss != "ppo_clip"
    ],
    # off-policy epochs (behaviour log-probs, the clipped ratio at work) and a KL term
    ["algorithm=grpo", "optim.policy_epochs=2"],
    ["algorithm=e_grpo", "kl.coef=0.01"],
]
# the default run keeps the paper's two arms (5 s each); the whole matrix runs with -m slow (CI)
DEFAULT = (["advantage=grpo", "loss=ppo_clip"], ["algorithm=e_grpo", "kl.coef=0.01"])


def _case(overrides: list[str]):
    marks = () if overrides in DEFAULT else (pytest.mark.slow,)
    return pytest.param(overrides, id=" ".join(overrides), marks=marks)


@pytest.mark.parametrize("overrides", [_case(c) for c in CASES])
@pytest.mark.slow
def test_update_learns_the_toy_task(overrides):
    start, end = _start_and_end(_learn(overrides))
    assert 0.35 < start < 0.65, f"not at chance at the start: {start:.2f}"
    assert end > TARGET, f"mean reward {start:.2f} -> {end:.2f}; expected > {TARGET}"


@pytest.mark.parametrize(
    "overrides",
    [
        ["algorithm=grpo"],
        pytest.param(["advantage=rloo", "loss=gspo"], marks=pytest.mark.slow),
        pytest.param(["advantage=grpo", "loss=disco"], marks=pytest.mark.slow),
    ],
)
@pytest.mark.slow
def test_flipped_advantage_unlearns(overrides):
    """The control: the same run with the advantage's sign flipped drives the reward to 0."""
    start, end = _start_and_end(_learn(overrides, sign=-1.0))
    assert 0.35 < start < 0.65
    assert end < 1 - TARGET, f"mean reward {start:.2f} -> {end:.2f} with the sign flipped"


@pytest.mark.slow
def test_the_placebo_control_does_not_learn():
    """Rewards shuffled across the batch: the same updates with the signal removed stay at chance
    (a placebo arm's gain would be the extra training's, not the reward's)."""
    start, end = _start_and_end(_learn(["algorithm=placebo"]))
    assert 0.35 < start < 0.65
    assert 0.3 < end < 0.7, f"mean reward {start:.2f} -> {end:.2f} with shuffled rewards"


def test_every_shipped_option_is_covered():
    """A new registered estimator or loss (or loss preset) must join the lists above."""
    from framework.paths import config_dir
    from framework.registry import POLICY_LOSSES

    def shipped(names: list[str]) -> set[str]:  # not the components other tests register
        return {n for n in names if not n.startswith("test_")}

    assert set(ADVANTAGE_OPTIONS) | set(CONTROL_OPTIONS) >= shipped(ADVANTAGES.names())
    presets = {p.stem for p in (config_dir() / "loss").glob("*.yaml")}
    assert set(LOSS_OPTIONS) >= shipped(POLICY_LOSSES.names()) | presets
