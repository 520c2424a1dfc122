"""Typed config of the ``study`` app (``seekrl-study``): arms x seeds, evaluated and compared."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from framework.config import option
from framework.data.leakage import HELD_OUT
from framework.problems import Problem, check, check_range


@dataclass
class LearningBarConfig:
    """Issue 79's bar for a regime where RL learns (:mod:`framework.study.learning_bar` computes it)."""

    arm: str = option("", "the arm that must learn; '' = the report has no learning-bar section")
    control: str = option(
        "placebo", "the control arm whose training reward it must exceed seed by seed"
    )
    reward_tag: str = option("rollout/reward", "the training curve compared")
    min_gain: float = option(0.05, "the smallest pooled Pass@1 gain over the warm start")
    min_positive_share: float = option(
        0.8, "share of seeds whose gain must be positive (rounded up: 4 of 5)"
    )
    hops: int = option(2, "the hop count whose pooled Pass@1 must reach min_hop_pass1")
    min_hop_pass1: float = option(0.10, "the Pass@1 the hops-hop questions must reach")
    max_run_minutes: float = option(60.0, "the most a run may take, training plus evaluation")

    def problems(self) -> list[Problem]:
        out = check_range(self.min_positive_share, "min_positive_share", low=0.0, high=1.0)
        out += check_range(self.hops, "hops", low=1)
        out += check_range(self.max_run_minutes, "max_run_minutes", low=0.0)
        out += check(
            not self.arm or self.arm != self.control,
            "control",
            self.control,
            f"an arm other than learning_bar.arm ({self.arm!r})",
            "name the placebo arm as the control",
        )
        return out


@dataclass
class StudyEvalConfig:
    """How every policy of the study (and the warm start) is evaluated: the same questions, the
    same sampling seed (common random numbers), k samples each."""

    split: str = option(
        "validation",
        "held-out split: validation for every choice (or validation2, a second one the "
        "choices never saw, on a dataset with validation2_size > 0; like validation, it needs "
        "no pre-registration and is not counted as a test evaluation); test only in a "
        "pre-registered study (needs preregistration=...)",
    )
    questions: int = option(100, "questions (0 = the whole split)")
    samples_per_question: int = option(4, "k (Pass@1 averages them)")
    start_samples_per_question: int | None = option(
        None,
        "k of the warm start's evaluation; None = samples_per_question x the number "
        "of seeds, as many as an arm pooled over its seeds",
    )
    seed: int = option(0, "question subset and sampling seed")
    batch_questions: int = option(25, "questions in flight in evaluations (continuous batching)")

    def problems(self) -> list[Problem]:
        out = check_range(self.questions, "questions", low=0)
        out += check_range(self.samples_per_question, "samples_per_question", low=1)
        out += check_range(self.batch_questions, "batch_questions", low=1)
        if self.start_samples_per_question is not None:
            out += check(
                self.start_samples_per_question >= self.samples_per_question,
                "start_samples_per_question",
                self.start_samples_per_question,
                f"at least samples_per_question ({self.samples_per_question})",
                "evaluate the warm start with at least as many samples as any arm, or leave it "
                "null",
            )
        out += check(
            self.split in HELD_OUT,
            "split",
            self.split,
            f"a held-out split, one of {list(HELD_OUT)}",
            "evaluate on held-out questions: split=validation (or validation2, on a dataset "
            "with validation2_size > 0)",
        )
        return out


@dataclass
class StudyConfig:
    """Arms (label -> train overrides) x seeds, all from the same warm start and question order."""

    name: str = option("egrpo_vs_grpo", "the study's directory name")
    out_dir: str | None = option(None, "None = runs/study/<name>")
    # empty here: a dict default would be merged with (not replaced by) a preset's arms
    arms: dict[str, list[str]] = option(
        default_factory=dict,
        help="label -> seekrl-train overrides of that arm (the study= presets set it)",
    )
    baseline: str = option("grpo", "arm the others are compared with")
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    baseline_seeds: list[int] = option(
        default_factory=list,
        help="the baseline arm's seeds when it runs more than the others (a replicated "
        "baseline: at least 3, every seed of `seeds` among them; a screen shows their spread "
        "as the noise band); [] = `seeds`",
    )
    overrides: list[str] = option(
        default_factory=list, help="seekrl-train overrides shared by every run"
    )
    eval: StudyEvalConfig = field(default_factory=StudyEvalConfig)
    learning_bar: LearningBarConfig = field(default_factory=LearningBarConfig)
    bootstrap: int = option(10000, "bootstrap resamples (paired CIs)")
    min_effect: float = option(
        0.05,
        "the smallest Pass@1 difference that matters: the report gives each design's power for it",
    )
    preregistration: str = option(
        "",
        "the committed file (and section) that fixed this study's hypothesis, arms, "
        "seeds and analysis before it ran; required when eval.split=test",
    )
    screen: bool = option(
        False,
        "add an arm per registered method (every algorithm bundle, and every "
        "advantage estimator, loss and sampler no bundle selects, on the baseline bundle), "
        "plugins' too, and report the screening table (framework/study/screen.py)",
    )
    matched_baselines: bool = option(
        False,
        "with screen=true: also train the baseline at each number of policy epochs "
        "an arm takes beyond the baseline's (`<baseline>-epochs<n>`), so that an arm that "
        "spends more optimiser steps is compared with a baseline that spends as many",
    )
    inert_arms: dict[str, str] = option(
        default_factory=dict,
        help="arm -> why its runs would be the baseline's at these settings: listed in "
        "the screening table, not trained; screen=true fills it when the study starts from "
        "the components' rules (framework/config/inert.py)",
    )
    only_arms: list[str] = option(
        default_factory=list,
        help="train, evaluate and report only these of the study's arms (with the "
        "baseline, always kept), e.g. a part of screen=true's methods run on their own "
        "basis; [] = every arm",
    )
    parts: list[str] = option(
        default_factory=list,
        help="with screen=true: the archives of parts of this screen run on a basis of "
        "their own (only_arms studies: another precision, say); the table lists the methods "
        "they evaluated as evaluated there, and shows each part's table below its own, "
        "against the part's own baseline",
    )
    publish: str = option(
        "",
        "also write the screening table to this file (e.g. docs/benchmarks/screen.md) "
        "and its records to the folder of the same name",
    )
    archive_to: str = option(
        "",
        "a folder to copy the study's archive (its per-question records, run records "
        "and basis) to after every evaluation, and to resume from: what it holds is not "
        "trained or evaluated again, on this machine or another with the same questions and "
        "warm start. Commit it and a study outlives its machine; '' keeps no copy",
    )
    prune_checkpoints: bool = option(
        True,
        "delete a run's training checkpoints (about 3 GB for SmolLM2-135M) once it is "
        "trained and evaluated; its exported policy/ stays",
    )
    allow_dirty: bool = option(
        False,
        "let a publishable study (publish, archive_to or eval.split=test) start or go "
        "on where it would be refused: uncommitted changes to the code (its own folders do not "
        "count), runs of this table made on another commit, git missing, or a pre-registration "
        "not committed as it is; the report then marks every run concerned "
        "(framework/study/integrity.py)",
    )
    retry_failed: bool = option(False, "run again the runs that crashed last time")
    dry_run: bool = option(False, "print the plan and stop")
    report_only: bool = option(
        False, "write study.md/json from the runs evaluated so far and stop (nothing trains)"
    )

    only_seeds: list[int] = option(
        default_factory=list,
        help="with report_only=true: also report these of the study's seeds only (a "
        "sensitivity analysis), as study_seeds_<s>_<s>.md/.json beside study.md",
    )

    def problems(self) -> list[Problem]:
        return self._design_problems() + self._run_problems()

    def _design_problems(self) -> list[Problem]:
        """The arms, seeds and baseline the study compares."""
        out = check(
            bool(self.arms) or self.screen,
            "arms",
            self.arms,
            "at least one arm (or screen=true, which adds one per registered method)",
            "name an arm",
        )
        out += check(bool(self.seeds), "seeds", self.seeds, "at least one seed", "give seeds")
        out += check(
            len(set(self.seeds)) == len(self.seeds),
            "seeds",
            self.seeds,
            "distinct seeds",
            "list each seed once",
        )
        if self.baseline_seeds:  # a replicated baseline: a noise band needs three seeds or more
            out += check(
                len(set(self.baseline_seeds)) == len(self.baseline_seeds)
                and len(self.baseline_seeds) >= 3
                and set(self.seeds) <= set(self.baseline_seeds),
                "baseline_seeds",
                self.baseline_seeds,
                f"[] or at least 3 distinct seeds including every seed of seeds {self.seeds}",
                "give the baseline seeds [0, 1, 2] (a spread from two seeds is one difference), "
                "or [] for the study's seeds",
            )
        if len(self.arms) > 1:
            out += check(
                self.baseline in self.arms,
                "baseline",
                self.baseline,
                f"one of the arms {sorted(self.arms)}",
                "set baseline to an arm label",
            )
        reserved = ("seed=", "run_dir=", "resume=", "hydra.")
        for label, args in {"(shared)": self.overrides, **self.arms}.items():
            for a in args:
                out += check(
                    not a.startswith(reserved),
                    "arms" if label != "(shared)" else "overrides",
                    a,
                    "no seed=, run_dir=, resume= or hydra. override (the study sets them)",
                    f"drop {a!r}",
                )
        for label in self.arms:
            out += check(
                label.replace("_", "").replace("-", "").isalnum(),
                "arms",
                label,
                "labels of letters, digits, '_' and '-'",
                "rename the arm",
            )
        return out

    def _run_problems(self) -> list[Problem]:
        """The analysis, the protocol and the settings of this invocation (what it keeps, which
        arms and seeds it runs or reports, a dry run or a report)."""
        out = check_range(self.bootstrap, "bootstrap", low=100)
        out += check_range(self.min_effect, "min_effect", low=0.0, high=1.0)
        out += check(
            self.eval.split != "test"
            or bool(self.preregistration)
            or self.report_only
            or self.dry_run,
            "preregistration",
            self.preregistration or "''",
            "the pre-registration of a study that evaluates on the test split",
            "choose settings on eval.split=validation; for the confirmatory study, commit its "
            "pre-registration first (docs/study.md, 'Protocol') and pass "
            "preregistration=docs/study.md#<its section>",
        )
        out += check(
            not self.archive_to or not Path(self.archive_to).expanduser().is_file(),
            "archive_to",
            self.archive_to,
            "a folder (made if missing) or ''",
            "name a folder, e.g. docs/benchmarks/<study>/archive",
        )
        out += check(
            len(set(self.only_arms)) == len(self.only_arms),
            "only_arms",
            self.only_arms,
            "distinct arm labels",
            "list each arm once",
        )
        out += check(
            self.screen or not self.arms or set(self.only_arms) <= set(self.arms),
            "only_arms",
            self.only_arms,
            f"some of the arms {sorted(self.arms)}",
            "name arms of this study",
        )
        out += check(
            self.screen or not self.parts,
            "parts",
            self.parts,
            "[] unless screen=true",
            "drop parts (they are parts of a screen's table), or set screen=true",
        )
        out += check(
            not self.only_seeds or self.report_only,
            "only_seeds",
            self.only_seeds,
            "[] unless report_only=true",
            "add report_only=true (a subset report is made from a study's records)",
        )
        bar = self.learning_bar
        out += check(
            not bar.arm or self.screen or {bar.arm, bar.control} <= set(self.arms),
            "learning_bar",
            f"arm={bar.arm}, control={bar.control}",
            f"two of the arms {sorted(self.arms)}",
            "name the learning arm and its control (the placebo) among the study's arms, or "
            "set learning_bar.arm='' for no bar",
        )
        out += check(
            not (self.dry_run and self.report_only),
            "report_only",
            self.report_only,
            "false with dry_run=true",
            "pass one of dry_run=true (the plan) or report_only=true (the report so far)",
        )
        return out

    def directory(self) -> Path:
        return Path(self.out_dir or f"runs/study/{self.name}").expanduser()

    def arm_seeds(self, arm: str) -> list[int]:
        """The seeds ``arm`` runs (:func:`arm_seeds`)."""
        return arm_seeds(self, arm)

    def start_samples(self) -> int:
        """Samples per question of the warm start's evaluation."""
        if self.eval.start_samples_per_question is not None:
            return self.eval.start_samples_per_question
        return self.eval.samples_per_question * len(self.seeds)


def arm_seeds(cfg: StudyConfig, arm: str) -> list[int]:
    """The seeds one arm of the study ``cfg`` runs: the baseline's ``baseline_seeds`` when set (a
    replicated baseline), else the study's ``seeds``. ``cfg`` may be any object with ``seeds``
    and ``baseline`` (a study config from before ``baseline_seeds`` had none)."""
    extra = list(getattr(cfg, "baseline_seeds", None) or [])
    return extra if extra and arm == cfg.baseline else list(cfg.seeds)


def all_seeds(cfg: StudyConfig) -> list[int]:
    """Every seed some arm of ``cfg`` runs: ``seeds``, then the baseline's further seeds."""
    extra = list(getattr(cfg, "baseline_seeds", None) or [])
    return list(dict.fromkeys([*cfg.seeds, *extra]))
