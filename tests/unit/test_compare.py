"""compare.py's own flag: --study picks the study, whose flags are the rest (the studies: tests/e2e/test_*_study.py,
test_studies.py)."""
import pytest

import compare
from common import cli


@pytest.mark.parametrize("argv, said", [
    (["--study"], "error: --study has no value; give one (--study=VALUE): only a true/false flag stands alone\n"),
    (["--study=bogus"], "error: --study=bogus is not one of encoder, positions, attention, seq2seq\n"),
])
def test_a_study_that_is_not_named_is_refused_in_one_line(argv, said, capsys):
    """A bare --study was refused as '--study=true', a value never typed."""
    assert cli.run(compare.main, argv) == 2
    assert capsys.readouterr().err == said


def test_a_studys_flag_given_alone_reaches_the_study_alone(capsys, tmp_path, monkeypatch):
    """--out alone is refused by the study's parser as having no value, not taken as a folder named 'true'."""
    monkeypatch.chdir(tmp_path)
    assert cli.run(compare.main, ["--study=positions", "--out"]) == 2
    assert capsys.readouterr().err == ("error: --out has no value; give one (--out=VALUE): only a true/false flag "
                                       "stands alone\n")
    assert not list(tmp_path.iterdir())
