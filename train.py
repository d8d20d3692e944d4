"""Train a small GPT. `python train.py` trains a character-level model of Shakespeare's complete works on the CPU
in a few minutes; every setting is a flag (`--n_layer=4`), see `python train.py --help` and README.md.

Read top to bottom: configuration -> data -> model and optimizer (fresh or resumed) -> the training loop
(forward, backward, clip, step; evaluate and checkpoint every eval_interval) -> a sample of what it learned.
"""
import math
import os
import shutil
import sys
import time

import torch
from tqdm import tqdm

from common import checkpoint, flags
from common.device import SetupError, autocast, pick_device, pick_dtype
from common.metrics import MetricsLog
from common.optim import lr_at, make_optimizer
from common.run_setup import model_from_checkpoint, parse_configs, rng_state, set_rng_state
from common.train_config import PRESETS, TrainConfig
from data import DataError, TrainBatches, load_tokenizer, read_meta, val_batches
from data.prepare import prepare
from model import GPT, GPTConfig

CKPT_LAST, CKPT_BEST = "ckpt_last.pt", "ckpt_best.pt"
RUN_FILES = (CKPT_LAST, CKPT_BEST, "metrics.jsonl")


def configure(argv):
    """Flags -> (TrainConfig, model overrides, explicit flag values). Model fields are checked here too, with a
    placeholder vocabulary, so a bad --n_head fails before any data is prepared."""
    per_class, explicit = parse_configs(argv, (TrainConfig, GPTConfig), PRESETS, default_preset="shakespeare-char")
    tc = TrainConfig(**per_class[TrainConfig])
    model_overrides = per_class[GPTConfig]
    GPTConfig(**model_overrides)
    return tc, model_overrides, explicit


def prepare_out_dir(tc: TrainConfig):
    """Refuse to start a fresh run on top of an existing one unless --overwrite=true: nothing is lost by accident."""
    existing = [f for f in RUN_FILES if os.path.exists(os.path.join(tc.out_dir, f))]
    if tc.init_from == "scratch" and existing:
        if not tc.overwrite:
            raise SetupError(f"out_dir={tc.out_dir} already holds a run ({existing[0]}); pass --init_from=resume to "
                             f"continue it, --overwrite=true to replace it, or another --out_dir")
        for f in existing:
            os.remove(os.path.join(tc.out_dir, f))
        shutil.rmtree(os.path.join(tc.out_dir, "wandb"), ignore_errors=True)


def load_resume(tc: TrainConfig, model_overrides: dict, explicit: dict):
    """For --init_from=resume: the checkpoint's configs, with explicitly given training flags (e.g. a larger
    --max_iters) applied on top. The model's shape cannot change under a checkpoint."""
    ckpt = checkpoint.load(os.path.join(tc.out_dir, CKPT_LAST))
    for k, v in model_overrides.items():
        if k in explicit and ckpt["model_config"].get(k) != v:
            raise SetupError(f"--{k}={v} differs from the checkpoint's {k}={ckpt['model_config'].get(k)}; a resumed "
                             f"run keeps its model: drop the flag or start a new --out_dir")
    saved = dict(ckpt["train_config"])
    saved.update({k: v for k, v in explicit.items() if k in saved})
    return TrainConfig(**saved), ckpt


def main(argv) -> None:
    if "--help" in argv or "-h" in argv:
        print(flags.help_text((TrainConfig, GPTConfig), PRESETS))
        return
    tc, model_overrides, explicit = configure(argv)
    ckpt = None
    if tc.init_from == "resume":
        tc, ckpt = load_resume(tc, model_overrides, explicit)
    else:
        prepare_out_dir(tc)
    device = pick_device(tc.device)
    dtype = pick_dtype(tc.dtype, device)
    master = True  # rank 0 logs, evaluates, samples and saves (the DDP issue adds the other ranks)

    # ---- data ----------------------------------------------------------------------------------------------------
    data_dir = prepare(dataset=tc.dataset, input=tc.input, split=tc.split, tokenizer=tc.tokenizer,
                       vocab_size=tc.bpe_vocab_size, root=tc.data_root)
    meta = read_meta(data_dir)
    tokenizer = load_tokenizer(data_dir)

    # ---- model and optimizer -------------------------------------------------------------------------------------
    torch.manual_seed(tc.seed)
    if ckpt is not None:
        model = model_from_checkpoint(ckpt, device)
    else:
        model = GPT(GPTConfig(**{**model_overrides, "vocab_size": tokenizer.vocab_size})).to(device)
    cfg = model.config
    if ckpt is not None and ckpt["data_meta"].get("fingerprint") != meta.get("fingerprint"):
        raise SetupError(f"the data in {data_dir} is not the data this checkpoint was trained on; resume with the "
                         f"same --dataset/--input/--split/--tokenizer, or start a new --out_dir")
    optimizer = make_optimizer(model, tc.learning_rate, tc.weight_decay, (tc.beta1, tc.beta2), device.type)
    start, best_val = 0, math.inf
    if ckpt is not None:
        optimizer.load_state_dict(ckpt["optimizer"])
        start, best_val = ckpt["step"], ckpt.get("best_val_loss", math.inf)
        set_rng_state(ckpt["rng"], device)
    train_model = torch.compile(model) if tc.compile else model

    train_data = TrainBatches(data_dir, cfg.block_size, tc.batch_size, tc.seed,
                              grad_accum=tc.gradient_accumulation_steps, device=device)
    val_set = list(val_batches(data_dir, cfg.block_size, tc.batch_size, max_batches=tc.eval_iters, device=device))
    val_bytes_per_token = meta["val_bytes"] / meta["val_tokens"]
    decay_iters = tc.lr_decay_iters or tc.max_iters
    tokens_per_step = tc.batch_size * tc.gradient_accumulation_steps * cfg.block_size

    @torch.no_grad()
    def evaluate() -> dict:
        model.eval()
        total, count = 0.0, 0
        for x, y in val_set:
            with autocast(device, dtype):
                _, loss = train_model(x, y)
            total, count = total + loss.item() * y.numel(), count + y.numel()
        model.train()
        val = total / count
        return {"val_loss": val, "val_bpb": val / math.log(2) / val_bytes_per_token, "val_ppl": math.exp(min(val, 50))}

    def sample(n_tokens: int) -> str:
        prompt = tokenizer.encode(tc.sample_prompt) or [0]
        g = torch.Generator(device=device).manual_seed(tc.seed)  # its own generator: training's RNG is untouched
        out = model.generate(torch.tensor([prompt], device=device), n_tokens, temperature=0.8, top_k=200, generator=g)
        return tokenizer.decode(out[0].tolist())

    def save(step: int, best: bool) -> None:
        state = {"model": checkpoint.clean_state_dict(model), "optimizer": optimizer.state_dict(),
                 "model_config": cfg.to_dict(), "train_config": tc.to_dict(), "step": step, "best_val_loss": best_val,
                 "rng": rng_state(device), "data_dir": os.path.abspath(data_dir), "data_meta": meta, "variant": "decoder"}
        checkpoint.save_atomic(state, os.path.join(tc.out_dir, CKPT_LAST))
        if best:
            shutil.copyfile(os.path.join(tc.out_dir, CKPT_LAST), os.path.join(tc.out_dir, CKPT_BEST + ".tmp"))
            os.replace(os.path.join(tc.out_dir, CKPT_BEST + ".tmp"), os.path.join(tc.out_dir, CKPT_BEST))

    wandb_cfg = None
    if tc.wandb_log and master:
        wandb_cfg = {"project": tc.wandb_project, "name": tc.wandb_run_name or os.path.basename(tc.out_dir),
                     "config": {**tc.to_dict(), **cfg.to_dict(), "params": model.num_params()}}
    log = MetricsLog(tc.out_dir, fresh=ckpt is None, wandb_cfg=wandb_cfg)
    print(f"model: {model.num_params() / 1e6:.2f}M parameters, {cfg.n_layer} layers x {cfg.n_head} heads x "
          f"{cfg.n_embd} wide, context {cfg.block_size}, pos_emb={cfg.pos_emb}, attn={cfg.attn_impl} | "
          f"data: {data_dir} ({meta['train_tokens']:,} train / {meta['val_tokens']:,} val {tc.tokenizer} tokens) | "
          f"{device.type} {str(dtype).replace('torch.', '')}, {tokens_per_step:,} tokens/step", flush=True)

    # ---- the training loop ---------------------------------------------------------------------------------------
    model.train()
    t_start, t_last, tokens_seen = time.time(), time.time(), start * tokens_per_step
    bar = tqdm(range(start, tc.max_iters), initial=start, total=tc.max_iters, unit="step", dynamic_ncols=True,
               mininterval=1.0, disable=not master)
    for step in bar:
        lr = lr_at(step, tc.learning_rate, tc.min_lr, tc.warmup_iters, decay_iters)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss_sum = torch.zeros((), device=device)
        for micro in range(tc.gradient_accumulation_steps):
            x, y = train_data.get(step, micro)
            with autocast(device, dtype):
                _, loss = train_model(x, y)
            loss = loss / tc.gradient_accumulation_steps  # the accumulated gradient is the mean over micro-steps
            loss.backward()
            loss_sum += loss.detach()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip if tc.grad_clip > 0 else math.inf)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        done = step + 1
        tokens_seen += tokens_per_step

        is_eval = done % tc.eval_interval == 0 or done == tc.max_iters
        if master and (done % tc.log_interval == 0 or is_eval):
            train_loss = loss_sum.item()  # the only host sync: once per log line
            if not math.isfinite(train_loss):
                raise SetupError(f"the training loss became {train_loss} at step {done}; the last good checkpoint "
                                 f"is untouched: lower --learning_rate or --grad_clip and resume")
            now = time.time()
            tok_per_s = tokens_per_step * (done - max(start, done - tc.log_interval)) / max(now - t_last, 1e-9)
            row = {"step": done, "train_loss": train_loss, "lr": lr, "grad_norm": grad_norm.item(),
                   "tokens": tokens_seen, "elapsed_s": round(now - t_start, 3), "tok_per_s": round(tok_per_s, 1)}
            bar.set_postfix(loss=f"{train_loss:.4f}", tok_s=f"{tok_per_s:,.0f}", refresh=False)
            t_last = now
            if is_eval:
                row.update(evaluate())
                best = row["val_loss"] < best_val
                best_val = min(best_val, row["val_loss"])
                save(done, best)
                bar.write(f"step {done}: train {train_loss:.4f}, val {row['val_loss']:.4f} "
                          f"({row['val_bpb']:.3f} bits/byte, ppl {row['val_ppl']:.2f}), lr {lr:.2e}, "
                          f"{tok_per_s:,.0f} tok/s" + (" [best]" if best else ""))
                if tc.wandb_log:
                    log.log_samples(done, [sample(tc.sample_tokens)])
            log.log(row)
    bar.close()
    elapsed = time.time() - t_start
    if master:
        print(f"done: {tc.max_iters} steps in {elapsed:.1f} s, best val loss {best_val:.4f}; checkpoints in "
              f"{tc.out_dir}/")
        if tc.sample_tokens:
            print("---- sample ----\n" + sample(tc.sample_tokens) + "\n----------------")
    log.close()


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except (ValueError, DataError) as e:  # FlagError, SetupError, CheckpointError, DataError: one line, exit 2
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted: the last checkpoint in out_dir is complete; continue with --init_from=resume",
              file=sys.stderr)
        sys.exit(130)
