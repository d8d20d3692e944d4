"""evaluate.py end to end: a tiny random Hugging Face GPT-2 scored by us and by transformers gives the same
log-probabilities; a model trained here on a made corpus picks the ending it was trained on, in evaluate.py and in
train.py --eval_tasks's metrics; every mistake is one line, exit 2, and no report written."""
import json

import pytest
import torch
import torch.nn.functional as F

import evaluate
import train
from common import malloc
from conftest import metrics, tiny_args, tiny_model
from exports import perturb
from inference.checkpoint import Checkpoint

CHARS = " ,.abcdefghijklmnopqrstuvwxyz"  # sorted: the char tokenizer's ids are the indices here
ITEMS = [  # contexts longer than the 16-token block are cut from the left, the same way in the reference below
    {"context": "the quick brown fox jumps over the lazy", "choices": ["dog.", "cat, said he", "log"], "label": 0},
    {"ctx": "a man is sitting on a roof. he", "endings": ["is using wrap.", "rips tiles off.", "sleeps"],
     "label": 1, "activity_label": "Roof shingle removal"},
    {"context": "one", "choices": ["two", "three"], "label": 1},
]
TEXT = "it was the best of times, it was the worst of times, it was the age of wisdom."


def run(*args) -> int:
    return evaluate.cli.run(evaluate.main, [str(a) for a in args])


def write_jsonl(path, items):
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


def hf_gpt2_folder(folder):
    """A tiny random transformers GPT-2 saved with our char tokenizer's metadata beside it."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(CHARS), n_positions=16, n_embd=32, n_layer=2, n_head=2,
                                  bos_token_id=None, eos_token_id=None)
    hf = perturb(transformers.GPT2LMHeadModel(cfg).eval())
    hf.save_pretrained(folder)
    meta = {"tokenizer": "char", "vocab_size": len(CHARS), "eot_id": None, "chars": CHARS}
    (folder / "small_gpt_tokenizer.json").write_text(json.dumps(meta))
    return hf


def transformers_sum(hf, ids: list[int], n: int) -> float:
    """log p of the last n of ids, each given those before it, by transformers' own forward."""
    with torch.no_grad():
        logits = hf(torch.tensor([ids[:-1]])).logits[0].double()  # (T, V)
    logp = F.log_softmax(logits, dim=-1)
    return logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])][-n:].sum().item()


def test_log_probabilities_equal_transformers_on_a_random_gpt2(tmp_path, capsys):
    hf = hf_gpt2_folder(tmp_path / "hf")
    tasks = write_jsonl(tmp_path / "mixed.jsonl", ITEMS)
    (tmp_path / "text.txt").write_text(TEXT)
    assert run(f"--init_from=hf:{tmp_path / 'hf'}", f"--tasks={tasks}", f"--text={tmp_path / 'text.txt'}",
               "--stride=8", "--batch_tokens=40", f"--out={tmp_path / 'report.json'}") == 0
    report = json.loads((tmp_path / "report.json").read_text())
    task = report["tasks"]["mixed"]
    ids = [CHARS.index(c) for c in TEXT]
    for item, scored in zip(ITEMS, task["items"]):
        context = [CHARS.index(c) for c in item.get("context", item.get("ctx"))]
        for choice, ours in zip(item.get("choices", item.get("endings")), scored["logprobs"]):
            choice_ids = [CHARS.index(c) for c in " " + choice]
            row = (context + choice_ids)[-17:]  # block_size + 1: the context keeps its last tokens
            assert ours == pytest.approx(transformers_sum(hf, row, len(choice_ids)), abs=1e-4)
    assert task["n"] == 3 and task["cut"] == 2 and [i["label"] for i in task["items"]] == [0, 1, 1]
    # the text: Hugging Face's sliding-window loop (windows of 17 tokens, 8 new targets each) through transformers
    nll, prev_end = 0.0, 0
    for begin in range(0, len(ids), 8):
        end = min(begin + 17, len(ids))
        nll -= transformers_sum(hf, ids[begin:end], end - max(prev_end, begin + 1))
        prev_end = end
        if end == len(ids):
            break
    assert report["text"]["scored"] == len(ids) - 1
    assert report["text"]["nll_per_token"] == pytest.approx(nll / (len(ids) - 1), abs=1e-4)
    out = capsys.readouterr().out
    assert "mixed" in out and "acc_norm" in out and "bits/byte" in out


def test_a_model_trained_on_a_corpus_picks_the_ending_it_was_trained_on(tmp_path, capsys):
    """The corpus is one sentence over and over; each item's right ending is how the sentence goes on, the wrong
    ones are made of its own characters. train.py --eval_tasks logs the accuracies at each evaluation; evaluate.py
    scores the checkpoint the same."""
    corpus = tmp_path / "cat.txt"
    corpus.write_text("the cat sat on the mat. " * 400)
    known = write_jsonl(tmp_path / "known.jsonl", [
        {"context": "the cat sat on the", "choices": ["cat.", "mat.", "sat."], "label": 1},
        {"context": "mat. the cat", "choices": ["sat on the", "on the mat", "the cat sat"], "label": 0},
        {"context": "the cat sat on", "choices": ["the cat.", "a mat.", "the mat."], "label": 2}])
    out = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, out, "--max_iters=80", "--eval_interval=40", "--log_interval=40",
                                               "--learning_rate=1e-2", f"--eval_tasks={known}")) == 0
    logged = [r for r in metrics(out) if "val_loss" in r]
    assert [r["step"] for r in logged] == [40, 80] and all("tasks/known/acc_norm" in r for r in logged)
    assert logged[-1]["tasks/known/acc"] == logged[-1]["tasks/known/acc_norm"] == 1.0
    assert "known acc_norm 1.000" in capsys.readouterr().out  # on the evaluation's line
    assert run(f"--out_dir={out}", "--ckpt=last", f"--tasks={known}", f"--out={tmp_path / 'r.json'}") == 0
    report = json.loads((tmp_path / "r.json").read_text())["tasks"]["known"]
    assert (report["acc"], report["acc_norm"], report["acc_token"]) == (1.0, 1.0, 1.0)
    assert report["acc_token"] == logged[-1]["tasks/known/acc_token"]


def strict_json(text: str):
    """json.loads as strict parsers read: NaN and Infinity are no JSON."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


def test_a_report_of_non_finite_scores_is_valid_json_with_null(tmp_path):
    """A model whose scores are NaN gets a report that strict JSON parsers read: each NaN or infinite number is
    null, the finite ones stay. Here the final norm's finite weights overflow float32 (a folder with NaN weights is
    refused on import): inf and -inf meet in the logits."""
    hf = hf_gpt2_folder(tmp_path / "hf")
    with torch.no_grad():
        hf.transformer.ln_f.weight.fill_(3e38)
        hf.transformer.ln_f.bias.fill_(3e38)
    hf.save_pretrained(tmp_path / "hf")
    tasks = write_jsonl(tmp_path / "mixed.jsonl", ITEMS)
    (tmp_path / "text.txt").write_text(TEXT)
    assert run(f"--init_from=hf:{tmp_path / 'hf'}", f"--tasks={tasks}", f"--text={tmp_path / 'text.txt'}",
               f"--out={tmp_path / 'r.json'}") == 0
    report = strict_json((tmp_path / "r.json").read_text())
    assert [i["logprobs"] for i in report["tasks"]["mixed"]["items"]] == [[None] * 3, [None] * 3, [None] * 2]
    assert report["text"]["nll_per_token"] is None and report["text"]["ppl"] is None
    assert report["text"]["scored"] == len(TEXT) - 1 and report["tasks"]["mixed"]["n"] == 3


def refused(capsys, *args) -> str:
    assert run(*args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("line, message", [
    ('{"context": "abc", "choices": ["a", "b"], "label": 2}', "bad.jsonl:2: label=2 is out of range for 2 choices"),
    ('{"context": "abc", "choices": ["a", ""], "label": 0}', "bad.jsonl:2: choice 1 is empty"),
    ('{"context": "abc", "choices": ["a", "B"], "label": 0}', "bad.jsonl:2: character 'B'"),
    ('{"context": "abc", "choices": ["a", "b"] "label": 0}', "bad.jsonl:2 is not JSON"),
])
def test_a_bad_task_file_is_one_line_and_no_report(tmp_path, capsys, line, message):
    hf_gpt2_folder(tmp_path / "hf")
    capsys.readouterr()  # save_pretrained's progress bar
    (tmp_path / "bad.jsonl").write_text('{"context": "abc", "choices": ["a", "b"], "label": 0}\n' + line + "\n")
    err = refused(capsys, f"--init_from=hf:{tmp_path / 'hf'}", f"--tasks={tmp_path / 'bad.jsonl'}",
                  f"--out={tmp_path / 'sub' / 'r.json'}")
    assert message in err
    assert not (tmp_path / "sub").exists()


def test_refusals_name_the_problem(tmp_path, capsys):
    assert "nothing to score" in refused(capsys, f"--out_dir={tmp_path}")
    assert "missing.jsonl does not exist" in refused(capsys, f"--tasks={tmp_path / 'missing.jsonl'}")
    tasks = write_jsonl(tmp_path / "t.jsonl", ITEMS)
    assert "no checkpoint at" in refused(capsys, f"--out_dir={tmp_path / 'none'}", f"--tasks={tasks}")
    encoder = tiny_model(causal=False, vocab_size=len(CHARS))
    meta = {"tokenizer": "char", "vocab_size": len(CHARS), "eot_id": None, "chars": CHARS}
    Checkpoint(weights=encoder.state_dict(), model_config=encoder.config, step=1, data_meta=meta,
               objective="encoder").save(str(tmp_path / "ckpt_best.pt"))
    err = refused(capsys, f"--out_dir={tmp_path}", f"--tasks={tasks}", f"--out={tmp_path / 'r.json'}")
    assert "an encoder has no next-token log-probabilities" in err and not (tmp_path / "r.json").exists()
    assert f"{tmp_path / 'ckpt_best.pt'} was trained with --model=encoder: an encoder has" in err  # not 'is a encoder'


def test_train_py_refuses_a_bad_task_file_before_it_writes_anything(corpus, tmp_path, capsys):
    (tmp_path / "bad.jsonl").write_text('{"context": "x", "choices": ["a"], "label": 0}\n')
    out = tmp_path / "run"
    assert train.cli.run(train.main, tiny_args(corpus, out, f"--eval_tasks={tmp_path / 'bad.jsonl'}")) == 2
    assert "bad.jsonl:1: choices must be a list of at least two strings" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "data").exists()  # refused before the data was prepared
    (tmp_path / "odd.jsonl").write_text('{"context": "x", "choices": ["love", "\u00e9t\u00e9"], "label": 0}\n')
    assert train.cli.run(train.main, tiny_args(corpus, out, f"--eval_tasks={tmp_path / 'odd.jsonl'}")) == 2
    assert "odd.jsonl:1: character" in capsys.readouterr().err  # the corpus has no é: found once it is tokenized
    assert not out.exists()


def test_a_text_that_cannot_be_scored_is_refused_in_one_line(tmp_path, capsys):
    hf_gpt2_folder(tmp_path / "hf")
    capsys.readouterr()  # save_pretrained's progress bar
    model = f"--init_from=hf:{tmp_path / 'hf'}"
    (tmp_path / "one.txt").write_text("a")
    (tmp_path / "text.txt").write_text(TEXT)
    assert "--text=" in refused(capsys, model, f"--text={tmp_path / 'missing.txt'}")
    assert "is 1 token(s) long; perplexity needs at least 2" in refused(capsys, model, f"--text={tmp_path / 'one.txt'}")
    assert "--stride=17 must be in 1..block_size=16" in refused(capsys, model, f"--text={tmp_path / 'text.txt'}",
                                                                "--stride=17")
    # too small is told in the same words, by the flag's name (it was 'stride=0 must be a positive number')
    assert refused(capsys, model, f"--text={tmp_path / 'text.txt'}", "--stride=0").startswith(
        "error: --stride=0 must be in 1..block_size")
    assert "is a folder" in refused(capsys, model, f"--text={tmp_path / 'text.txt'}", f"--out={tmp_path}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "one.txt", "text.txt"]  # nothing written


def test_evaluate_py_on_a_cpu_keeps_freed_memory(tmp_path, monkeypatch):
    """As a CPU training run does (common/malloc.py): a long evaluation's batches then take no page faults."""
    hf_gpt2_folder(tmp_path / "hf")
    (tmp_path / "text.txt").write_text(TEXT)
    calls = []
    monkeypatch.setattr(malloc, "keep_freed_memory", lambda: calls.append(1) or True)
    assert run(f"--init_from=hf:{tmp_path / 'hf'}", f"--text={tmp_path / 'text.txt'}", "--device=cpu") == 0
    assert calls == [1]


def test_a_folder_whose_tokenizer_outgrows_its_model_is_refused_in_one_line(tmp_path, capsys):
    """Ids past the model's embedding table would index out of range: the folder's files do not belong together."""
    hf_gpt2_folder(tmp_path / "hf")
    chars = CHARS + "ABC"  # three more tokens than the model's vocabulary
    (tmp_path / "hf" / "small_gpt_tokenizer.json").write_text(json.dumps(
        {"tokenizer": "char", "vocab_size": len(chars), "eot_id": None, "chars": chars}))
    (tmp_path / "text.txt").write_text(TEXT)
    capsys.readouterr()  # save_pretrained's progress bar
    err = refused(capsys, f"--init_from=hf:{tmp_path / 'hf'}", f"--text={tmp_path / 'text.txt'}")
    assert f"tokenizer has {len(chars)} tokens, its model only {len(CHARS)}" in err and "do not belong" in err


def test_every_infinite_or_nan_number_of_a_report_becomes_null_at_any_depth():
    inf, nan = float("inf"), float("nan")
    report = {"a": inf, "b": [-inf, 1.5, {"c": nan, "d": (2.0, -inf)}], "e": "text", "f": 3}
    assert evaluate.finite_or_null(report) == {"a": None, "b": [None, 1.5, {"c": None, "d": [2.0, None]}],
                                               "e": "text", "f": 3}


def test_a_limit_of_no_items_is_refused(tmp_path, capsys):
    tasks = write_jsonl(tmp_path / "t.jsonl", ITEMS)
    assert "limit=0 must be a positive number of items" in refused(capsys, f"--tasks={tasks}", "--limit=0")
