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
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

from common import checkpoint, cli, distributed, flags, fsdp
from common.device import SetupError, autocast, pick_device, pick_dtype
from common.metrics import METRICS_FILE, MetricsLog
from common.mfu import mfu, peak_matmul_flops
from common.optim import lr_at, make_optimizer
from common.run_setup import model_from_checkpoint, parse_configs, rng_state, set_rng_state
from common.train_config import PRESETS, TrainConfig
from data import TrainBatches, load_tokenizer, read_meta, val_batches
from data.prepare import prepare
from data.mask_token import with_mask_token
from model import GPT, GPTConfig, mlm

CKPT_LAST, CKPT_BEST = "ckpt_last.pt", "ckpt_best.pt"
RUN_FILES = (CKPT_LAST, CKPT_BEST, METRICS_FILE)


def resident_mb() -> float | None:
    """This process's resident memory (Linux), logged so that a leak over a long run shows up in metrics.jsonl."""
    try:
        with open("/proc/self/statm") as f:
            return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except (OSError, ValueError, IndexError):
        return None


def configure(argv):
    """Flags -> (TrainConfig, model overrides, explicit flag values). Model fields are checked here too, with a
    placeholder vocabulary, so a bad --n_head fails before any data is prepared."""
    per_class, explicit = parse_configs(argv, (TrainConfig, GPTConfig), PRESETS, default_preset="shakespeare-char")
    tc = TrainConfig(**per_class[TrainConfig])
    model_overrides = per_class[GPTConfig]
    if "causal" in explicit and explicit["causal"] != tc.causal:
        raise SetupError(f"--causal={explicit['causal']} contradicts --model={tc.model} (which sets causal="
                         f"{tc.causal}); drop --causal and choose --model=decoder, encoder or cheater")
    model_overrides["causal"] = tc.causal
    GPTConfig(**model_overrides)
    return tc, model_overrides, explicit


def prepare_out_dir(tc: TrainConfig, d: distributed.Dist):
    """Refuse to start a fresh run on top of an existing one unless --overwrite=true: nothing is lost by accident.
    Every process checks before any of them deletes, so they all agree."""
    existing = [f for f in RUN_FILES if os.path.exists(os.path.join(tc.out_dir, f))]
    if existing and not tc.overwrite:
        raise SetupError(f"out_dir={tc.out_dir} already holds a run ({existing[0]}); pass --init_from=resume to "
                         f"continue it, --overwrite=true to replace it, or another --out_dir")
    distributed.barrier(d)
    if existing and d.master:
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


def hf_start(folder: str, model_overrides: dict, explicit: dict, tokenizer):
    """For --init_from=hf:FOLDER: a fresh run (step 0, new optimizer) from a local Hugging Face GPT-2's weights.
    The folder fixes the architecture; --dropout and --attn_impl are free."""
    from model.import_hf import check_same_tokenizer, load_hf_gpt2

    model = load_hf_gpt2(folder, **{k: v for k, v in model_overrides.items() if k in ("dropout", "attn_impl")})
    have = model.config.to_dict()
    for k, v in model_overrides.items():
        if k in explicit and have[k] != v:
            raise SetupError(f"--{k}={v} differs from the Hugging Face model's {k}={have[k]}; the folder fixes the "
                             f"architecture: drop the flag")
    check_same_tokenizer(folder, model.config.vocab_size, tokenizer)
    return model


def main(argv) -> None:
    if "--help" in argv or "-h" in argv:
        print(flags.help_text((TrainConfig, GPTConfig), PRESETS))
        return
    tc, model_overrides, explicit = configure(argv)
    d, device_name = distributed.init(tc.device, tc.backend)  # under torchrun: this process's rank and device
    try:
        train(tc, model_overrides, explicit, d, device_name)
    finally:
        distributed.shutdown(d)


def train(tc: TrainConfig, model_overrides: dict, explicit: dict, d: distributed.Dist, device_name: str) -> None:
    ckpt = None
    if tc.init_from == "resume":
        tc, ckpt = load_resume(tc, model_overrides, explicit)
    else:
        prepare_out_dir(tc, d)
    if d.master:
        checkpoint.remove_stale_temporaries(tc.out_dir)
    device = pick_device(device_name)
    dtype = pick_dtype(tc.dtype, device)

    # ---- data ----------------------------------------------------------------------------------------------------
    def prepared():
        return prepare(dataset=tc.dataset, input=tc.input, split=tc.split, tokenizer=tc.tokenizer,
                       bpe_vocab_size=tc.bpe_vocab_size, data_root=tc.data_root)
    if d.master:
        data_dir = prepared()  # rank 0 downloads and tokenizes; the others wait, then find it ready
    distributed.barrier(d)
    if not d.master:
        data_dir = prepared()
    meta = read_meta(data_dir)
    tokenizer = load_tokenizer(data_dir)
    masker = None
    if tc.masked_lm or tc.mask_token:
        tokenizer = with_mask_token(tokenizer)  # one more id: [MASK]
    if tc.masked_lm:
        masker = mlm.Masker(tokenizer.mask_id, tokenizer.vocab_size, tuple(tokenizer.special_ids), tc.mask_rate,
                        tc.mask_span)

    # ---- model and optimizer -------------------------------------------------------------------------------------
    torch.manual_seed(tc.seed)  # the same initial weights in every process
    if ckpt is not None:
        model = model_from_checkpoint(ckpt, device)
    elif tc.init_from.startswith("hf:"):
        model = hf_start(tc.init_from[len("hf:"):], model_overrides, explicit, tokenizer).to(device)
    else:
        model = GPT(GPTConfig(**{**model_overrides, "vocab_size": tokenizer.vocab_size})).to(device)
    cfg = model.config
    if ckpt is not None and ckpt["data_meta"].get("fingerprint") != meta.get("fingerprint"):
        raise SetupError(f"the data in {data_dir} is not the data this checkpoint was trained on; resume with the "
                         f"same --dataset/--input/--split/--tokenizer, or start a new --out_dir")
    if tc.fsdp and not d.enabled:
        raise SetupError("--fsdp=true shards the model over several processes: start it with torchrun "
                         "(torchrun --standalone --nproc_per_node=2 train.py ...)")
    if ckpt is not None and ckpt["train_config"].get("fsdp", False) != tc.fsdp:
        raise SetupError(f"this checkpoint was trained with fsdp={not tc.fsdp}; resume with --fsdp={not tc.fsdp}")
    if tc.fsdp:
        fsdp.shard(model)  # before the optimizer: it must hold the sharded parameters
    optimizer = make_optimizer(model, tc.learning_rate, tc.weight_decay, (tc.beta1, tc.beta2), device.type,
                               tc.optimizer, tc.muon_lr, tc.muon_momentum, tc.muon_ns_steps)
    start, best_val = 0, math.inf
    if d.enabled:
        torch.manual_seed(tc.seed + d.rank)  # different dropout masks in different processes
    if ckpt is not None:
        if tc.fsdp:
            fsdp.load_optimizer(model, optimizer, ckpt["optimizer"])
        else:
            optimizer.load_state_dict(ckpt["optimizer"])
        start, best_val = ckpt["step"], ckpt.get("best_val_loss", math.inf)
        states = ckpt["rng"]
        set_rng_state(states[d.rank % len(states)], device)  # each process continues its own random stream
    train_model = torch.compile(model) if tc.compile else model
    if d.enabled and not tc.fsdp:
        train_model = DDP(train_model, device_ids=[device.index] if device.type == "cuda" else None)
    # FSDP runs collectives inside every forward, so all processes must run the same forwards: each evaluates the
    # whole validation set and generates the same samples (only rank 0 prints them).
    everyone = d.master or tc.fsdp

    accum = tc.accumulation(cfg.block_size, d.world_size)
    train_data = TrainBatches(data_dir, cfg.block_size, tc.batch_size, tc.seed, rank=d.rank,
                              world_size=d.world_size, grad_accum=accum, device=device)
    val_share = (0, 1) if tc.fsdp else (d.rank, d.world_size)
    val_set = list(val_batches(data_dir, cfg.block_size, tc.batch_size, max_batches=tc.eval_iters, rank=val_share[0],
                               world_size=val_share[1], device=device))
    if masker is not None:  # the encoder's inputs and targets: one fixed mask, the same in every run
        val_set = [masker.validation(x, i) for i, (x, _) in enumerate(val_set)]
    val_bytes_per_token = meta["val_bytes"] / meta["val_tokens"]
    decay_iters = tc.lr_decay_iters or tc.max_iters
    tokens_per_step = tc.batch_size * accum * cfg.block_size * d.world_size  # over all processes

    @torch.no_grad()
    def evaluate() -> dict:
        """Mean loss over the fixed validation set; each process takes its share, the sums are added up."""
        model.eval()
        sums = torch.zeros(2, dtype=torch.float64, device=device)  # (sum of token losses, tokens)
        for x, y in val_set:
            with autocast(device, dtype):
                _, loss = model(x, y)  # the plain module: no gradient sync, no recompilation for eval mode
            n = int((y >= 0).sum())  # positions with a target (the encoder's are the masked ones)
            sums += torch.tensor([loss.item() * n, n], dtype=torch.float64, device=device)
        model.train()
        total, count = (sums if tc.fsdp else distributed.all_sum(sums, d)).tolist()
        val = total / count
        return {"val_loss": val, "val_bpb": val / math.log(2) / val_bytes_per_token, "val_ppl": math.exp(min(val, 50))}

    def sample(n_tokens: int) -> str:
        prompt = tokenizer.encode(tc.sample_prompt) or [0]
        g = torch.Generator(device=device).manual_seed(tc.seed)  # its own generator: training's RNG is untouched
        if masker is not None:  # the encoder appends [MASK] and predicts it, re-running the window each time
            new = list(mlm.generate_stream(model, prompt, n_tokens, masker.mask_id, temperature=0.8, top_k=200,
                                           generator=g))
            return tokenizer.decode(prompt + new)
        out = model.generate(torch.tensor([prompt], device=device), n_tokens, temperature=0.8, top_k=200,
                             generator=g, use_cache=cfg.causal)  # the cheater is bidirectional: no cache
        return tokenizer.decode(out[0].tolist())

    def save(step: int, best: bool) -> None:
        """Called by every process (they all hand in their RNG state); only rank 0 writes."""
        rng = distributed.gather_objects(rng_state(device), d)
        if tc.fsdp:
            weights, optim_state = fsdp.full_state(model, optimizer)  # gathers the shards: every process
        else:
            weights, optim_state = checkpoint.clean_state_dict(model), optimizer.state_dict()
        if not d.master:
            return
        state = {"model": weights, "optimizer": optim_state,
                 "model_config": cfg.to_dict(), "train_config": tc.to_dict(), "step": step, "best_val_loss": best_val,
                 "rng": rng, "data_dir": os.path.abspath(data_dir), "data_meta": meta, "variant": tc.model,
                 "mask_id": getattr(tokenizer, "mask_id", None)}
        last = os.path.join(tc.out_dir, CKPT_LAST)
        checkpoint.save_atomic(state, last)
        if best:
            shutil.copyfile(last, os.path.join(tc.out_dir, CKPT_BEST + ".tmp"))
            os.replace(os.path.join(tc.out_dir, CKPT_BEST + ".tmp"), os.path.join(tc.out_dir, CKPT_BEST))

    log = None
    if d.master:
        wandb_cfg = None
        if tc.wandb_log:
            wandb_cfg = {"project": tc.wandb_project, "name": tc.wandb_run_name,  # None: named from the config
                         "config": {**tc.to_dict(), **cfg.to_dict(), "params": model.num_params()}}
        log = MetricsLog(tc.out_dir, fresh=ckpt is None, wandb_cfg=wandb_cfg, resume_step=start)
        # MFU's denominator: this device's measured matmul FLOP/s, times the processes sharing tokens_per_step
        peak_flops = peak_matmul_flops(device, dtype) * d.world_size
        flops_per_token = model.flops_per_token()
        print(f"{tc.model}: {model.num_params() / 1e6:.2f}M parameters, {cfg.n_layer} layers x {cfg.n_head} heads x "
              f"{cfg.n_embd} wide, context {cfg.block_size}, pos_emb={cfg.pos_emb}, attn={cfg.attn_impl}"
              + (f", masked LM at {tc.mask_rate:.0%}" + (f" in spans of 1-{tc.mask_span}" if tc.mask_span > 1 else "")
                 if masker else "") + " | data: "
              f"{data_dir} ({meta['train_tokens']:,} train / {meta['val_tokens']:,} val {tc.tokenizer} tokens) | "
              f"{device.type} {str(dtype).replace('torch.', '')}, {tokens_per_step:,} tokens/step"
              + (f" over {d.world_size} processes" if d.enabled else ""), flush=True)

    # ---- the training loop ---------------------------------------------------------------------------------------
    model.train()
    t_start, t_last, tokens_seen, skipped = time.time(), time.time(), start * tokens_per_step, 0
    bar = tqdm(range(start, tc.max_iters), initial=start, total=tc.max_iters, unit="step", dynamic_ncols=True,
               mininterval=1.0, disable=not d.master)
    for step in bar:
        lr = lr_at(step, tc.learning_rate, tc.min_lr, tc.warmup_iters, decay_iters)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss_sum = torch.zeros((), device=device)
        for micro in range(accum):
            x, y = train_data.get(step, micro)
            if masker is not None:  # masked LM: corrupt the window, targets only at the selected positions
                x, y = masker(x, (tc.seed, step, micro, d.rank))
            with distributed.no_sync(train_model, skip=micro < accum - 1):  # sync gradients once per step
                with autocast(device, dtype):
                    _, loss = train_model(x, y)
                loss = loss / accum  # the accumulated gradient is the mean over micro-steps
                loss.backward()
            loss_sum += loss.detach()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip if tc.grad_clip > 0 else math.inf)
        if hasattr(grad_norm, "full_tensor"):  # FSDP: a DTensor
            grad_norm = grad_norm.full_tensor()
        done = step + 1
        # A NaN/inf anywhere in the loss or the backward shows up in the gradient norm (the same on every process).
        # One host sync per step buys never applying a poisoned update.
        if not math.isfinite(grad_norm.item()):
            if tc.on_nonfinite == "stop":
                raise SetupError(f"non-finite loss or gradient at step {done} (loss {loss_sum.item():.4g}); stopped "
                                 f"before updating, the last checkpoint is untouched: lower --learning_rate, or pass "
                                 f"--on_nonfinite=skip to skip such steps")
            skipped += 1
            bar.write(f"step {done}: non-finite gradient, update skipped ({skipped} so far)")
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        tokens_seen += tokens_per_step

        is_eval = done % tc.eval_interval == 0 or done == tc.max_iters
        if not (done % tc.log_interval == 0 or is_eval):
            continue
        train_loss = distributed.all_mean(loss_sum, d).item()
        now = time.time()
        tok_per_s = tokens_per_step * (done - max(start, done - tc.log_interval)) / max(now - t_last, 1e-9)
        t_last = now
        row = {"step": done, "train_loss": train_loss, "lr": lr, "grad_norm": grad_norm.item(),
               "tokens": tokens_seen, "elapsed_s": round(now - t_start, 3), "tok_per_s": round(tok_per_s, 1),
               "rss_mb": resident_mb(), "skipped_steps": skipped}
        if d.master:
            row["mfu"] = round(mfu(flops_per_token, tok_per_s, peak_flops), 5)
        bar.set_postfix(loss=f"{train_loss:.4f}", tok_s=f"{tok_per_s:,.0f}", refresh=False)
        if is_eval:
            row.update(evaluate())
            best = row["val_loss"] < best_val
            best_val = min(best_val, row["val_loss"])
            save(done, best)
            bar.write(f"step {done}: train {train_loss:.4f}, val {row['val_loss']:.4f} "
                      f"({row['val_bpb']:.3f} bits/byte, ppl {row['val_ppl']:.2f}), lr {lr:.2e}, "
                      f"{tok_per_s:,.0f} tok/s" + (" [best]" if best else ""))
            if tc.wandb_log and everyone:
                text = sample(tc.sample_tokens)
                maps = None
                if tc.wandb_attention_probe:  # a fixed probe line's attention maps (under FSDP every process runs it)
                    from visualize import attention_image  # here: matplotlib is slow to import

                    maps = attention_image(model, tokenizer, tc.wandb_attention_probe)
                if d.master:
                    log.log_samples(done, [text])
                    if maps is not None:
                        log.log_image(done, "attention/maps", maps, caption=tc.wandb_attention_probe)
        if d.master:
            log.log(row)
    bar.close()
    if d.master:
        print(f"done: {tc.max_iters} steps in {time.time() - t_start:.1f} s, best val loss {best_val:.4f}; "
              f"checkpoints in {tc.out_dir}/")
    if tc.sample_tokens and everyone:
        text = sample(tc.sample_tokens)
        if d.master:
            print("---- sample ----\n" + text + "\n----------------")
    if d.master:
        log.close()


if __name__ == "__main__":
    sys.exit(cli.run(main, sys.argv[1:]))
