"""Rules of the source that no linter checks: every import inside a function says why it waits, and no test
module imports another (shared builders live in `testkit/`). CONTRIBUTING.md states both."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("millrace", "pipeline", "mixtures", "loader", "trainer", "reports", "demo")
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
