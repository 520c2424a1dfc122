"""The study and the screen: pre-registered multi-seed comparisons of RL methods, and a table
that screens every registered method against one baseline (``seekrl-study``).

Bottom to top: :mod:`~framework.study.schema` (the app's config), :mod:`~framework.study.layout`
(where a study keeps what it makes), :mod:`~framework.study.integrity` (git, commits and the
runs' provenance records), :mod:`~framework.study.entity_credit` (the entity rate over a run's
training rollouts), :mod:`~framework.study.runs` (the child processes: train runs, evaluations,
the cold-start SFT), :mod:`~framework.study.archive` (the records the report is computed from,
kept and restored), :mod:`~framework.study.checks` and :mod:`~framework.study.basis` (the
refusals before anything trains), :mod:`~framework.study.arms` (which arms, in which order),
:mod:`~framework.study.summary` and :mod:`~framework.study.render` (the report's statistics and
its Markdown), :mod:`~framework.study.compute`, :mod:`~framework.study.screen` and
:mod:`~framework.study.screen_render` (the screening table), :mod:`~framework.study.report`
(writes the report) and :mod:`~framework.study.runner` (:func:`~framework.study.runner.study`,
the study app's entry point).
"""
