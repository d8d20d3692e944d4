"""The bottom layer: what every command needs and nothing of ours below it.

errors.py (the UserError classes and need()), cli.py (how a command ends), flags.py (dataclass fields as
`--name=value` flags, presets, TOML), flag_scope.py (where each command's flags apply), device.py (device, dtype,
autocast, threads). Imports nothing of the project.
"""
