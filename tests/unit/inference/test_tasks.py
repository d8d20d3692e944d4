"""Task files: both formats read, every mistake refused in one line naming FILE:LINE, and the rows tokenized as llm.c
does for HellaSwag (context and choice apart, the choice with a space before it), long contexts cut from the left."""
import json

import pytest

from common.errors import UserError
from data.mask_token import with_mask_token
from data.tokenizer import CharTokenizer, gpt2_tokenizer
from inference.tasks import Task, encode_task, read_task, read_tasks, task_name

# a line as HellaSwag's own hellaswag_val.jsonl has it: its keys, an int label, endings under "endings"
HELLASWAG = {"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.", "ctx_b": "he",
             "ctx": "A man is sitting on a roof. he", "split": "val", "split_type": "indomain", "label": 3,
             "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.",
                         "is holding a rubik's cube.", "starts pulling up roofing on a roof."],
             "source_id": "activitynet~v_-JhWjGDPHMY"}


def write(path, *lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


def test_hellaswag_lines_and_plain_lines_read_alike(tmp_path):
    path = write(tmp_path / "mixed.jsonl", HELLASWAG, "", {"context": "Two plus two is", "choices": ["four", "five"],
                                                           "label": 0}, {**HELLASWAG, "label": "1"})
    items = read_task(path)
    assert [(i.context, i.label, i.line) for i in items] == [(HELLASWAG["ctx"], 3, 1), ("Two plus two is", 0, 3),
                                                             (HELLASWAG["ctx"], 1, 4)]  # the blank line 2 skipped
    assert items[0].choices == HELLASWAG["endings"] and items[1].choices == ["four", "five"]


@pytest.mark.parametrize("line, message", [
    ("{not json", "mistakes.jsonl:2 is not JSON"),
    ("[1, 2]", "mistakes.jsonl:2 holds a JSON list"),
    ({"question": "?", "answers": ["a", "b"]}, "mistakes.jsonl:2 has neither HellaSwag's ctx/endings/label nor"),
    ({"context": "", "choices": ["a", "b"], "label": 0}, "mistakes.jsonl:2: context must be a non-empty string"),
    ({"context": "x", "choices": ["a"], "label": 0}, "mistakes.jsonl:2: choices must be a list of at least two"),
    ({"context": "x", "label": 0}, "mistakes.jsonl:2: choices must be a list of at least two strings; it is missing"),
    ({"endings": ["a", "b"], "label": 0}, "mistakes.jsonl:2: ctx must be a non-empty string; it is missing"),
    ({"context": "x", "choices": ["a", 3], "label": 0}, "mistakes.jsonl:2: choices must be a list of at least two"),
    ({"context": "x", "choices": ["a", ""], "label": 0}, "mistakes.jsonl:2: choice 1 is empty"),
    ({"context": "x", "choices": ["a", "b"], "label": 2}, "mistakes.jsonl:2: label=2 is out of range for 2 choices"),
    ({"context": "x", "choices": ["a", "b"], "label": -1}, "label=-1 is out of range"),
    ({"context": "x", "choices": ["a", "b"], "label": True}, "label must be the index of the right choice"),
    ({"context": "x", "choices": ["a", "b"], "label": "\u00b2"}, "label must be the index of the right choice"),
    ({**HELLASWAG, "label": ""}, "HellaSwag's test split has no labels"),
    ({"context": "x", "choices": "one long string, not a list of the choices", "label": 0},
     'choices must be a list of at least two strings; it is "one long string, not a list of the c...'),  # 40 characters
])
def test_a_mistake_is_one_line_naming_the_file_and_line(tmp_path, line, message):
    path = write(tmp_path / "mistakes.jsonl", {"context": "fine", "choices": ["a", "b"], "label": 1}, line)
    with pytest.raises(UserError) as e:
        read_task(path)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_files_that_cannot_be_read_are_refused_in_one_line(tmp_path):
    for path, message in ((tmp_path / "missing.jsonl", "does not exist"), (tmp_path, "is not a file")):
        with pytest.raises(UserError, match=message):
            read_task(str(path))
    latin1 = b'{"context": "caf\xe9", "choices": ["a", "b"], "label": 0}\n'
    (tmp_path / "latin1.jsonl").write_bytes(latin1)
    with pytest.raises(UserError, match=rf"is not UTF-8 text \(byte {latin1.index(0xE9)}\)"):  # where it starts
        read_task(str(tmp_path / "latin1.jsonl"))
    with pytest.raises(UserError, match="holds no items"):
        read_task(write(tmp_path / "empty.jsonl", "", "  "))


def test_a_bad_line_past_the_limit_still_refuses_the_file_and_names_clash(tmp_path):
    good = {"context": "x", "choices": ["a", "b"], "label": 0}
    path = write(tmp_path / "t.jsonl", good, good, {"context": "x", "choices": ["a", "b"], "label": 5})
    with pytest.raises(UserError, match="t.jsonl:3"):
        read_tasks(path, limit=1)
    other = tmp_path / "other"
    other.mkdir()
    same = write(other / "t.jsonl", good)
    assert [len(t.items) for t in read_tasks(f"{write(tmp_path / 'u.jsonl', good, good)},{same}", limit=1)] == [1, 1]
    with pytest.raises(UserError, match="two files called t"):
        read_tasks(f"{same},{write(tmp_path / 't.jsonl', good)}")


def test_a_limit_keeps_the_first_items_of_the_file_in_order(tmp_path):
    """train.py --eval_tasks_n=N scores the first N items of each file, the same ones at every evaluation."""
    lines = [{"context": f"c{i}", "choices": ["a", "b"], "label": i % 2} for i in range(5)]
    path = write(tmp_path / "t.jsonl", *lines)
    for limit, want in ((3, ["c0", "c1", "c2"]), (9, [f"c{i}" for i in range(5)]), (None, [f"c{i}" for i in range(5)])):
        (task,) = read_tasks(path, limit=limit)
        assert [item.context for item in task.items] == want and [item.line for item in task.items] == [
            int(c[1:]) + 1 for c in want]


def test_every_file_of_the_list_takes_the_home_folders_tilde(tmp_path, monkeypatch):
    """--tasks=~/a.jsonl,~/b.jsonl: the flags expand the list's leading ~ only, and b was looked for in a folder
    named ~ (the shell leaves a ~ after a comma as typed)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("a", "b"):
        write(tmp_path / f"{name}.jsonl", {"context": name, "choices": ["x", "y"], "label": 0})
    tasks = read_tasks("~/a.jsonl, ~/b.jsonl")
    assert [(t.name, t.path, t.items[0].context) for t in tasks] == [
        ("a", str(tmp_path / "a.jsonl"), "a"), ("b", str(tmp_path / "b.jsonl"), "b")]


def test_context_and_choice_are_tokenized_apart_the_choice_after_a_space():
    tok = gpt2_tokenizer()
    item = read_item({"context": "The cat sat on the", "choices": ["mat.", "ça va"], "label": 0})
    (enc,) = encode_task(Task("t", "t.jsonl", [item]), tok, block_size=64)
    context = tok.encode("The cat sat on the")
    assert enc.rows == [context + tok.encode(" mat."), context + tok.encode(" ça va")]
    assert enc.n_tokens == [len(tok.encode(" mat.")), len(tok.encode(" ça va"))]
    assert enc.n_chars == [4, 5] and enc.label == 0 and not enc.cut  # characters as written: ç is one


def test_a_literal_mask_in_an_item_is_its_characters_for_a_mask_token_decoder():
    """A --mask_token=true decoder's tokenizer reads [MASK] in a prompt as the mask id; a task's text is scored as
    the run's prepared text was encoded, where [MASK] is six characters."""
    chars = CharTokenizer(" AKMS[]abc")
    item = read_item({"context": "a [MASK] b", "choices": ["[MASK]", "c"], "label": 0})
    (enc,) = encode_task(Task("t", "t.jsonl", [item]), with_mask_token(chars), block_size=32)
    context = chars.encode("a [MASK] b")
    assert enc.rows == [context + chars.encode(" [MASK]"), context + chars.encode(" c")] and enc.n_tokens == [7, 2]


def test_a_long_context_keeps_its_last_tokens_and_a_choice_longer_than_the_block_is_refused():
    tok = CharTokenizer(" abcdefghij")
    item = read_item({"context": "abcdefghij", "choices": ["ab", "abcdef"], "label": 1})
    (enc,) = encode_task(Task("t", "t.jsonl", [item]), tok, block_size=8)
    assert [tok.decode(r) for r in enc.rows] == ["efghij ab", "ij abcdef"]  # block_size + 1 tokens each
    assert enc.cut and enc.n_tokens == [3, 7] and enc.n_chars == [2, 6]
    short = encode_task(Task("t", "t.jsonl", [read_item({"context": "ab", "choices": ["a", "b"], "label": 0})]),
                        tok, block_size=8)
    assert not short[0].cut
    too_long = read_item({"context": "a", "choices": ["abcdefghij", "b"], "label": 0}, line=7)
    with pytest.raises(UserError, match=r"^t.jsonl:7: choice 0 is 11 tokens, more than the model's block_size=8"):
        encode_task(Task("t", "t.jsonl", [too_long]), tok, block_size=8)


def test_a_character_the_tokenizer_lacks_names_the_line():
    item = read_item({"context": "abc", "choices": ["a", "Z"], "label": 0}, line=5)
    with pytest.raises(UserError, match=r"^t.jsonl:5: character 'Z'"):
        encode_task(Task("t", "t.jsonl", [item]), CharTokenizer(" abc"), block_size=8)


def read_item(obj, line=1):
    from inference.tasks import parse_item

    return parse_item(json.dumps(obj), f"t.jsonl:{line}", line)


def test_a_byte_order_mark_a_trailing_comma_and_dots_in_a_name(tmp_path):
    """A file an editor saved with a byte-order mark reads as without it; a comma after the last file names no
    other; a task is named by its file's name without the extension only."""
    line = json.dumps({"context": "x", "choices": ["a", "b"], "label": 1})
    (tmp_path / "hellaswag.v2.jsonl").write_bytes(b"\xef\xbb\xbf" + line.encode() + b"\n")
    path = str(tmp_path / "hellaswag.v2.jsonl")
    (task,) = read_tasks(f"{path}, ")
    assert task.name == task_name(path) == "hellaswag.v2" and [(i.context, i.label) for i in task.items] == [("x", 1)]
    with pytest.raises(UserError, match="names no file"):
        read_tasks(" , ")


def test_a_choice_of_block_size_tokens_fits_and_cut_counts_every_choice():
    """A row holds block_size + 1 tokens: a choice of block_size tokens keeps one context token. A context of
    exactly the tokens that fit with every choice is whole; one that must lose tokens for any choice (here the
    first, the longest) is cut."""
    tok = CharTokenizer(" abcdefghij")
    item = read_item({"context": "abc", "choices": ["abcdefg", "a"], "label": 0})  # " abcdefg": 8 tokens
    (enc,) = encode_task(Task("t", "t.jsonl", [item]), tok, block_size=8)
    assert [tok.decode(r) for r in enc.rows] == ["c abcdefg", "abc a"] and enc.cut
    item = read_item({"context": "a", "choices": ["abcdefg", "a"], "label": 0})
    (enc,) = encode_task(Task("t", "t.jsonl", [item]), tok, block_size=8)
    assert [tok.decode(r) for r in enc.rows] == ["a abcdefg", "a a"] and not enc.cut  # 9 tokens: nothing lost
    item = read_item({"context": "ab", "choices": ["a", "abcdef"], "label": 0})  # 2 + 7 = 9 tokens: fits exactly
    (enc,) = encode_task(Task("t", "t.jsonl", [item]), tok, block_size=8)
    assert not enc.cut and enc.rows[1] == tok.encode("ab abcdef")


def test_a_carriage_return_inside_a_line_is_json_whitespace_not_a_line_end(tmp_path):
    """JSON allows \\r between its tokens, and a line ends at \\n (\\r\\n too): the file was read with Python's
    universal newlines, which cut such a line in two and refused the item as not JSON; line numbers count \\n."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"context": "caf\xc3\xa9",\r "choices": ["a", "b"], "label": 0}\r\n'
                     b'{"context": "x", "choices": ["y"], "label": 0}\r\n')
    with pytest.raises(UserError, match=r"t\.jsonl:2: choices must be a list of at least two strings"):
        read_task(str(path))
    path.write_bytes(path.read_bytes().replace(b'["y"]', b'["y", "z"]'))
    items = read_task(str(path))
    assert [(i.context, i.choices, i.line) for i in items] == [("café", ["a", "b"], 1), ("x", ["y", "z"], 2)]


def test_the_byte_that_is_not_utf8_is_counted_from_the_files_start_also_after_a_byte_order_mark(tmp_path):
    """The utf-8-sig codec counts from after the mark: the message named byte 10 for the file's byte 13."""
    line = b'{"context": "a", "choices": ["a", "b"], "label": 0}\n'
    for raw in (line + b"\xff\n", b"\xef\xbb\xbf" + line + b"\xff\n"):
        (tmp_path / "t.jsonl").write_bytes(raw)
        bad = raw.index(0xFF)  # where the byte is in the file
        with pytest.raises(UserError, match=rf"is not UTF-8 text \(byte {bad}\)"):
            read_task(str(tmp_path / "t.jsonl"))
