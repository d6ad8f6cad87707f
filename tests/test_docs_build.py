"""The documentation site builds in strict mode, and its API reference
renders every public name of every public module.

A public module is `cvattn_keras` or a module under it whose dotted path has
no component starting with `_`; its public names are its `__all__`, or,
without one, the functions, classes and constants it defines (not those it
imports) whose names do not start with `_`. A name counts as rendered when
the inventory that mkdocstrings writes (`objects.inv`) holds an identifier
that ends with it and resolves to the same object, wherever it is rendered
(`cvattn_keras.layers.ComplexDense` for `cvattn_keras.layers.dense`'s).
"""

import ast
import importlib
import inspect
import os
import pkgutil
import subprocess
import sys
import zlib

import pytest

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocstrings")
pytest.importorskip("mkdocstrings_handlers.python")
pytest.importorskip("material")

import cvattn_keras  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD_TIMEOUT = 300


def public_modules():
    """`cvattn_keras` and its public modules, imported, by dotted path."""
    names = ["cvattn_keras"]
    for info in pkgutil.walk_packages(cvattn_keras.__path__, "cvattn_keras."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return {name: importlib.import_module(name) for name in names}


def _defined_names(module):
    """The names that `module`'s own top-level statements bind by a `def`,
    a `class` or an assignment (not by an import)."""
    names = []

    def visit(body):
        for node in body:
            if isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            ):
                names.append(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = getattr(node, "targets", None) or [node.target]
                for target in targets:
                    for leaf in ast.walk(target):
                        if isinstance(leaf, ast.Name):
                            names.append(leaf.id)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", ()):
                    visit(handler.body)
                visit(getattr(node, "finalbody", ()))

    visit(ast.parse(inspect.getsource(module)).body)
    return list(dict.fromkeys(names))


# Spelled without an underscore, but the library's own helpers, not its
# API (issue 31): the reference leaves them out, and fails if it shows
# them. The layers' methods and properties `ComplexConv1D.call_columns`,
# `ComplexDense.in_features`, `ComplexFrequencyFrontEnd.lengths` (the
# module-level helpers have an underscore).
INTERNAL = {"call_columns", "in_features", "lengths"}


def public_names(module):
    if hasattr(module, "__all__"):
        names = list(module.__all__)
    else:
        names = [n for n in _defined_names(module) if not n.startswith("_")]
    return [n for n in names if n not in INTERNAL]


def read_inventory(path):
    """`{identifier: {domain:role, ...}}` from a Sphinx inventory (v2): four
    header lines, then zlib-compressed `name domain:role priority uri
    dispname` lines."""
    with open(path, "rb") as f:
        data = f.read()
    header = data.split(b"\n", 4)
    assert header[0] == b"# Sphinx inventory version 2", header[0]
    inventory = {}
    for line in zlib.decompress(header[4]).decode("utf-8").splitlines():
        name, role = line.split(" ", 2)[:2]
        inventory.setdefault(name, set()).add(role)
    return inventory


_MISSING = object()


def resolve(identifier):
    """The object an inventory identifier names: the attribute path below
    its longest prefix that is an imported module (nothing is imported
    here), or `_MISSING`."""
    parts = identifier.split(".")
    for i in range(len(parts), 0, -1):
        obj = sys.modules.get(".".join(parts[:i]))
        if obj is None:
            continue
        try:
            for part in parts[i:]:
                obj = getattr(obj, part)
        except Exception:
            return _MISSING
        return obj
    return _MISSING


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site_dir = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict"]
        + ["--site-dir", str(site_dir)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    return result, site_dir


def _build_failed(result):
    return (
        f"`mkdocs build --strict` exited with {result.returncode}\n"
        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )


def test_docs_build_strict(site):
    result, _ = site
    assert result.returncode == 0, _build_failed(result)


def test_api_reference_is_complete(site):
    result, site_dir = site
    if result.returncode != 0:
        pytest.fail("the build failed (see test_docs_build_strict)")
    inventory = read_inventory(os.path.join(site_dir, "objects.inv"))
    by_last_name = {}
    for identifier in inventory:
        by_last_name.setdefault(identifier.rsplit(".", 1)[-1], []).append(
            identifier
        )

    missing = []
    for module_name, module in public_modules().items():
        if "py:module" not in inventory.get(module_name, ()):
            missing.append(f"module {module_name}")
        for name in public_names(module):
            obj = getattr(module, name, _MISSING)
            assert obj is not _MISSING, f"{module_name}.{name} does not exist"
            if not any(
                resolve(identifier) is obj
                for identifier in by_last_name.get(name, ())
            ):
                missing.append(f"{module_name}.{name}")
    assert not missing, (
        "Public names missing from the API reference (docs/api/*.md; an "
        "object without a docstring is not rendered):\n  "
        + "\n  ".join(missing)
    )


def test_api_reference_lists_public_names_only(site):
    """Every function, class and constant in the inventory is a public name
    of a public module (wherever it is rendered: under its defining
    module's path too), and every method or property belongs to one;
    nothing in `INTERNAL`."""
    result, site_dir = site
    if result.returncode != 0:
        pytest.fail("the build failed (see test_docs_build_strict)")
    inventory = read_inventory(os.path.join(site_dir, "objects.inv"))
    public = [
        getattr(module, name)
        for module in public_modules().values()
        for name in public_names(module)
    ]

    def is_public(obj):
        return any(obj is p for p in public)

    shown = []
    for identifier, roles in sorted(inventory.items()):
        if not identifier.startswith("cvattn_keras.") or not any(
            role.startswith("py:") and role != "py:module" for role in roles
        ):
            continue
        owner, name = identifier.rsplit(".", 1)
        if roles & {"py:method", "py:property", "py:attribute"}:
            public_here = is_public(resolve(owner)) and not name.startswith("_")
        else:
            public_here = is_public(resolve(identifier))
        if name in INTERNAL or not public_here:
            shown.append(identifier)
    assert not shown, (
        "Not public, yet in the API reference (docs/api/*.md, mkdocs.yml's "
        "filters):\n  " + "\n  ".join(shown)
    )
