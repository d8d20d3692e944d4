"""The layers import only downward (README, "Layout"): a newcomer can read any package knowing only the ones below it.

    common (errors, cli, flags, device)  <-  model, data  <-  insight  <-  training  <-  interop, studies, benchmarks
    <-  the scripts (train.py, sample.py, compare.py, bench.py, visualize.py, probe.py)

Every import statement counts, also one inside a function.
"""
import ast
import os

from conftest import ROOT

LAYERS = {"common": 0, "model": 1, "data": 1, "insight": 2, "training": 3, "interop": 4, "studies": 4,
          "benchmarks": 4, "train": 5, "sample": 5, "compare": 5, "bench": 5, "visualize": 5,
          "probe": 5}


def project_modules():
    for name in LAYERS:
        path = os.path.join(ROOT, name)
        if os.path.isdir(path):
            for file in sorted(os.listdir(path)):
                if file.endswith(".py"):
                    yield name, os.path.join(path, file)
        else:
            yield name, path + ".py"


def imported_packages(path: str, package: str):
    """(line, top-level package) of every import of the project in the file."""
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [package] if node.level else [node.module or ""]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in LAYERS:
                yield node.lineno, top


def test_imports_point_only_downward():
    wrong = []
    for package, path in project_modules():
        for line, target in imported_packages(path, package):
            if target != package and LAYERS[target] >= LAYERS[package]:
                wrong.append(f"{os.path.relpath(path, ROOT)}:{line} imports {target}")
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(wrong)


def test_every_package_is_placed_in_a_layer():
    packages = {d for d in os.listdir(ROOT) if os.path.isfile(os.path.join(ROOT, d, "__init__.py"))}
    scripts = {f[:-3] for f in os.listdir(ROOT) if f.endswith(".py")}
    assert packages | scripts <= set(LAYERS) | {"tests"}, (packages | scripts) - set(LAYERS)
