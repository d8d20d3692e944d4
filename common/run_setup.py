"""What train.py and sample.py both need: parsing their flags into configs, and rebuilding a model from a
checkpoint. One place, so the two scripts cannot drift apart."""
import os

import torch

from model import GPT, GPTConfig

from . import checkpoint, flags


def parse_configs(argv, classes, presets, default_preset=None):
    """Flags -> ({dataclass: {field: value}} from the preset, config file and flags,
    {field: value} of what the config file and flags set explicitly). Raises FlagError with one line."""
    argv = list(argv)
    if default_preset and not any(a.startswith("--preset") for a in argv):
        argv = [f"--preset={default_preset}"] + argv
    values, explicit = flags.parse(argv, classes, presets)
    owners = flags.field_types(*classes)
    per_class = {cls: {k: v for k, v in values.items() if owners[k][0] is cls} for cls in classes}
    return per_class, {k: values[k] for k in explicit}


def config_from_argv(argv, cls):
    """For a script whose flags are one dataclass: `--help` prints them and returns None; else the validated config."""
    if "--help" in argv or "-h" in argv:
        print(flags.help_text((cls,), {}))
        return None
    per_class, _ = parse_configs(argv, (cls,), {})
    return cls(**per_class[cls])


def model_from_checkpoint(ckpt: dict, device) -> GPT:
    model = GPT(GPTConfig.from_dict(ckpt["model_config"]))
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:
        raise checkpoint.CheckpointError(f"checkpoint weights do not fit its own config: "
                                         f"{str(e).splitlines()[0][:200]}") from None
    return model.to(device)


def rng_state(device) -> dict:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device) -> None:
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def find_checkpoint(out_dir: str, which: str = "last") -> str:
    """`which` is 'last', 'best' or a path to a .pt file."""
    if which in ("last", "best"):
        return os.path.join(out_dir, f"ckpt_{which}.pt")
    return which


def load_for_inference(path: str, device):
    """A checkpoint -> (model in eval mode on device, its tokenizer, the checkpoint dict)."""
    from data.tokenizer import load_tokenizer  # here, not at the top: tests of flags need no data code

    from data.mask_token import with_mask_token

    ckpt = checkpoint.load(path)
    model = model_from_checkpoint(ckpt, device).eval()
    tokenizer = load_tokenizer(ckpt["data_meta"], folder=ckpt.get("data_dir"))
    if ckpt.get("mask_id") is not None:  # an encoder, or a decoder trained beside one: [MASK] is in its vocabulary
        tokenizer = with_mask_token(tokenizer)
    return model, tokenizer, ckpt
