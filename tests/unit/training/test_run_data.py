"""training/run_data.py: which data a run uses, how the processes of a node share its preparation, and what to
change when a corpus is too small."""
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from common.errors import DataError, SetupError
from data import pair_batches
from data.pairs import is_val_pair
from data.tokenizer import read_meta
from training import objectives, run_data
from training.config import TrainConfig
from training.distributed import Dist
from training.run_data import prepared_data, prepared_per_node, seq2seq_batches, smaller_step


def test_one_process_prepares_once():
    calls = []
    assert prepared_per_node(Dist(), lambda folder: calls.append(folder) or ("folder",)) == ("folder",)
    assert calls == [None]


@pytest.mark.parametrize("flags, block_size, fixed_by, step, window", [
    ({}, 16, None, "lower --block_size or --batch_size", "lower --block_size"),
    ({"gradient_accumulation_steps": 4}, 16, None,
     "lower --block_size or --batch_size or --gradient_accumulation_steps", "lower --block_size"),
    ({"total_batch_size": 4096}, 16, None, "lower --total_batch_size", "lower --block_size"),
    ({}, 16, "the checkpoint", "lower --batch_size, or give a larger corpus (block_size is fixed by the checkpoint)",
     "give a larger corpus (block_size is fixed by the checkpoint)"),
    # a flag already at 1 cannot be lowered: the corpus is what is too small
    ({"batch_size": 1}, 1, None, "give a larger corpus", "give a larger corpus"),
    ({"batch_size": 1, "gradient_accumulation_steps": 2}, 1, None, "lower --gradient_accumulation_steps",
     "give a larger corpus"),
    ({}, 1, None, "lower --batch_size", "give a larger corpus"),
    ({"batch_size": 1}, 16, None, "lower --block_size", "lower --block_size"),
    ({"batch_size": 1}, 16, "the checkpoint", "give a larger corpus (block_size is fixed by the checkpoint)",
     "give a larger corpus (block_size is fixed by the checkpoint)"),
])
def test_a_corpus_too_small_names_only_the_flags_that_can_help(flags, block_size, fixed_by, step, window):
    assert smaller_step(TrainConfig(**flags), block_size, fixed_by) == (step, window)


@pytest.mark.parametrize("dist, first", [(Dist(), True), (Dist(rank=2, local_rank=0, world_size=4), True),
                                         (Dist(rank=3, local_rank=1, world_size=4), False)])
def test_the_first_process_of_each_node_prepares_before_the_others_wait(dist, first, monkeypatch):
    """Rank 2 starts a second node: it prepares that node's copy while rank 0 prepares the first's; its node's other
    processes read it after the barrier."""
    events = []

    def barrier(d, folder):
        events.append("barrier")
        return ["node 1's", None, "node 2's", None]

    monkeypatch.setattr(run_data, "wait_for_data", barrier)
    got = prepared_per_node(dist, lambda folder: events.append("read" if folder else "prepared")
                            or (folder or "folder",))
    assert events == (["prepared", "barrier"] if first else ["barrier", "read"])
    assert got == (("folder",) if first else ("node 2's",))


SHARED_FOLDER = """
import sys, torch.distributed as dist
from training.distributed import Dist
from training.run_data import prepared_per_node
rank = int(sys.argv[2])
dist.init_process_group("gloo", init_method=f"file://{sys.argv[1]}", rank=rank, world_size=4)
# each process that prepares gets a folder of its own: as if the corpus had been edited in between
print(prepared_per_node(Dist(rank, rank % 2, 4), lambda folder: (f"read {folder}" if folder else f"built by {rank}",)))
dist.destroy_process_group()
"""


def test_the_other_processes_of_a_node_read_its_first_process_folder(tmp_path):
    """Two nodes of two processes: the second process of each reads the folder its node's first one prepared, not
    one of its own (which could hold other data)."""
    from conftest import ROOT

    procs = [subprocess.Popen([sys.executable, "-c", SHARED_FOLDER, str(tmp_path / "store"), str(rank)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(4)]
    said = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), said
    assert [out.strip() for out, _ in said] == ["('built by 0',)", "('read built by 0',)", "('built by 2',)",
                                                "('read built by 2',)"], said


def test_a_folder_whose_meta_json_miscounts_its_tokenizer_is_refused(tmp_path):
    (tmp_path / "cat.txt").write_text("the cat sat on the mat. " * 50)
    tc = TrainConfig(input=str(tmp_path / "cat.txt"), data_root=str(tmp_path / "root"), tokenizer="char")
    folder, meta, tokenizer = prepared_data(tc, Dist())
    assert tokenizer.vocab_size == meta["vocab_size"] == len(set("the cat sat on the mat. \n"))
    meta["vocab_size"] += 1
    (Path(folder) / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=f"meta.json says vocab_size={meta['vocab_size']} but its tokenizer has "
                                        f"{tokenizer.vocab_size} tokens"):
        prepared_data(tc, Dist())


def test_a_checkpoint_on_data_prepared_by_older_rules_says_that_no_flag_makes_it_again(tmp_path):
    """The fingerprint the first versions kept (format_version=1), or one of an --input read by older rules
    (input_rules=3): no flag of today's makes their bytes again, so the refusal names the rules, not the flags, and
    prepares nothing; a setting that differs still names the flags."""
    (tmp_path / "cat.txt").write_text("the cat sat on the mat. " * 50)
    tc = TrainConfig(input=str(tmp_path / "cat.txt"), data_root=str(tmp_path / "root"), tokenizer="char")

    def refusal(fingerprint):
        with pytest.raises(SetupError) as e:
            prepared_data(tc, Dist(), ckpt=SimpleNamespace(data_meta={"fingerprint": fingerprint}))
        return str(e.value)
    said = refusal({"format_version": 1, "source_sha256": "0" * 64, "split": "tail", "tokenizer": "char",
                    "bpe_vocab_size": None})
    assert "prepared by another version's rules, format_version=1; this version's are format_version=" in said
    assert "no flag prepares it that way again" in said and "resume with the same" not in said
    assert not (tmp_path / "root").exists()
    today = read_meta(prepared_data(tc, Dist())[0])["fingerprint"]
    said = refusal(dict(today, input_rules=3))
    assert f"rules, input_rules=3; this version's are input_rules={today['input_rules']})" in said
    assert "no flag prepares it that way again" in said
    said = refusal(dict(today, tokenizer="gpt2"))
    assert "(its tokenizer=gpt2; now tokenizer=char); resume with the same --dataset" in said


def decoded_pairs(batch, tokenizer, stop_id):
    """[(source, target)] texts of a collated batch: padding and STOP left out."""
    (source, valid, _), targets = batch
    return [(tokenizer.decode(s[v].tolist()), tokenizer.decode([t for t in row.tolist() if t >= 0 and t != stop_id]))
            for s, v, row in zip(source, valid, targets)]


def test_a_tasks_validation_pairs_are_the_validation_side_and_never_train():
    task = SimpleNamespace(task="reverse", task_min_len=2, task_max_len=5)
    tc = TrainConfig(model="seq2seq", batch_size=8, eval_iters=3, **vars(task))
    objective, tokenizer = objectives.build("seq2seq", pair_batches.task_tokenizer())
    meta = pair_batches.task_meta("reverse", 2, 5)
    train_data, val_set = seq2seq_batches(tc, Dist(), "", meta, 6, objective, "cpu")
    val = [p for batch in val_set for p in decoded_pairs(batch, tokenizer, objective.stop_id)]
    train = [p for step in range(3) for p in decoded_pairs(train_data.get(step), tokenizer, objective.stop_id)]
    assert len(val) == 3 * 8 and len(train) == 3 * 8
    assert all(t == s[::-1] and 2 <= len(s) <= 5 for s, t in val + train)
    assert all(is_val_pair(s, t) for s, t in val) and not any(is_val_pair(s, t) for s, t in train)


@pytest.mark.parametrize("train_long, val_long", [(2, 1), (0, 1)])
def test_pairs_too_long_for_the_context_are_counted_on_each_side_by_rank_zero(tmp_path, capsys, train_long, val_long):
    """Pairs longer than block_size on either side are left out of both splits, and rank 0 says how many."""
    def side(n, long, want_val):  # the first n pairs of a kind that land on the wanted side
        pairs = ((f"{i}" * 9, f"{i}") if long else (f"{i}", f"{i}{i}") for i in range(10_000))
        return [f"{s}\t{t}\n" for s, t in pairs if is_val_pair(s, t) == want_val][:n]
    lines = side(train_long, True, False) + side(val_long, True, True) + side(3, False, False) + side(3, False, True)
    (tmp_path / "pairs.tsv").write_text("".join(lines))
    tc = TrainConfig(model="seq2seq", pairs=str(tmp_path / "pairs.tsv"), data_root=str(tmp_path / "root"),
                     batch_size=2, eval_iters=1)
    folder, meta, tokenizer = prepared_data(tc, Dist())
    objective, _ = objectives.build("seq2seq", tokenizer)
    capsys.readouterr()
    for d in (Dist(rank=1, local_rank=1, world_size=2), Dist()):
        train_data, val_set = seq2seq_batches(tc, d, folder, meta, 8, objective, "cpu")
    assert capsys.readouterr().out == (f"{train_long} train and {val_long} val pairs are longer than block_size=8 "
                                       f"tokens on a side and are left out\n")
    assert all(len(s) <= 8 for batch in val_set for s, _ in decoded_pairs(batch, tokenizer, objective.stop_id))
