import json

import pytest

from framework.cli.study import BASIS, check_basis


def test_a_study_is_pinned_to_its_questions_and_warm_start(tmp_path, capsys):
    basis = {"data": "abc", "warm_start": "/cache/sft/1"}
    check_basis(tmp_path, basis)  # a new study records its basis
    assert json.loads((tmp_path / BASIS).read_text()) == basis
    check_basis(tmp_path, dict(basis))  # the same basis goes on
    with pytest.raises(SystemExit) as exc:
        check_basis(tmp_path, {**basis, "data": "def"})  # e.g. new synthesis code
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"[out_dir] got {tmp_path}" in err and "data: recorded 'abc', now 'def'" in err
    assert "warm_start" not in err.split("expected")[0].split("basis:")[1]  # only what changed
    assert "Fix: pass a new out_dir" in err


def test_evaluations_from_before_the_basis_was_recorded_are_not_trusted(tmp_path, capsys):
    (tmp_path / "eval" / "start").mkdir(parents=True)
    (tmp_path / "eval" / "start" / "results.json").write_text("{}")
    with pytest.raises(SystemExit):
        check_basis(tmp_path, {"data": "abc", "warm_start": "/cache/sft/1"})
    assert "recorded 'not recorded'" in capsys.readouterr().err
    assert not (tmp_path / BASIS).exists()
