"""A module's tests are where a reader looks first: those of PACKAGE/MODULE.py in tests/unit/PACKAGE/test_MODULE.py,
those of a script (train.py) in tests/unit/test_train.py. A module whose tests are whole runs (real processes, files,
signals) is listed in END_TO_END with the tests/e2e/ files that run it instead.

pytest imports test files by their base name, so where two packages hold a module of one name (model/config.py,
data/config.py) the file is tests/unit/PACKAGE/test_PACKAGE_MODULE.py. A package's __init__.py is not asked for a
file of its own: its tests sit in its folder. studies/ and benchmarks/ are experiments, configs/ holds presets.
"""
import ast
import functools
import os
import re
import tomllib

from conftest import ROOT

NOT_WALKED = {"studies", "benchmarks", "configs"}

# module -> (what it does that only a whole run shows, the tests/e2e/ files that run it: each must import it or run a
# script whose imports reach it)
E2E = "tests/e2e/"
END_TO_END = {
    # the commands: processes with flags, files, exit statuses
    "train.py": ("trains and resumes a run", [E2E + "test_train_then_sample.py", E2E + "test_every_flag.py"]),
    "sample.py": ("samples from a checkpoint", [E2E + "test_sample_cli.py", E2E + "test_train_then_sample.py"]),
    "evaluate.py": ("scores a checkpoint or a Hugging Face model on tasks", [E2E + "test_evaluate_cli.py"]),
    "visualize.py": ("draws a checkpoint's attention", [E2E + "test_attention_pictures_from_a_run.py"]),
    "bench.py": ("runs the benchmarks", [E2E + "test_bench.py"]),
    # the memory of a training process
    "common/malloc.py": ("page faults of a training process", [E2E + "test_malloc.py"]),
}


@functools.cache
def walked_modules() -> list[str]:
    """The paths (relative to the root) of the packages' modules and the scripts that pyproject.toml installs."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        setup = tomllib.load(f)["tool"]["setuptools"]
    modules = [f"{script}.py" for script in setup["py-modules"]]
    for package in sorted(set(setup["packages"]) - NOT_WALKED):
        modules += [f"{package}/{f}" for f in sorted(os.listdir(os.path.join(ROOT, package)))
                    if f.endswith(".py") and f != "__init__.py"]
    return modules


def defines_code(path: str) -> bool:
    """Whether the module defines a function or a class at its top level (a script's main counts)."""
    tree = ast.parse(open(os.path.join(ROOT, path)).read())
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in tree.body)


def unit_test_files(path: str) -> list[str]:
    """Where the module's unit tests may be: tests/unit/PACKAGE/test_MODULE.py, or test_PACKAGE_MODULE.py."""
    package, _, file = path.rpartition("/")
    names = [f"test_{file}"] + ([f"test_{package}_{file}"] if package else [])
    if sum(m.endswith(f"/{file}") for m in walked_modules()) > 1:
        names.reverse()  # the name a reader looks for first where the base name alone is ambiguous
    return [os.path.join("tests", "unit", package, name) for name in names]


def has_test_file(path: str) -> bool:
    return any(os.path.isfile(os.path.join(ROOT, t)) for t in unit_test_files(path))


def module_file(dotted: str) -> str | None:
    """The file (relative to the root) that `import dotted` runs, if it is the project's."""
    base = os.path.join(*dotted.split("."))
    return next((p for p in (base + ".py", os.path.join(base, "__init__.py")) if os.path.isfile(os.path.join(ROOT, p))),
                None)


def imported_files(tree: ast.AST, package: str) -> set:
    """The project's files that the imports of a parsed file name (inside functions too)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(filter(None, [package if node.level else "", node.module or ""]))
            names += [base] + [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return {f for f in map(module_file, names) if f}


@functools.cache
def reached_by(test_file: str) -> set:
    """The project's files a test file runs: those it imports, the scripts it names ("train.py"), and every file
    their imports reach in turn."""
    tree = ast.parse(open(os.path.join(ROOT, test_file)).read())
    strings = " ".join(n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str))
    todo = list(imported_files(tree, "") | {s for s in re.findall(r"\b(\w+\.py)\b", strings)
                                             if os.path.isfile(os.path.join(ROOT, s))})
    seen = set()
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo += imports_of(path) - seen
    return seen


@functools.cache
def imports_of(path: str) -> set:
    """The project's files a project file imports."""
    package = path.split("/")[0] if "/" in path else ""
    return imported_files(ast.parse(open(os.path.join(ROOT, path)).read()), package)


def test_every_module_with_code_has_its_test_file_or_runs_end_to_end():
    missing = [f"{path}: {unit_test_files(path)[0]}" for path in walked_modules()
               if defines_code(path) and not has_test_file(path) and path not in END_TO_END]
    assert not missing, "modules without their unit test file (write it, or list the module in END_TO_END):\n" + \
        "\n".join(missing)


def test_the_end_to_end_list_names_modules_without_a_test_file_and_files_that_run_them():
    wrong = []
    for path, (_, runs) in END_TO_END.items():
        if path not in walked_modules():
            wrong.append(f"{path} is no module of the walked packages")
        elif has_test_file(path):
            wrong.append(f"{path} has its test file now: drop it from END_TO_END")
        for test_file in runs:
            if not os.path.isfile(os.path.join(ROOT, test_file)):
                wrong.append(f"{path}: {test_file} does not exist")
            elif path not in reached_by(test_file):
                wrong.append(f"{path}: {test_file} neither imports it nor runs a script that does")
    assert not wrong, "\n".join(wrong)
