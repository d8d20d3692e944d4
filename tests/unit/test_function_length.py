"""Every function of the project's packages and scripts is a short page: at most 50 lines, from its `def` to its
last line, docstring included. The studies and benchmarks (experiments that run top to bottom) and the tests are
left out."""
import ast
import os
import tomllib

from conftest import ROOT

MAX_LINES = 50
NOT_CHECKED = {"studies", "benchmarks", "tests"}


def project_files():
    """The modules of the packages and the scripts pyproject.toml installs, as paths relative to the repository."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        setup = tomllib.load(f)["tool"]["setuptools"]
    yield from (f"{name}.py" for name in setup["py-modules"])
    for package in setup["packages"]:
        if package not in NOT_CHECKED:
            yield from (os.path.join(package, f) for f in sorted(os.listdir(os.path.join(ROOT, package)))
                        if f.endswith(".py"))


def long_functions(source: str, limit: int = MAX_LINES):
    """(line, name, lines) of every function or method in the source longer than limit lines."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                yield node.lineno, node.name, lines


def test_the_length_is_counted_from_def_to_the_last_line():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES - 1))
    assert list(long_functions("def f():\n" + body)) == []
    assert list(long_functions("class A:\n    def f(self):\n" + body.replace("    ", "        ") + "        y = 1\n")) \
        == [(2, "f", MAX_LINES + 1)]


def test_no_function_of_the_packages_and_scripts_is_longer_than_50_lines():
    files = list(project_files())
    assert {"train.py", "sample.py", os.path.join("training", "setup.py"), os.path.join("inference", "generate.py")} \
        <= set(files), files
    assert not any(f.startswith(tuple(NOT_CHECKED)) for f in files)
    wrong = [f"{f}:{line} {name} ({n} lines)" for f in files
             for line, name, n in long_functions(open(os.path.join(ROOT, f), encoding="utf-8").read())]
    assert not wrong, f"functions longer than {MAX_LINES} lines:\n" + "\n".join(wrong)
