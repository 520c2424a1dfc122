"""Training curves grouped by arm, read from small hand-written TensorBoard event files."""

from __future__ import annotations

import pytest
from torch.utils.tensorboard import SummaryWriter

from framework.eval.curves import arm_curve, curve_table, plot_arms, read_scalars


def _write_run(run_dir, scalars, sub=""):
    """Write ``{tag: [(global_step, value), ...]}`` like Lightning would: in global-step order."""
    events = sorted((step, tag, value) for tag, pts in scalars.items() for step, value in pts)
    writer = SummaryWriter(log_dir=str(run_dir / "tensorboard" / sub))
    try:
        for step, tag, value in events:
            writer.add_scalar(tag, value, step)
    finally:
        writer.close()
    return run_dir


def _training_run(run_dir, rewards, every=3):
    """RL steps 1..len(rewards) logged at global steps every, 2 * every, ... (policy_epochs=3)."""
    return _write_run(
        run_dir,
        {
            "train/step": [(every * (i + 1), float(i + 1)) for i in range(len(rewards))],
            "rollout/reward": [(every * (i + 1), r) for i, r in enumerate(rewards)],
        },
    )


def test_read_scalars_maps_global_steps_to_rl_steps(tmp_path):
    run = _write_run(
        tmp_path / "run",
        {
            "train/step": [(3, 1.0), (6, 2.0), (9, 3.0)],
            "rollout/reward": [(3, 0.25), (6, 0.5), (9, 0.75)],
            "val/accuracy": [(0, 0.125), (7, 0.5)],  # before step 1; between steps 2 and 3
        },
    )
    _write_run(run, {"loss/entropy": [(6, 1.5)]}, sub="extra")  # event files below are read too
    s = read_scalars(run)
    assert s["rollout/reward"] == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert s["train/step"] == [(1, 1.0), (2, 2.0), (3, 3.0)]
    assert s["val/accuracy"] == [(0, 0.125), (2, 0.5)]  # 0 before any RL step; 7 follows 6
    assert s["loss/entropy"] == [(2, 1.5)]


def test_read_scalars_keeps_raw_steps_without_train_step(tmp_path):
    run = _write_run(tmp_path / "run", {"rollout/accuracy": [(5, 0.5), (2, 0.25)]})
    assert read_scalars(run) == {"rollout/accuracy": [(2, 0.25), (5, 0.5)]}


def test_read_scalars_without_event_files(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no event files.*Fix:"):
        read_scalars(tmp_path)
    (tmp_path / "tensorboard").mkdir()
    with pytest.raises(FileNotFoundError, match="no event files"):
        read_scalars(tmp_path)


def test_arm_curve_mean_and_spread_over_runs():
    c = arm_curve([[(1, 0.0), (2, 1.0)], [(1, 1.0), (2, 3.0), (3, 5.0)], []])
    assert c.steps == [1, 2, 3]
    assert c.mean == [0.5, 2.0, 5.0]  # step 3: only the second run
    assert c.low == [0.0, 1.0, 5.0] and c.high == [1.0, 3.0, 5.0]
    assert c.runs == [2, 2, 1]
    assert arm_curve([]).steps == []


def test_plot_arms_writes_present_tags_and_skips_missing(tmp_path):
    runs = {
        "grpo": [
            _training_run(tmp_path / "g1", [0.0, 0.25, 0.5]),
            _training_run(tmp_path / "g2", [0.25, 0.25, 0.75]),
        ],
        "e_grpo": [_training_run(tmp_path / "e1", [0.25, 0.5, 1.0])],
    }
    out = tmp_path / "plots"
    written = plot_arms(
        runs, ["rollout/reward", "rollout/missing", "train/step"], out, title_prefix="demo: "
    )
    assert written == [out / "rollout_reward.png", out / "train_step.png"]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "rollout_missing.png").exists()
    assert plot_arms(runs, ["rollout/missing"], tmp_path / "none") == []


def test_many_arms_get_a_panel_each_over_the_first_arm(tmp_path, monkeypatch):
    # 12 arms (more than ONE_PANEL_ARMS): one panel per arm, each over the first arm in grey;
    # the panels are drawn again for the second tag, so nothing of the first tag's may remain
    from matplotlib.figure import Figure

    from framework.eval.curves import ONE_PANEL_ARMS, PANEL_COLUMNS

    arms = [f"m{i}" for i in range(ONE_PANEL_ARMS + 2)]
    runs = {
        a: [{"r": [(1, i / 10), (2, i / 5)], "e": [(1, 1.0 + i), (2, 2.0 + i)]}]
        for i, a in enumerate(arms)
    }
    runs["m0"].append({"r": [(1, 0.2), (2, 0.0)]})  # the first arm: two runs, "e" logged by one
    seen = []
    savefig = Figure.savefig

    def capture(fig, path, **kwargs):
        panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
        seen.append(
            (
                path.name,
                [ax.get_title() for ax in panels],
                [[line.get_ydata().tolist() for line in ax.lines] for ax in panels],
                fig.get_suptitle(),
            )
        )
        savefig(fig, path, **kwargs)

    monkeypatch.setattr(Figure, "savefig", capture)
    written = plot_arms(runs, ["r", "e"], tmp_path, title_prefix="s: ")
    assert written == [tmp_path / "r.png", tmp_path / "e.png"]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (_, titles_r, lines_r, sup_r), (_, titles_e, lines_e, _) = seen
    assert sup_r == "s: r: each arm (blue) over m0 (grey)"
    assert titles_r == ["m0 (n=2)", *(f"{a} (n=1)" for a in arms[1:])]
    assert lines_r[0] == [[0.1, 0.0]]  # the first arm alone: the mean of its two runs
    assert lines_r[3] == [[0.1, 0.0], [0.3, 0.6]]  # m3 over m0
    assert titles_e[0] == "m0 (n=1)" and lines_e[5] == [[1.0, 2.0], [6.0, 7.0]]
    assert all(len(lines) == 2 for lines in lines_e[1:])  # the first tag's lines are gone
    assert len(arms) > PANEL_COLUMNS  # more than one row

    few = {a: runs[a] for a in arms[:ONE_PANEL_ARMS]}  # up to ONE_PANEL_ARMS: one panel, a legend
    seen.clear()
    plot_arms(few, ["r"], tmp_path / "few")
    assert seen[0][1] == ["r"]


def test_curve_table_hand_values(tmp_path):
    runs = {
        # 8 points -> quarters of 2: [0, 1, ..., 7] gives first (0 + 1) / 2 = 0.5, last 6.5;
        # a flat run gives 1 and 1; the arm averages the runs: first 0.75, last 3.75
        "grpo": [
            _training_run(tmp_path / "g1", [float(v) for v in range(8)]),
            _training_run(tmp_path / "g2", [1.0] * 8),
        ],
        # 3 points -> quarters of 1: first 0.25, last 1.0
        "e_grpo": [_training_run(tmp_path / "e1", [0.25, 0.5, 1.0])],
    }
    rows = curve_table(runs, ["rollout/reward", "rollout/missing"])
    assert rows == [
        {"arm": "grpo", "tag": "rollout/reward", "runs": 2, "first": 0.75, "last": 3.75,
         "change": 3.0},
        {"arm": "e_grpo", "tag": "rollout/reward", "runs": 1, "first": 0.25, "last": 1.0,
         "change": 0.75},
    ]  # fmt: skip
