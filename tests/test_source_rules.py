"""Rules of the source that no linter checks: every import inside a function says why it waits, no function is
longer than a screen, and no test module imports another (shared builders live in `testkit/`). CONTRIBUTING.md
states them."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("millrace", "pipeline", "mixtures", "loader", "trainer", "reports", "demo")
SCREEN = 60  # lines, `def` to last line: the longest function the source allows
SCREENED = (*SHIPPED, "testkit", "bench", "tests")
LAZY = re.compile(r"#\s*lazy:\s*\S")
INDENTED_IMPORT = re.compile(r"^[ \t]+(import|from)[ \t]", re.MULTILINE)  # only such files need parsing


def _modules(*packages: str) -> list[Path]:
    return sorted(path for package in packages for path in (ROOT / package).rglob("*.py"))


def function_imports(source: str) -> list[ast.Import | ast.ImportFrom]:
    """The import statements inside a function (a method's included), in line order."""
    found = {
        (node.lineno, node.col_offset): node
        for function in ast.walk(ast.parse(source))
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.Import | ast.ImportFrom)
    }
    return [found[key] for key in sorted(found)]


def unexplained(source: str) -> list[int]:
    """Lines of function-level imports with no `# lazy: reason`: on the import's first line, or on the comment
    line just above it or above the run of imports it belongs to."""
    if not INDENTED_IMPORT.search(source):
        return []
    lines = source.splitlines()
    imports = function_imports(source)
    import_lines = {line for node in imports for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)}
    missing = []
    for node in imports:
        if LAZY.search(lines[node.lineno - 1]):
            continue
        above = node.lineno - 1
        while above in import_lines:  # an earlier import of the same run: the comment above the run covers it
            above -= 1
        if not (above >= 1 and lines[above - 1].strip().startswith("#") and LAZY.search(lines[above - 1])):
            missing.append(node.lineno)
    return missing


def test_every_function_level_import_says_why_it_waits():
    missing = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in _modules(*SHIPPED)
        for line in unexplained(path.read_text(encoding="utf-8"))
    ]
    assert not missing, "imports inside functions without a '# lazy: reason' comment:\n" + "\n".join(missing)


def test_the_rule_sees_a_bare_import_and_accepts_both_places_for_the_reason():
    source = (
        "def f():\n"
        "    import json\n"
        "    import torch  # lazy: heavy (torch)\n"
        "    # lazy: heavy (datatrove)\n"
        "    from datatrove import a\n"
        "    from datatrove import b\n"
        "\n"
        "    x = 1\n"
        "    import ray\n"
    )
    assert unexplained(source) == [2, 9]


def long_functions(source: str, screen: int = SCREEN) -> list[tuple[int, str, int]]:
    """(line, name, length) of each function longer than `screen` lines, from its `def` (decorators apart) to its
    last line; methods and nested functions included, each counted whole."""
    return [
        (node.lineno, node.name, length)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (length := (node.end_lineno or node.lineno) - node.lineno + 1) > screen
    ]


def test_no_function_is_longer_than_a_screen():
    long = [
        f"{path.relative_to(ROOT)}:{line} {name}: {length} lines"
        for path in _modules(*SCREENED)
        for line, name, length in long_functions(path.read_text(encoding="utf-8"))
    ]
    assert not long, f"functions over {SCREEN} lines (split them into named steps):\n" + "\n".join(long)


def test_the_length_rule_sees_a_long_function_method_or_command():
    def body(lines: int) -> str:
        return "".join(f"    x{i} = {i}\n" for i in range(lines))

    source = (
        "@click.command()\n"  # a decorator is not counted: the function starts at `def`
        "@click.option('--n')\n"
        f"def command(n):\n{body(59)}"  # 60 lines: allowed
        f"async def pump():\n{body(60)}"  # 61 lines
        "class Thing:\n"
        f"    def method(self):\n{body(59).replace('    ', '        ')}"  # 60 lines: allowed
        f"    def nested(self):\n        def inner():\n{body(60).replace('    ', '            ')}"
    )
    assert long_functions(source) == [(63, "pump", 61), (185, "nested", 62), (186, "inner", 61)]


def test_no_test_module_imports_another():
    wrong = []
    for path in _modules("tests"):
        source = path.read_text(encoding="utf-8")
        if not re.search(r"\b(import|from)\s+tests\b", source):
            continue
        for node in ast.walk(ast.parse(source)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            wrong += [
                f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names if n.split(".")[0] == "tests"
            ]
    assert not wrong, "shared builders go in testkit/:\n" + "\n".join(wrong)
