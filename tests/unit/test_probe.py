"""probe.py, the probe study's command: what it refuses, and its help and flag errors before torch is imported."""
import pytest


def test_probe_py_refuses_an_unknown_task(tmp_path):
    import probe

    with pytest.raises(ValueError, match="tasks='copy,sort'"):
        probe.main([f"--out={tmp_path}", "--tasks=copy,sort"])


@pytest.mark.parametrize("flag, code", [("--help", 0), ("--stpes=3", 2)])
def test_probe_py_answers_help_and_a_mistyped_flag_without_torch(flag, code):
    """A fresh process in which importing torch fails: --help and the unknown flag's one line come first."""
    from conftest import run_code

    r = run_code("import runpy, sys; sys.modules['torch'] = None; sys.argv = ['probe.py', sys.argv[1]]; "
                 "runpy.run_path('probe.py', run_name='__main__')", flag, timeout=60)
    assert r.returncode == code, r.stderr[-2000:]
    if code == 0:
        assert "--steps=" in r.stdout
    else:
        assert r.stderr.strip() == "error: unknown flag --stpes; did you mean --steps?"
