"""Which Hugging Face architecture holds which of our models, both ways: export picks the class by our positions
(learned: GPT-2, interop/hf_gpt2.py; rope: GPT-NeoX, interop/hf_neox.py), import by the folder's model_type."""
from common.errors import UserError
from interop import hf_gpt2, hf_neox

BY_POSITIONS = {"learned": hf_gpt2, "rope": hf_neox}  # pos_emb -> the module mapping it to a transformers class
BY_MODEL_TYPE = {"gpt2": hf_gpt2, "gpt_neox": hf_neox}  # config.json's model_type -> the module that maps its weights


def hf_target(cfg, to: str | None = None):
    """The mapping module (hf_gpt2 or hf_neox) that expresses this config exactly; a one-line refusal otherwise,
    naming `to` as the target where given (else the class)."""
    target = BY_POSITIONS.get(cfg.pos_emb)
    if target is None:
        raise UserError(f"pos_emb='{cfg.pos_emb}' cannot be exported to Hugging Face: GPT-2 takes pos_emb='learned' "
                        f"and GPT-NeoX pos_emb='rope'")
    refusal = target.refusal(cfg, to) if to else target.refusal(cfg)
    if refusal:
        raise UserError(refusal)
    return target
