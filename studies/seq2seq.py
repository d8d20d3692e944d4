"""The bottleneck study: an encoder-decoder whose decoder reads one fixed vector, against three that attend.

    python compare.py --study=seq2seq --out=study-seq2seq      # 10-15 min on 2 CPU cores (docs/seq2seq.md)

Four runs of train.py --model=seq2seq with the same sizes, data, seed and budget on a task whose answer needs the
whole source (reversal, or --task=sort), sources of min_len..max_len letters. They differ only in how the decoder
reads the encoder:
    no-attention  cross_attn=mean: the mean of the encoder's outputs over the source, one vector per source
    dot           cross-attention, scaled dot product q.k/sqrt(d)
    additive      cross-attention, Bahdanau's v^T tanh(W1 q + W2 k)
    bilinear      cross-attention, Luong's q^T W k
All four on the math attention path, so their speeds compare. Then each checkpoint is loaded here and greedily
decodes eval_per_length fresh pairs of every length from min_len to eval_max_len (past max_len no run saw a source
that long); and for the attention variants the cross-attention maps of map_pairs pairs of map_len letters say where
each target row looks (for reversal: the mirrored source position, the anti-diagonal).
Writes to --out: report.md, accuracy_by_length.png, cross_attention.png, results.json, one run folder per variant
(studies/seq2seq_report.py writes the report, its figures and the wandb summary).
"""
import os
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from common.errors import ConfigError
from data.pair_batches import TASKS, collate, task_pair
from data.pairs import is_val_pair
from inference.checkpoint import load_for_inference, path_in
from insight.attention_maps import cross_attention_maps
from studies.runs import start_study, study_config, train_run, train_speed, wandb_flags
from training.objectives import Seq2SeqObjective

VARIANTS = {"no-attention": dict(cross_attn="mean"), "dot": dict(attn_score="dot"),
            "additive": dict(attn_score="additive"), "bilinear": dict(attn_score="bilinear")}
EVAL_STREAM = 7919  # mixed into the evaluation pairs' seed: a stream of its own, not the training draws'


@dataclass
class Seq2SeqStudyConfig:
    FOLDER_FLAGS = ("out",)  # a folder here (its path leaves room for the files in it), a file elsewhere
    out: str = "study-seq2seq"  # results and one run folder per variant (a new or empty folder)
    task: str = "reverse"  # 'reverse' or 'sort'
    min_len: int = 2  # the trained sources have min_len..max_len letters
    max_len: int = 24
    eval_max_len: int = 48  # evaluated at every length up to here: past max_len, lengths no run has seen
    # the model and budget every run shares
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    block_size: int = 64  # a target holds eval_max_len letters + STOP: the positions must reach that far
    pos_emb: str = "rope"
    batch_size: int = 32
    max_iters: int = 3000
    learning_rate: float = 5e-3
    warmup_iters: int = 10
    eval_iters: int = 4  # train.py's own final validation (val_exact), beside this study's evaluation
    seed: int = 1337
    # the study's evaluation
    eval_per_length: int = 100  # fresh pairs decoded at each length
    map_len: int = 16  # the cross-attention maps: sources of this many letters
    map_pairs: int = 32  # pairs whose maps the alignment score averages over
    wandb_log: bool = False
    wandb_project: str = "small-gpt"
    # studies.runs.train_run passes a corpus when these are set; a task is generated, it reads none
    input = split = data_root = None

    def __post_init__(self):
        if self.task not in TASKS:
            raise ConfigError(f"task={self.task!r} is not one of {', '.join(TASKS)}")
        if not 0 < self.min_len <= self.max_len <= self.eval_max_len:
            raise ConfigError(f"min_len={self.min_len}, max_len={self.max_len}, eval_max_len={self.eval_max_len} "
                              f"must be positive with min_len <= max_len <= eval_max_len")
        if self.eval_max_len + 1 > self.block_size:  # the decoder reads the start token (STOP) + the target
            raise ConfigError(f"eval_max_len={self.eval_max_len} needs block_size >= {self.eval_max_len + 1} "
                              f"(the decoder reads the start token and the target); got block_size={self.block_size}")
        if not self.min_len <= self.map_len <= self.eval_max_len:
            raise ConfigError(f"map_len={self.map_len} must lie in min_len..eval_max_len "
                              f"({self.min_len}..{self.eval_max_len})")
        for name in ("eval_per_length", "map_pairs", "max_iters"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")


def fresh_pairs(sc: Seq2SeqStudyConfig, length: int, n: int) -> list[tuple[str, str]]:
    """n pairs with sources of exactly `length` letters, from a stream seeded by (EVAL_STREAM, seed, length) and
    kept only where the pair hashes into validation, which train.py never trains on: unseen pairs at every length
    (at the shortest lengths few strings exist, so some repeat)."""
    rng = np.random.default_rng([EVAL_STREAM, sc.seed, length])
    out = []
    while len(out) < n:
        source, target = task_pair(sc.task, rng, length, length)
        if is_val_pair(source, target):
            out.append((source, target))
    return out


def batch(pairs, tokenizer):
    """[(source, target) text] -> collate's ((source (B, S), source_valid (B, S), target_in (B, T)), targets)."""
    return collate([(tokenizer.encode(s), tokenizer.encode(t)) for s, t in pairs], tokenizer.stop_id)


def accuracy_by_length(sc, model, tokenizer) -> dict:
    """{length: {exact, token_acc, n}}: greedy decoding scored as train.py's val_exact and val_token_acc are
    (Seq2SeqObjective.decode_counts: every reference letter and the final STOP count as tokens)."""
    objective = Seq2SeqObjective(tokenizer.stop_id)
    out = {}
    for length in range(sc.min_len, sc.eval_max_len + 1):
        x, y = batch(fresh_pairs(sc, length, sc.eval_per_length), tokenizer)
        exact, n, right, tokens = objective.decode_counts(model, x, y).tolist()
        out[length] = {"exact": exact / n, "token_acc": right / tokens, "n": int(n)}
    return out


def aligned_positions(task: str, pairs) -> torch.Tensor:
    """(B, N, N) bool for pairs of N letters: [b, t, s] is True where source letter s is the one target row t
    writes. Reversal: s = N - 1 - t, the anti-diagonal; sort: every source position holding target letter t."""
    N = len(pairs[0][0])
    if task == "reverse":
        return torch.eye(N, dtype=torch.bool).flip(1).expand(len(pairs), N, N)
    src = torch.tensor([[ord(c) for c in s] for s, _ in pairs])  # (B, N)
    tgt = torch.tensor([[ord(c) for c in t] for _, t in pairs])  # (B, N)
    return tgt.unsqueeze(2) == src.unsqueeze(1)  # (B, N, N)


def alignment(sc, model, tokenizer) -> dict:
    """Where each target row's cross-attention goes: the share of its weight on the source position(s) it must
    copy, per decoder layer and head, averaged over map_pairs pairs of map_len letters; the best head's map of the
    first pair for the figure; and how far any row's weights are from summing to 1 over the source."""
    pairs = fresh_pairs(sc, sc.map_len, sc.map_pairs)
    (source, valid, target_in), _ = batch(pairs, tokenizer)
    maps = cross_attention_maps(model, source, target_in, valid)  # (L, B, H, N + 1, N): the last row writes STOP
    rows = maps[..., :sc.map_len, :]  # (L, B, H, N, N): the rows that write a letter
    aligned = aligned_positions(sc.task, pairs).float()  # (B, N, N)
    share = (rows * aligned[None, :, None]).sum(-1).mean(-1).mean(1)  # (L, H): mean share of a row's weight
    layer, head = divmod(int(share.argmax()), share.size(1))
    return {"per_head": share.tolist(), "best": {"layer": layer, "head": head, "score": share[layer, head].item()},
            "last_layer_head_mean": share[-1].mean().item(),  # the share is linear in the map: = the mean map's
            "chance": (aligned.sum(-1) / sc.map_len).mean().item(),  # what uniform attention would put there
            "row_sum_error": (maps.sum(-1) - 1).abs().max().item(),
            "example": {"source": pairs[0][0], "target": pairs[0][1], "map": rows[layer, 0, head].tolist()}}


def evaluate(sc, out_dir: str, attends: bool) -> dict:
    start = time.perf_counter()
    model, tokenizer, ckpt = load_for_inference(path_in(out_dir, "last"), torch.device("cpu"))
    speed, seconds = train_speed(out_dir)
    result = {"params": model.num_params(), "train_s": seconds, "tok_per_s": speed,
              "by_length": accuracy_by_length(sc, model, tokenizer),
              "alignment": alignment(sc, model, tokenizer) if attends else None}
    result["eval_s"] = time.perf_counter() - start
    return result


def machine() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            name = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        import platform

        name = platform.processor() or platform.machine()
    return f"{name}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads"


def main(argv) -> None:
    from studies.seq2seq_report import write  # matplotlib only once there is something to draw

    sc = study_config(argv, Seq2SeqStudyConfig, "seq2seq")
    if sc is None:  # --help
        return
    start = time.perf_counter()
    shared = dict(model="seq2seq", task=sc.task, task_min_len=sc.min_len, task_max_len=sc.max_len,
                  pos_emb=sc.pos_emb, attn_impl="math", **wandb_flags(sc, "compare-seq2seq"))
    start_study(sc, {name: {**shared, **flags} for name, flags in VARIANTS.items()})  # checked before any trains
    variants = {}
    for name, flags in VARIANTS.items():
        out_dir = train_run(sc, name, **shared, **flags)
        variants[name] = {"flags": flags, **evaluate(sc, out_dir, attends=flags.get("cross_attn") != "mean")}
    res = {"config": asdict(sc), "machine": machine(), "lengths": list(range(sc.min_len, sc.eval_max_len + 1)),
           "variants": variants, "total_s": time.perf_counter() - start}
    path = write(sc, res)
    print(f"wrote {path}, accuracy_by_length.png, cross_attention.png and results.json in {sc.out}")

