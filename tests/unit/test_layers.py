"""The layers import only downward (README, "Layout"): a newcomer can read any package knowing only the ones below it.

    common (errors, cli, flags, device), configs  <-  model, data  <-  speed, inference  <-  training  <-  insight
    <-  interop, studies, benchmarks
    <-  the scripts (train.py, sample.py, evaluate.py, compare.py, bench.py, visualize.py, probe.py)

Every import statement counts, also one inside a function.
"""
import ast
import os

from conftest import ROOT

LAYERS = {"common": 0, "configs": 0, "model": 1, "data": 1, "speed": 2, "inference": 2, "training": 3, "insight": 4,
          "interop": 5, "studies": 5, "benchmarks": 5, "train": 6, "sample": 6, "evaluate": 6, "compare": 6,
          "bench": 6, "visualize": 6, "probe": 6}


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



def module_file(dotted: str) -> str | None:
    """The file that `import dotted` would run, in the repository, or None."""
    base = os.path.join(ROOT, *dotted.split("."))
    return next((p for p in (base + ".py", os.path.join(base, "__init__.py")) if os.path.isfile(p)), None)


def top_level_names(file: str) -> set:
    """The names a module defines at its top level: functions, classes, assignments (tuples unpacked), imports, and
    those its __all__ lists (a package that resolves them on first use, PEP 562)."""
    names = set()
    for top in ast.parse(open(file).read()).body:
        if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(top.name)
        elif isinstance(top, (ast.Assign, ast.AnnAssign)):
            for target in (top.targets if isinstance(top, ast.Assign) else [top.target]):
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
                if getattr(target, "id", None) == "__all__":
                    names |= {e.value for e in top.value.elts}
        elif isinstance(top, (ast.Import, ast.ImportFrom)):
            names |= {a.asname or a.name.split(".")[0] for a in top.names}
    return names


def test_every_import_of_the_project_names_a_module_that_exists():
    """Imports inside functions run only when their function does, so a moved or renamed module can hide in a path
    no test takes (a benchmark's option, an error branch): every one must name a file of the tree, and every name
    imported from a module must be defined there (or be one of its submodules)."""
    missing = []
    for package, path in project_modules():
        pkg = package if os.path.isdir(os.path.join(ROOT, package)) else ""
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = ".".join(filter(None, [pkg if node.level else "", node.module or ""]))
                targets = [(module, a.name) for a in node.names]
            else:
                continue
            for module, name in targets:
                if module.split(".")[0] not in LAYERS:
                    continue  # torch, numpy, the standard library
                where = f"{os.path.relpath(path, ROOT)}:{node.lineno}"
                file = module_file(module)
                if file is None:
                    missing.append(f"{where} imports {module}, which does not exist")
                elif name not in (None, "*") and not module_file(f"{module}.{name}") \
                        and name not in top_level_names(file):
                    missing.append(f"{where} imports {name} from {module}, which does not define it")
    assert not missing, "\n".join(missing)


def reached(script: str) -> set:
    """The project's top-level packages a script's imports reach, following every import (inside functions too)."""
    seen, todo = set(), [os.path.join(ROOT, script)]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        package = os.path.relpath(path, ROOT).split(os.sep)[0].removesuffix(".py")
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ImportFrom):
                base = ".".join(filter(None, [package if node.level else "", node.module or ""]))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            todo += [f for f in map(module_file, names) if f and f not in seen]
    return {os.path.relpath(p, ROOT).split(os.sep)[0].removesuffix(".py") for p in seen}


def test_sampling_reaches_no_training_code_and_the_model_no_speed_tricks():
    """sample.py runs a checkpoint without the training engine (the format is inference/checkpoint.py's); the
    model is the architecture alone: it knows nothing of speed/, inference/ or any file format."""
    assert "training" not in reached("sample.py")
    assert reached("model/gpt.py") <= {"model", "common"}



# a private torch function may change or go with any release: only the speed levers, the benchmarks and the compiled
# decoder (which drives torch.compile's internals) call one
PRIVATE_TORCH_ALLOWED = ("speed", "benchmarks", os.path.join("inference", "decode_step.py"))


def private_torch_uses(path: str):
    """(line, name) of every call of a torch attribute whose path has a private part (torch._foo(), torch.x._y())
    and every import of a private torch module, in the file."""
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Call):
            parts, target = [], node.func
            while isinstance(target, ast.Attribute):
                parts.append(target.attr)
                target = target.value
            name = ".".join([getattr(target, "id", "?"), *reversed(parts)])
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            name = getattr(node, "module", None) or ",".join(a.name for a in node.names)
        else:
            continue
        if name.startswith("torch.") and any(p.startswith("_") and not p.startswith("__") for p in name.split(".")):
            yield node.lineno, name


def test_private_torch_functions_are_called_only_by_the_speed_levers_benchmarks_and_the_compiled_decoder():
    wrong = []
    for _, path in project_modules():
        relative = os.path.relpath(path, ROOT)
        if not relative.startswith(PRIVATE_TORCH_ALLOWED):
            wrong += [f"{relative}:{line} {name}" for line, name in private_torch_uses(path)]
    assert not wrong, "private torch functions called:\n" + "\n".join(wrong)


def test_no_two_test_files_share_a_name():
    """pytest imports test files by their base name (tests/ has no packages): a second test_x.py stops collection."""
    names = [f for _, _, files in os.walk(os.path.join(ROOT, "tests")) for f in files
             if f.startswith("test_") and f.endswith(".py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
