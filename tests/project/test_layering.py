"""The import graph of bkaudit has no cycle between packages and no upward arrow.

Every module is parsed (no import runs): module-level imports, imports inside functions and `TYPE_CHECKING`
imports alike, since a function-level import is a dependency all the same. Each module belongs to a *unit*:
its package (`bkaudit.zk`), a top-level module (`bkaudit.config`), or `cli` for command-line modules (every
`commands` / `*_commands` module, and those in CLI_MODULES): a package's click commands sit on top of the
stack wherever they are filed, like `bkaudit.cli` itself.

LAYERS is the order, lowest first, after docs/architecture.md and DESIGN.md ("pure core, I/O at the edges"):
a unit may import its own layer (without a cycle) and the layers below, never one above. A new package must
be placed here (the test names it): that is the point of the table.
"""

from __future__ import annotations

import ast
import itertools
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "bkaudit"

FOUNDATION, CORE, IO, RUNTIME, SERVICES, JOBS, CLUSTER, TOP = range(8)
LAYERS: dict[str, int] = {
    # no bkaudit imports at all: errors, exit codes, process probing, logging and shutdown helpers
    "bkaudit": FOUNDATION,
    "bkaudit.errors": FOUNDATION,
    "bkaudit.exitcodes": FOUNDATION,
    "bkaudit.processes": FOUNDATION,
    "bkaudit.logs": FOUNDATION,
    "bkaudit.shutdown": FOUNDATION,
    # pure core: codecs, the ledger model and placement rules, the checks (no I/O; mypy strict)
    "bkaudit.formats": CORE,
    "bkaudit.model": CORE,
    "bkaudit.audit": CORE,
    # I/O edges, no domain rules: ZooKeeper, the bookie RPC clients, Delta tables, settings, metric exposition
    "bkaudit.zk": IO,
    # the cluster's coordination records behind one object (ZooKeeper, or memory for unit tests)
    "bkaudit.store": IO,
    "bkaudit.rpc": IO,
    "bkaudit.tables": IO,
    "bkaudit.config": IO,
    "bkaudit.exposition": IO,
    # the runtime that stores and writes entries: bookie server, ledger client
    "bkaudit.bookie": RUNTIME,
    "bkaudit.client": RUNTIME,
    # long-running services over the runtime: bookie lifecycle (drain), AutoRecovery (auditor, worker)
    "bkaudit.lifecycle": SERVICES,
    "bkaudit.autorecovery": SERVICES,
    # batch jobs: the job layer without Spark (job), Spark snapshot / checker, decommission what-if, metrics
    "bkaudit.job": JOBS,
    "bkaudit.spark": JOBS,
    "bkaudit.decommission": JOBS,
    "bkaudit.metrics": JOBS,
    # local clusters of real processes (ZooKeeper + bookies) for demos, tests, benchmarks
    "bkaudit.cluster": CLUSTER,
    # what operators run: the admin server, reports, the demo, the CLI
    "bkaudit.admin": TOP,
    "bkaudit.report": TOP,
    "bkaudit.demo": TOP,
    # seeded fault schedules on a local cluster, driving the checker through its CLI
    "bkaudit.chaos": TOP,
    "bkaudit.cli_common": TOP,
    "bkaudit.cli": TOP,
    "cli": TOP,
}

# command-line modules that are not called `commands`
CLI_MODULES = {
    "bkaudit.autorecovery.underreplicated",  # `bkaudit underreplicated`
    "bkaudit.spark.decommission",  # `bkaudit decommission-audit`: its click command with the Spark run
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(p): p
        for p in PACKAGE.rglob("*.py")
        if "proto" not in p.relative_to(PACKAGE).parts  # generated protobuf code
    }


def _imports(module: str, path: Path, known: set[str]) -> Iterator[str]:
    """Every bkaudit module `module` imports, wherever the import statement is, and every one it names to
    `importlib.import_module` (a back door the import statements would not show)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "import_module" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                and node.args[0].value.startswith("bkaudit")):
            yield node.args[0].value
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("bkaudit"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module if path.name == "__init__.py" else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{node.module}" if node.module else package
            else:
                base = node.module or ""
            if not base.startswith("bkaudit"):
                continue
            for alias in node.names:  # `from bkaudit import config` imports the module bkaudit.config
                sub = f"{base}.{alias.name}"
                yield sub if sub in known else base


def unit(module: str) -> str:
    leaf = module.rpartition(".")[2]
    in_package = module.count(".") >= 2
    if module in CLI_MODULES or (in_package and (leaf == "commands" or leaf.endswith("_commands"))):
        return "cli"
    return ".".join(module.split(".")[:2])


CATALOG = "bkaudit.config"
"""The settings catalog (`config.SECTIONS`) names every subsystem's section class and imports its `settings`
module when the section is first asked for. Those imports are the catalog, not a use of the layer above: the
graph leaves them out, and only them (test_the_catalog_reaches_only_settings_declarations holds what they
reach)."""


def _is_catalog_import(module: str, target: str) -> bool:
    return module == CATALOG and target.rpartition(".")[2] == "settings"


def _graph() -> dict[tuple[str, str], set[str]]:
    """(importing unit, imported unit) -> the importing modules (for the failure message)."""
    modules = _modules()
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for module, path in modules.items():
        for target in _imports(module, path, set(modules)):
            if _is_catalog_import(module, target):
                continue
            a, b = unit(module), unit(target)
            if a != b:
                edges[(a, b)].add(module)
    return edges


def test_every_unit_has_a_layer() -> None:
    units = {unit(m) for m in _modules()}
    assert sorted(units - set(LAYERS)) == [], "place new packages in LAYERS"


def test_no_upward_import() -> None:
    upward = [
        f"{a} (layer {LAYERS[a]}) -> {b} (layer {LAYERS[b]}) in {sorted(mods)}"
        for (a, b), mods in sorted(_graph().items())
        if a in LAYERS and b in LAYERS and LAYERS[a] < LAYERS[b]
    ]
    assert upward == []


def test_no_cycle_between_units() -> None:
    edges = _graph()
    succ: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        succ[a].add(b)
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(succ[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(succ):
        if node not in state:
            visit(node)
    def via(cycle: list[str]) -> str:
        return "; ".join(f"{a}->{b}: {sorted(edges[a, b])}" for a, b in itertools.pairwise(cycle))

    described = [" -> ".join(c) + "  via " + via(c) for c in cycles]
    assert described == []


def test_the_graph_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    """The checker itself: an import inside a function counts, relative imports resolve, and a module named to
    importlib.import_module is an import too (the bookie once reached AutoRecovery so)."""
    known = {"bkaudit.zk.client", "bkaudit.zk.paths", "bkaudit.config", "bkaudit.zk"}
    source = tmp_path / "ledgers.py"
    source.write_text(
        "from . import paths\n"
        "def f():\n    from bkaudit import config\n    import bkaudit.zk.client\n"
        "def g():\n    return importlib.import_module('bkaudit.autorecovery.service')\n"
    )
    assert sorted(_imports("bkaudit.zk.ledgers", source, known)) == [
        "bkaudit.autorecovery.service",
        "bkaudit.config",
        "bkaudit.zk.client",
        "bkaudit.zk.paths",
    ]
    assert unit("bkaudit.zk.commands") == "cli" and unit("bkaudit.zk.ledgers") == "bkaudit.zk"


def test_the_catalog_reaches_only_settings_declarations() -> None:
    """What the catalog imports above its layer is a plain declaration: a settings module that imports nothing
    above the catalog's layer but the catalog itself."""
    modules = _modules()
    reached = [t for t in _imports(CATALOG, modules[CATALOG], set(modules)) if _is_catalog_import(CATALOG, t)]
    assert len(reached) >= 10, reached
    heavy = [
        f"{module} -> {target}"
        for module in reached
        for target in _imports(module, modules[module], set(modules))
        if target != CATALOG and unit(target) != unit(module) and LAYERS[unit(target)] > LAYERS[unit(CATALOG)]
    ]
    assert heavy == []


DYNAMIC_IMPORT_ALLOWED = {"bkaudit/cli.py"}
"""Where a module may be imported by a name held in a variable: the CLI's lazy command map. Anywhere else
the layering tests could not see the import (importlib.resources and importlib.util.find_spec are no imports
of bkaudit modules and are allowed)."""


def _dynamic_imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__"):
                yield f"{name}() at line {node.lineno}"
        elif isinstance(node, ast.ImportFrom) and node.module == "importlib":
            yield from (f"from importlib import {a.name} at line {node.lineno}"
                        for a in node.names if a.name == "import_module")


def _dynamic_importers(root: Path) -> list[str]:
    return sorted(
        f"{path.relative_to(root)}: {found}"
        for top in ("bkaudit", "jobs")
        for path in (root / top).rglob("*.py")
        if str(path.relative_to(root)) not in DYNAMIC_IMPORT_ALLOWED
        for found in _dynamic_imports(path)
    )


def test_no_import_by_a_variable_name_outside_the_cli_map() -> None:
    assert _dynamic_importers(PACKAGE.parent) == [], "import it with an import statement"


def test_the_dynamic_import_check_finds_each_form(tmp_path: Path) -> None:
    (tmp_path / "bkaudit").mkdir()
    (tmp_path / "jobs").mkdir()
    (tmp_path / "bkaudit" / "cli.py").write_text("import importlib\nimportlib.import_module(name)\n")
    (tmp_path / "bkaudit" / "ok.py").write_text(
        "import importlib.util\nfrom importlib import resources\nimportlib.util.find_spec('pyspark')\n")
    (tmp_path / "bkaudit" / "a.py").write_text("import importlib\nimportlib.import_module(name)\n")
    (tmp_path / "jobs" / "b.py").write_text("from importlib import import_module\nimport_module(name)\n")
    (tmp_path / "jobs" / "c.py").write_text("mod = __import__(name)\n")
    assert _dynamic_importers(tmp_path) == [
        "bkaudit/a.py: import_module() at line 2",
        "jobs/b.py: from importlib import import_module at line 1",
        "jobs/b.py: import_module() at line 2",
        "jobs/c.py: __import__() at line 1",
    ]


# -- the cluster store's boundary --------------------------------------------------------------------------
RECORD_MODULES = {
    f"bkaudit.zk.{m}" for m in ("paths", "registry", "underreplication", "dataloss", "lifecycle")
}
"""Where ZooKeeper's znodes and record bytes are spelled out: private to bkaudit.store and zk itself."""


def test_only_the_store_spells_out_znodes() -> None:
    """No module outside bkaudit.store and bkaudit.zk imports a record module: fault injection damages
    znodes through `store.faults`, the local cluster and the demo read registrations through its store, the
    snapshot plans its scan in `store.zkscan`."""
    modules = _modules()
    importers = {
        module
        for module, path in modules.items()
        if not module.startswith(("bkaudit.zk", "bkaudit.store"))
        and RECORD_MODULES & set(_imports(module, path, set(modules)))
    }
    assert sorted(importers) == [], "go through bkaudit.store"


ROOT_PARAMETERS = {"root", "state_root", "ledgers_root"}
"""A ledgers root or bkaudit's state root: bound once in the store (or the resolved [zk] settings), never
passed along beside a client."""


Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, Function]]:
    """Every function and method under `node`, nested ones too, by qualified name."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}{child.name}", child
            yield from _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def _root_takers(module: str, source: str) -> set[str]:
    takers = set()
    for name, fn in _functions(ast.parse(source)):
        a = fn.args
        params = {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if p is not None}
        if params & ROOT_PARAMETERS:
            takers.add(f"{module}.{name}")
    return takers


def test_no_function_outside_the_store_takes_a_root() -> None:
    takers = {
        taker
        for module, path in _modules().items()
        if not module.startswith(("bkaudit.zk", "bkaudit.store"))
        for taker in _root_takers(module, path.read_text(encoding="utf-8"))
    }
    assert sorted(takers) == [], "take the store or the [zk] settings: they know it"


def test_the_root_scan_sees_methods_nested_functions_and_keyword_parameters() -> None:
    source = (
        "def plain(zk, ledgers_root): ...\n"
        "class C:\n"
        "    def method(self, *, state_root=None): ...\n"
        "    async def fine(self, store): ...\n"
        "def outer(store):\n"
        "    def inner(root, /): ...\n"
    )
    assert _root_takers("m", source) == {"m.plain", "m.C.method", "m.outer.inner"}


def _builds_a_zk_store(source: str) -> bool:
    return any(
        isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) == "ZkStore" or getattr(node.func, "attr", None) == "ZkStore")
        for node in ast.walk(ast.parse(source))
    )


def test_only_the_store_binds_a_zk_store_to_its_settings() -> None:
    """A ZkStore is built from `[zk]` in one place (`store.connect`, or `store.bind` on a session the caller
    owns): six hand-built ones had drifted apart in state root, ACL and layout."""
    builders = sorted(
        module
        for module, path in _modules().items()
        if not module.startswith("bkaudit.store") and _builds_a_zk_store(path.read_text(encoding="utf-8"))
    )
    assert builders == [], "use bkaudit.store.connect(settings) or bind(client, settings)"
    assert _builds_a_zk_store("from bkaudit import store\ns = store.ZkStore(zk, root='/x')\n")
    assert not _builds_a_zk_store("s = bind(zk, settings)\n")
