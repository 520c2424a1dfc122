"""``seekrl-study``: arms x seeds from one warm start, each evaluated on held-out questions, compared.

seekrl-study                                 # E-GRPO vs GRPO, seeds 0 1 2 (study=egrpo_vs_grpo)
seekrl-study study=learn_cpu                 # the learning benchmark: one GRPO run vs its start
seekrl-study study=alpha_cpu                 # alpha 0, 0.1, 0.3, 0.5 (the paper's Figure 4)
seekrl-study seeds=[0] eval.questions=50     # smaller
seekrl-study report_only=true                # the report so far, marked partial; trains nothing

Everything goes into one fixed directory, ``runs/study/<name>`` (``out_dir``), so the same command
resumes: finished runs and evaluations are skipped, an interrupted run resumes from its newest
checkpoint, and a run that crashes is reported in the study (``status.json``, the table) and does
not stop the others. Each train run is a child process (``python -m framework.cli.train``) with
its log in ``<run>/train.log``. Ctrl-C stops the study after the running child has checkpointed.

The study writes ``study.md`` (tables, the paired differences, the entity analysis, curves),
``study.json``, ``curves/*.png`` and ``runs/<arm>/seed<S>/`` (config, versions, git commit,
TensorBoard) beside ``eval/<arm>/seed<S>/`` (the evaluation reports) and ``eval/start/``. The
study itself is :func:`framework.study.runner.study`; this app composes its config and calls it.
"""

from __future__ import annotations

from framework.cli.app import run_app
from framework.study.runner import study


def main() -> None:
    run_app("study", study)


if __name__ == "__main__":
    main()
