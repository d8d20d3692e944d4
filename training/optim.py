"""AdamW with weight decay on weight matrices only (or Muon for the blocks' matrices + AdamW). (The lr schedule they
follow is training/loop.py's lr_at.)

AdamW is torch's (`torch.optim.AdamW`, its fused kernel); Muon is training/muon.py. Decay pulls weights towards
zero; it helps on weight matrices (linear layers, embeddings, the learned attention scores' projections) and only
hurts biases and norm gains, which set scale and offset. Parameters are sorted by the role of the module that owns
them, not by their number of dimensions: an (H, A) tensor of H separate score vectors is not a matrix for Muon to
orthogonalise.

torch.optim's optimizers import torch._dynamo when they are built (~1 s, once per training process; sampling never
builds one): docs/speed.md, "The process".
"""
import torch

from common.errors import CheckpointError, ConfigError
from training import fsdp


OPTIMIZERS = ("adamw", "muon")


def roles(model) -> dict[str, list]:
    """Every trainable parameter once (a tied tensor under its first name), by role:
    'matrix' = the weight of a Linear layer inside a transformer block (Muon's share),
    'weight' = every other weight matrix (embeddings, an untied head, the learned score functions' projections),
    'gain' = biases and norm gains (never decayed); 'all' = every parameter, in the model's order."""
    from model.scores import AdditiveScore, BilinearScore  # the learned scores' parameters are all projections

    out, seen = {"matrix": [], "weight": [], "gain": [], "all": []}, set()
    for module_name, module in model.named_modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            if isinstance(module, torch.nn.Linear) and name == "weight":
                # GPT's blocks, or the encoder-decoder's two stacks (model/seq2seq.py)
                role = "matrix" if module_name.startswith(("blocks.", "encoder.", "decoder.")) else "weight"
            elif isinstance(module, (torch.nn.Embedding, AdditiveScore, BilinearScore)):
                role = "weight"
            else:
                role = "gain"
            out[role].append(p)
            out["all"].append(p)
    return out


def _adamw(decayed, rest, lr, weight_decay, betas):
    groups = [
        {"params": decayed, "weight_decay": weight_decay, "role": "decayed"},
        {"params": rest, "weight_decay": 0.0, "role": "not decayed"},
    ]
    # fused: one kernel over a group's parameters, several times faster than foreach ops on a CPU (docs/speed.md);
    # torch has it for every device a run trains on (CPU, CUDA, MPS)
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=lr, betas=betas, fused=True)


class Combined:
    """Several optimizers over disjoint parameters, driven as one: train.py sets every group's lr, steps, zeroes
    and checkpoints it like a single optimizer. param_groups is read from the parts each time: a part's
    load_state_dict replaces its group dicts, and a list kept from before would send the lr schedule to dead copies.
    Not a torch.optim.Optimizer: a torch scheduler drives each part (parts["adamw"], parts["muon"])."""

    def __init__(self, **parts):
        self.parts = parts  # name -> torch.optim.Optimizer

    @property
    def param_groups(self) -> list[dict]:
        return [g for opt in self.parts.values() for g in opt.param_groups]

    _step_supports_amp_scaling = True  # as its parts (fused AdamW, Muon): GradScaler sets found_inf here

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():  # once: its backward fills every part's gradients
                loss = closure()
        flags = {name: getattr(self, name) for name in ("found_inf", "grad_scale") if hasattr(self, name)}
        for opt in self.parts.values():
            _step_with(opt, flags)  # one verdict for all: a step skipped in one part is skipped in every part
        return loss

    def zero_grad(self, set_to_none: bool = True):
        for opt in self.parts.values():
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {name: opt.state_dict() for name, opt in self.parts.items()}

    def load_state_dict(self, state: dict) -> None:
        check_kind(self, state)
        for name, opt in self.parts.items():
            opt.load_state_dict(state[name])


def _step_with(optimizer, flags: dict) -> None:
    """optimizer.step() with flags ({"found_inf": ..., "grad_scale": ...}) set on it as GradScaler sets them, and
    removed after, as GradScaler removes them."""
    for name, value in flags.items():
        setattr(optimizer, name, value)
    try:
        optimizer.step()
    finally:
        for name in flags:
            delattr(optimizer, name)


def step_or_skip(optimizer, skip: torch.Tensor) -> None:
    """optimizer.step(), except where skip (a 0-d bool tensor) is True: then no parameter and no optimizer state
    (moments, momentum, step counts) changes. The optimizer gets skip as the float16 scaler hands it its overflow
    flag (found_inf; fused AdamW, Muon and Combined take it), so the verdict is never read back to the host."""
    _step_with(optimizer, {"found_inf": skip.to(torch.float32)})


def optimizer_name(x) -> str | None:
    """'muon' or 'adamw': which --optimizer made this optimizer, or this state dict of one (None: neither)."""
    if isinstance(x, Combined) or (isinstance(x, dict) and set(x) == {"adamw", "muon"}):
        return "muon"
    if isinstance(x, torch.optim.Optimizer) or (isinstance(x, dict) and "param_groups" in x):
        return "adamw"
    return None


def check_kind(optimizer, state) -> None:
    """A state of the other --optimizer's kind (or none at all) is the checkpoint's mistake: one line, either way."""
    saved, ours = optimizer_name(state), optimizer_name(optimizer)
    if saved is None:
        raise CheckpointError("the checkpoint holds no optimizer state this code can read: it is corrupt, or was not "
                              "written by a training run; start a new --out_dir")
    if saved != ours:
        raise CheckpointError(f"the checkpoint holds a --optimizer={saved} state, and this run's optimizer is "
                              f"{ours}: resume with the --optimizer it was trained with, or start a new --out_dir")


def load_state(optimizer, state: dict, load=None) -> None:
    """Restore a checkpoint's optimizer state (moments, momentum buffers, step counts) but keep the hyperparameters
    this run was configured with: load_state_dict would bring back the checkpoint's weight_decay, betas, Muon
    momentum and lr_scale, silently ignoring the flags a resumed run was given. `load`: how to load (FSDP's)."""
    check_kind(optimizer, state)
    try:
        (load or optimizer.load_state_dict)(configured(optimizer, state))
    except CheckpointError:
        raise
    except (KeyError, ValueError) as e:  # the file's groups or entries do not fit this model's parameters
        raise CheckpointError(f"the checkpoint's optimizer state does not fit this model's parameters ({e}); the "
                              f"file is corrupt or not ours") from None


def configured(optimizer, state: dict) -> dict:
    """state with each parameter group's settings replaced by this optimizer's (its parameter list kept). Before
    loading, not after: torch's load_state_dict places the state by the group's settings (fused AdamW keeps its
    step counts on the parameter's device), and a state written before this project used torch's AdamW carries
    none of them (fused, foreach, amsgrad...)."""
    if isinstance(optimizer, Combined):
        return {name: configured(part, state[name]) for name, part in optimizer.parts.items()}
    saved = state["param_groups"]
    groups = [{**ours, "params": group["params"]} for group, ours in zip(saved, optimizer.param_groups)]
    return {**state, "param_groups": groups + saved[len(groups):]}  # a count that differs: load_state_dict refuses


def make_optimizer(model, lr, weight_decay, betas, optimizer="adamw", muon_lr=0.02, muon_momentum=0.95,
                   muon_ns_steps=5, matmul_dtype=torch.float32):
    """optimizer='adamw': AdamW on everything (decay on weight matrices). 'muon': Muon (training/muon.py) on the
    Linear weights inside the transformer blocks, at muon_lr (following the same schedule as lr); AdamW at lr on the
    rest (embeddings, the head, gains, biases). matmul_dtype: training's autocast dtype; Muon orthogonalises in bf16
    when it is bf16 (the hardware multiplies bf16 natively), else in float32."""
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"optimizer={optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
    by_role = roles(model)
    if optimizer == "adamw":
        matrices = {id(p) for p in by_role["matrix"] + by_role["weight"]}  # in the model's order, as checkpoints expect
        decayed = [p for p in by_role["all"] if id(p) in matrices]
        return _adamw(decayed, by_role["gain"], lr, weight_decay, betas)
    from .muon import Muon

    # group["lr"] holds the schedule's lr in every group; Muon steps by lr * lr_scale = muon_lr at the peak
    muon = Muon(by_role["matrix"], lr=lr, momentum=muon_momentum, weight_decay=weight_decay, lr_scale=muon_lr / lr,
                ns_steps=muon_ns_steps, ns_dtype=torch.bfloat16 if matmul_dtype == torch.bfloat16 else torch.float32)
    return Combined(adamw=_adamw(by_role["weight"], by_role["gain"], lr, weight_decay, betas), muon=muon)


def optimizer_and_scaler(tc, model, device, dtype, ckpt=None) -> tuple:
    """A run's (optimizer, loss scaler), from its TrainConfig tc; a resumed run's take up the checkpoint ckpt's
    states (resume). float16 needs loss scaling: its smallest normal number is 6e-5, and with a large vocabulary
    most of the logits' gradients are smaller. The scaler multiplies the loss before backward, unscales before
    clipping, and skips (and halves the scale) on an overflow. bfloat16 has float32's range and needs none: its
    scaler is disabled (a no-op)."""
    optimizer = make_optimizer(model, tc.learning_rate, tc.weight_decay, (tc.beta1, tc.beta2),
                               tc.optimizer, tc.muon_lr, tc.muon_momentum, tc.muon_ns_steps, matmul_dtype=dtype)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    if ckpt is not None:
        resume(optimizer, scaler, ckpt, model, sharded=tc.fsdp)
    return optimizer, scaler


def resume(optimizer, scaler, ckpt, model, sharded: bool = False) -> None:
    """A resumed run takes up its checkpoint's optimizer state (load_state: this run's settings kept) and loss
    scaler's. sharded (--fsdp): the optimizer holds the model's shards, and FSDP's own function loads them."""
    load_state(optimizer, ckpt.optimizer,
               (lambda state: fsdp.load_optimizer(model, optimizer, state)) if sharded else None)
    if ckpt.scaler and scaler.is_enabled():
        scaler.load_state_dict(ckpt.scaler)
