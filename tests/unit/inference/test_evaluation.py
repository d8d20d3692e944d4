"""inference/evaluation.py: the text evaluate.py --text scores, read as the run's own text was; the stride, the
report and its table, the columns training logs."""
import pytest
import torch

from common.errors import UserError
from conftest import tiny_model
from data.mask_token import with_mask_token
from data.tokenizer import CharTokenizer
from inference.choices import METRICS, score_task
from inference.evaluation import check_stride, evaluate, read_text, report_table, task_columns
from inference.scoring import perplexity, sliding_windows
from inference.tasks import Item, Task, encode_task


def test_a_literal_mask_in_the_text_is_its_characters_for_a_mask_token_decoder(tmp_path):
    """A --mask_token=true decoder's tokenizer reads [MASK] in a prompt as the mask id (sample.py); the prepared data
    it trained on spells a literal [MASK] out as characters, and so does the text it is scored on, every byte of
    which bits per byte then counts."""
    chars = CharTokenizer(" AKMS[]abe")
    path = tmp_path / "t.txt"
    path.write_text("a [MASK] be")
    tokens = read_text(str(path), with_mask_token(chars))
    assert tokens == chars.encode("a [MASK] be") and len(tokens) == len("a [MASK] be")


def test_the_text_keeps_its_line_ends_as_prepare_does(tmp_path):
    """A file's \\r\\n and lone \\r are scored as stored, as data/prepare.py keeps them in the training text (no
    newline translation); only a byte-order mark at the start is left out."""
    raw = "\ufeffone\r\ntwo\rthree\n".encode()
    path = tmp_path / "t.txt"
    path.write_bytes(raw)
    chars = CharTokenizer("ehnortw\r\n")
    assert read_text(str(path), chars) == chars.encode(raw.decode("utf-8").removeprefix("\ufeff"))


def test_the_byte_that_is_not_utf8_is_counted_from_the_files_start_also_after_a_byte_order_mark(tmp_path):
    """The utf-8-sig codec counts from after the mark: the message named byte 10 for the file's byte 13."""
    for raw in (b"abc" * 4000 + b"\xff", b"\xef\xbb\xbf" + b"a" * 10 + b"\xff"):
        (tmp_path / "t.txt").write_bytes(raw)
        bad = raw.index(0xFF)  # where the byte is in the file
        with pytest.raises(UserError, match=rf"is not UTF-8 text \(byte {bad}\)"):
            read_text(str(tmp_path / "t.txt"), CharTokenizer("abc"))


def test_the_stride_defaults_to_half_the_block_and_may_be_the_whole_block():
    assert check_stride(None, 16) == 8 and check_stride(None, 1) == 1  # Hugging Face's guide's 512 of 1024
    assert check_stride(16, 16) == 16 and check_stride(1, 16) == 1
    for bad in (0, 17):  # 0 would never move on
        with pytest.raises(UserError, match=f"^--stride={bad} must be in 1..block_size=16"):
            check_stride(bad, 16)


def test_an_encoder_is_refused_before_anything_is_scored():
    with pytest.raises(UserError, match="an encoder has no next-token log-probabilities"):
        evaluate(tiny_model(causal=False, vocab_size=11), CharTokenizer(" abcdefghij"), [], [1, 2, 3])


BARS = []


class Bar:
    """progress_bar's stand-in: what it was told to expect, and what it was told was done."""
    def __init__(self, total, desc, enabled=True):
        self.total, self.desc, self.done = total, desc, 0
        BARS.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n):
        self.done += n


def test_the_report_holds_what_was_scored_with_the_stride_used_and_each_bar_reaches_its_total(monkeypatch):
    import inference.evaluation as evaluation

    monkeypatch.setattr(evaluation, "progress_bar", Bar)
    BARS.clear()
    model, tok = tiny_model(vocab_size=11), CharTokenizer(" abcdefghij")
    items = [Item("abc", ["ab", "c", "ba"], 0, 1), Item("ab" * 9, ["a", "b"], 1, 2)]  # a whole context, a cut one
    tasks = [Task("t", "t.jsonl", items)]
    text = tok.encode("abc fed jihg abcd ef ghij")
    report = evaluate(model, tok, tasks, text, stride=5)
    assert report["text"] == {**perplexity(model, text, tok, 5), "stride": 5}
    assert report["tasks"]["t"] == score_task(model, encode_task(tasks[0], tok, 16))
    assert [(b.desc, b.total, b.done) for b in BARS] == [("t", 5, 5), ("text", len(sliding_windows(len(text), 16, 5)),
                                                                       len(sliding_windows(len(text), 16, 5)))]


def test_training_logs_each_task_metric_as_scored_to_five_places():
    """On a model whose every next token is equally likely, the shortest of three choices is picked by acc: right in
    one item of three."""
    model, tok = tiny_model(vocab_size=11), CharTokenizer(" abcdefghij")
    with torch.no_grad():
        model.head.weight.zero_()  # tied to the embedding: every logit is zero
    items = [Item("abc", ["abcd", "ab", "abcdefg"], label, n) for n, label in enumerate((1, 0, 2), 1)]
    encoded = encode_task(Task("t", "t.jsonl", items), tok, 16)
    scores = score_task(model, encoded)
    assert scores["acc"] == pytest.approx(1 / 3)  # the case this test is about: a metric with many decimals
    columns = task_columns(model, {"t": encoded})
    assert columns == {f"tasks/t/{m}": pytest.approx(scores[m], abs=1e-5) for m in METRICS}
    assert columns["tasks/t/acc"] == 0.33333  # five places, not 0.3333333333333333


def test_the_table_shows_every_standard_error_there_is_and_the_tokens_scored():
    task = {"n": 3, "cut": 0, "chance": 0.5, "acc": 1.0, "acc_stderr": 0.0, "acc_norm": 0.5, "acc_norm_stderr": 0.25,
            "acc_token": 1.0, "acc_token_stderr": None}
    text = {"tokens": 1235, "scored": 1234, "nll_per_token": 2.0, "ppl": 7.389, "bits_per_byte": 2.9, "stride": 8}
    table = report_table({"tasks": {"t": task}, "text": text})
    row = table.splitlines()[1]
    assert row.count("±") == 2 and "± 0.0000" in row and "± 0.2500" in row  # a zero error is an error too
    assert row.split()[:4] == ["t", "3", "0", "0.5000"]  # the task, its items, those cut, chance
    assert report_table({"tasks": {}, "text": text}).splitlines() == table.splitlines()[2:]  # no task: no header
    assert table.splitlines()[2].startswith("text: 1,234 tokens scored (stride 8)")


def test_a_text_of_one_token_is_refused_in_one_line(tmp_path):
    """The first token is only context: one token leaves nothing to score."""
    (tmp_path / "t.txt").write_text("a")
    with pytest.raises(UserError, match=r"is 1 token\(s\) long; perplexity needs at least 2"):
        read_text(str(tmp_path / "t.txt"), CharTokenizer("ab"))
    (tmp_path / "t.txt").write_text("ab")
    assert read_text(str(tmp_path / "t.txt"), CharTokenizer("ab")) == [0, 1]


def test_the_tasks_and_the_text_are_scored_in_the_dtype_asked_for():
    """dtype=bfloat16: the report's numbers are score_task's and perplexity's in bf16 autocast, not float32's."""
    model, tok = tiny_model(vocab_size=11), CharTokenizer(" abcdefghij")
    tasks = [Task("t", "t.jsonl", [Item("abc", ["ab", "c", "ba"], 0, 1)])]
    text = tok.encode("abc fed jihg abcd ef ghij")
    report = evaluate(model, tok, tasks, text, stride=5, dtype=torch.bfloat16, progress=False)
    bf16 = score_task(model, encode_task(tasks[0], tok, 16), dtype=torch.bfloat16)
    assert report["tasks"]["t"] == bf16 and bf16 != score_task(model, encode_task(tasks[0], tok, 16))
    nll = perplexity(model, text, tok, 5, dtype=torch.bfloat16)["nll_per_token"]
    assert report["text"]["nll_per_token"] == nll != perplexity(model, text, tok, 5)["nll_per_token"]
