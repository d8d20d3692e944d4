"""speed/__init__.py: the levers' flags, as --help tells them."""
from dataclasses import fields, replace

from common.flags import field_docs
import speed
from speed import SpeedConfig


def test_help_says_which_levers_cuda_chooses_when_no_flag_does():
    """On CUDA a lever no flag sets is replaced (for_device); --help showed the CPU values (a preset's: attn_impl=math)
    as the values a run uses, without a word. The levers' heading names each one CUDA chooses, with its value."""
    heading = field_docs(SpeedConfig)["attn_impl"][0]
    for f in fields(SpeedConfig):
        values = getattr(speed, f"{f.name.upper()}S")  # each value a flag could give, set by none: what CUDA runs
        on_gpu = {getattr(speed.for_device(replace(SpeedConfig(), **{f.name: v}), {}, "cuda"), f.name) for v in values}
        if on_gpu != set(values):  # CUDA chooses one
            assert len(on_gpu) == 1 and f"{f.name}={on_gpu.pop()}" in heading, (f.name, heading)
        else:  # CUDA runs what was chosen
            assert f"{f.name}=" not in heading, (f.name, heading)
    assert speed.for_device(SpeedConfig(attn_impl="math"), {"attn_impl": "math"}, "cuda").attn_impl == "math"
