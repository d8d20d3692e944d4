"""A checkpoint and the data it was trained on: a bpe checkpoint decodes as it was trained whatever happens to its
prepared folder."""
import json
import shutil

import train
from conftest import tiny_args
from data.prepare import prepare
from data.tokenizer import load_tokenizer
from inference.checkpoint import Checkpoint



def run(corpus, out, *extra):
    return train.cli.run(train.main, tiny_args(corpus, out, "--eval_interval=2", *extra))


def test_a_bpe_checkpoint_decodes_as_trained_after_its_folder_is_rebuilt_or_removed(tmp_path):
    src, out = tmp_path / "docs.jsonl", tmp_path / "run"
    with open(src, "w") as f:  # two fields of different words: --text_field=body is another corpus
        for i in range(200):
            doc = {"text": f"ROMEO {i}: love night light sweet death fair dear.\n",
                   "body": f"Quay {i}: zebra jinx vex wolf qoph.\n"}
            f.write(json.dumps(doc) + "\n")
    assert run(src, out, "--max_iters=2", "--tokenizer=bpe", "--bpe_vocab_size=300") == 0
    ckpt = Checkpoint.load(str(out / "ckpt_last.pt"))
    text = "ROMEO 7: sweet light. Quay 7: zebra vex."
    trained = load_tokenizer(ckpt.data_dir).encode(text)
    other = prepare(input=src, tokenizer="bpe", bpe_vocab_size=300, split="tail", text_field="body",
                    progress=False, data_root=tmp_path / "data")
    assert load_tokenizer(other).encode(text) != trained  # the other corpus's merges cut the text otherwise
    assert ckpt.tokenizer().encode(text) == trained
    shutil.rmtree(tmp_path / "data")
    assert Checkpoint.load(str(out / "ckpt_last.pt")).tokenizer().encode(text) == trained
