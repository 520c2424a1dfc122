"""The train job's stages before the warm start: the retrieval index and the questions.

Light (no Lightning, no model): the dry run (:func:`framework.rl.plan.dry_run`) checks the data
with :func:`checked_training_data` too, so what the run would refuse after building its index is
refused by the dry run, in seconds.
"""

from __future__ import annotations

from collections.abc import Sequence

from framework.data.datasets import SynthDatasetConfig, split_source, synth_ready
from framework.data.schema import DatasetError, QAItem, require_entities
from framework.registry import DATASETS, RETRIEVERS
from framework.rewards.entity_match import EntityRule, RulesEntities, hidden_entities
from framework.rewards.text import ReportsEntityRule
from framework.rl.config import TrainConfig
from framework.sft.questions import expert_questions, require_expert_questions
from framework.types import ComponentConfig

#: how to train without the cold-start SFT (the first half of its refusal's fix)
WARM_START_OFF = "set warm_start.sft=false (start from the policy as it is)"


def build_index(cfg: TrainConfig) -> None:
    """Build (or find cached) the retriever's index now, as a stage of its own; a remote
    retriever has nothing to build."""
    retriever = RETRIEVERS.bind(cfg.retriever)()
    retriever.close()


def data_ready(cfg: TrainConfig) -> bool:
    """Whether the questions exist without synthesizing them (user files, or synthesized splits
    in the cache), so that they can be checked before the index is built."""
    return not isinstance(cfg.dataset, SynthDatasetConfig) or synth_ready(cfg.dataset)


def load_training_data(cfg: TrainConfig) -> dict[str, list[QAItem]]:
    """The train and validation splits (synthesized first if needed), checked against the reward
    and the warm start (:func:`checked_training_data`).

    Raises:
        DatasetError: as :func:`checked_training_data`.
    """
    return checked_training_data(cfg)[0]


def checked_training_data(cfg: TrainConfig) -> tuple[dict[str, list[QAItem]], list[str]]:
    """The train and validation splits, and one line per check beyond the schema that they passed.

    Checks: an entity reward (``needs_entities``) needs entities on every question and, when it
    leaves the question's own entities out of ``E_q``, at least one train question that hides one
    (:func:`require_hidden_entities`); ``warm_start.sft=true`` needs questions its expert can
    follow (:func:`~framework.sft.questions.require_expert_questions`).

    Raises:
        DatasetError: a malformed or empty split, one without entities for an entity reward, train
            questions that name every entity they list, or too few the SFT expert can follow (the
            reward's refusal and the warm start's together, one a line).
    """
    load = DATASETS.bind(cfg.dataset)
    splits = {"train": load("train")}
    if getattr(cfg.dataset, "validation", "") is not None:  # user files may have no validation
        splits["validation"] = load("validation")
    notes: list[str] = []
    refused: list[DatasetError] = []  # the reward's and the warm start's, reported together
    train_source = split_source(cfg.dataset, "train")
    for check in (_reward_checks, _warm_start_checks):
        try:
            notes += check(cfg, splits, train_source)
        except DatasetError as exc:
            refused.append(exc)
    if len(refused) == 1:
        raise refused[0]
    if refused:
        raise DatasetError("\n".join(str(exc) for exc in refused), source=train_source)
    if getattr(cfg.warm_start, "rl_questions", "all") == "unseen":
        splits["train"], line = unseen_by_cold_start(cfg, splits["train"], train_source)
        notes.append(line)
    return splits, notes


def unseen_by_cold_start(
    cfg: TrainConfig, train: list[QAItem], source: str
) -> tuple[list[QAItem], str]:
    """The train questions the cold-start SFT's expert was not handed (``warm_start.rl_questions=
    unseen``), drawn as the SFT run draws them, and a line saying how many RL keeps.

    Raises:
        DatasetError: the expert was handed every train question (none left for RL).
    """
    ws = cfg.warm_start
    handed = {q.id for q in expert_questions(train, ws.expert, ws.expert.seed)}
    kept = [q for q in train if q.id not in handed]
    if not kept:
        raise DatasetError(
            f"[warm_start.rl_questions] got 'unseen'; expected train questions the cold start's "
            f"expert was not handed, but it was handed all {len(train)}. Fix: lower "
            "warm_start.expert.questions below the train split's size, or set "
            "warm_start.rl_questions=all.",
            source=source,
        )
    return kept, (
        f"RL questions: {len(kept)} of {len(train)} train questions, those the cold start's "
        "expert was not handed (warm_start.rl_questions=unseen)"
    )


def _reward_checks(
    cfg: TrainConfig, splits: dict[str, list[QAItem]], train_source: str
) -> list[str]:
    """An entity reward's needs: entities on every question, one train question hiding one."""
    if not getattr(type(cfg.reward), "needs_entities", False):
        return []
    for split, items in splits.items():
        why = f"reward={cfg.reward.name} needs ground-truth entities"
        require_entities(items, split_source(cfg.dataset, split), why=why)
    return [require_hidden_entities(splits["train"], cfg.reward, train_source)]


def _warm_start_checks(
    cfg: TrainConfig, splits: dict[str, list[QAItem]], train_source: str
) -> list[str]:
    """The cold-start SFT's needs, when the run makes one: one batch its expert can follow."""
    ws = cfg.warm_start
    if not ws.sft or ws.path is not None:
        return []
    counts = require_expert_questions(
        splits["train"],
        ws.expert,
        ws.optim.batch_size,
        seed=ws.expert.seed,  # the SFT run's seed (framework.sft.warm_start.warm_start_sft)
        source=train_source,
        where="warm_start.sft",
        keys="warm_start.",
        off=WARM_START_OFF,
    )
    return [counts.line()]


def entity_rule_of(reward: ComponentConfig) -> RulesEntities | None:
    """How an entity reward decides which entities a question names: its own rule (E-GRPO's
    config), else its matching options with the question's entities left out (the chain rewards'
    hidden chain); None for a reward that matches no entities."""
    rule = reward.entity_rule() if isinstance(reward, ReportsEntityRule) else None
    matching = getattr(reward, "matching", None)
    if rule is None and callable(matching):
        m = matching()
        rule = EntityRule(m.aliases, m.lowercase, m.strip_punctuation, skip_question_entities=True)
    return rule


def require_hidden_entities(items: Sequence[QAItem], reward: ComponentConfig, source: str) -> str:
    """Check that some train question hides an entity from the entity reward's ``E_q``.

    With ``skip_question_entities`` (E-GRPO's default; always for the chain rewards) ``E_q`` holds
    only the entities a question does not name (:func:`hidden_entities`). Data whose questions name
    every entity they list (an answer-only entity list whose answer the question repeats, or every
    entity quoted in the question) leaves ``E_q`` empty everywhere: the partial reward is then 0 on
    every rollout, and the run is GRPO under another name.

    Returns:
        The dry run's line: how many train questions hide at least one entity.

    Raises:
        DatasetError: not one train question hides an entity.
    """
    rule = entity_rule_of(reward)
    if rule is None or not rule.skip_question_entities:
        return f"reward={reward.name}: E_q is every listed entity (the question's own included)"
    hiding = [bool(it.entities and hidden_entities(it.question, it.entities, rule)) for it in items]
    if any(hiding) or not items:
        return f"reward={reward.name}: {sum(hiding)} of {len(items)} train questions hide an entity"
    first = items[0]
    named = [e[0] for e in first.entities or ()]
    skip = (
        ", set reward.skip_question_entities=false (count the entities the question names too)"
        if hasattr(reward, "skip_question_entities")
        else ""
    )
    raise DatasetError(
        f"[dataset] {source}: got 0 of {len(items)} train questions with an entity they do not "
        f"name themselves (row 0, id {first.id!r}, names all of {named}); expected some: "
        f"reward={reward.name} rewards only the entities a question hides (E_q), so its partial "
        "reward would be 0 on every rollout and the run GRPO under another name. Fix: list the "
        "entities the agent has to find (the bridges and the answer) in extra_info.entities"
        f"{skip}, or train GRPO (algorithm=grpo).",
        source=source,
    )
