"""benchmarks/speculative.py: a run's folder that has no best checkpoint yet is refused with the flag that names its
last one, and that flag, given as printed, runs."""
import re

import pytest

from benchmarks import speculative
from common.errors import UserError
from conftest import tiny_model
from inference.checkpoint import LAST, Checkpoint, save_atomic

CHARS = "".join(chr(c) for c in range(ord("!"), ord("!") + 37))  # tiny_model's 37 tokens


def test_the_hint_for_a_run_without_a_best_checkpoint_is_a_flag_that_runs(tmp_path, capsys):
    run = tmp_path / "run"  # stopped before its first evaluation: ckpt_last.pt only
    run.mkdir()
    model = tiny_model()
    save_atomic(Checkpoint(weights=model.state_dict(), model_config=model.config, step=1,
                           data_meta={"tokenizer": "char", "vocab_size": 37, "eot_id": None, "chars": CHARS}).to_dict(),
                str(run / LAST))
    argv = [f"--model={run}", f"--draft={run}", "--tokens=3", "--guesses=1", "--repeats=1", "--compile=false",
            "--prompt=ABC"]
    hints = []
    for _ in range(3):  # --model's hint, then --draft's
        try:
            speculative.main(argv)
            break
        except UserError as e:
            hint = re.search(r"pass (--\w+=\S+) to use it", str(e))
            assert hint, str(e)
            hints.append(hint.group(1))
            name = hint.group(1).split("=")[0]
            argv = [a for a in argv if not a.startswith(name + "=")] + [hint.group(1)]
    else:
        pytest.fail(f"the hints {hints} gave no command that runs")
    assert hints == [f"--model={run / LAST}", f"--draft={run / LAST}"]
    rows = [line for line in capsys.readouterr().out.splitlines() if "ms/token" in line]
    assert len(rows) == 2 and all(line.endswith("same text") for line in rows), rows


@pytest.mark.parametrize("draft_chars", [CHARS[:-1] + "~", CHARS[:20]])
def test_a_draft_of_other_tokens_is_refused_in_one_line(tmp_path, draft_chars):
    """A draft with another vocabulary (or the same size, other characters) is refused as sample.py --draft refuses
    it, not by a traceback from the decoding."""
    for name, chars in (("model", CHARS), ("draft", draft_chars)):
        model = tiny_model(vocab_size=len(chars))
        save_atomic(Checkpoint(weights=model.state_dict(), model_config=model.config, step=1,
                               data_meta={"tokenizer": "char", "vocab_size": len(chars), "eot_id": None,
                                          "chars": chars}).to_dict(), str(tmp_path / f"{name}.pt"))
    argv = [f"--model={tmp_path / 'model.pt'}", f"--draft={tmp_path / 'draft.pt'}", "--tokens=3", "--guesses=1",
            "--repeats=1", "--compile=false", "--prompt=ABC"]
    with pytest.raises(UserError, match=r"^--draft=\S+ speaks other tokens than --model") as e:
        speculative.main(argv)
    assert "\n" not in str(e.value)


def test_the_models_folder_starting_with_a_tilde_is_in_the_home_folder(tmp_path, monkeypatch):
    """--model=~/run, as --draft=~/small: the shell leaves the ~ of --model=~/run as typed, and --model (not a path
    flag by its name: train.py's --model is the objective) was looked for in a folder named '~'."""
    from common.flags import config_from_argv

    monkeypatch.setenv("HOME", str(tmp_path))
    bc = config_from_argv(["--model=~/run", "--draft=~/small"], speculative.SpeculativeBench)
    assert (bc.model, bc.draft) == (str(tmp_path / "run"), str(tmp_path / "small"))
    with pytest.raises(UserError, match="--model is empty"):
        config_from_argv(["--model="], speculative.SpeculativeBench)
