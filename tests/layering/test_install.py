"""Packaging as documented, statically: each extra carries what its code imports.

Every third-party package a layer imports (grimp's graph, lazy imports included) is a
requirement of the extras an install of that layer names, directly or through the requirements
of the installed distributions they pull in. The live checks (a built wheel installed into
fresh venvs) are in ``test_install_venv.py``.
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# measurement is its own distribution; its requirements name spectool[serve] and its additions
BENCH_PYPROJECT = tomllib.loads((ROOT / "bench" / "pyproject.toml").read_text())
BENCH = "spectool-bench"  # an "extra" of _closure: that distribution's own requirements
# layer: (extras its install names, import roots, modules left out, modules only (prefixes))
LAYERS = {
    # `pip install spectool`: the core less what the extras below own
    "core": (
        (),
        ["spectool"],
        (
            "spectool.drafters",
            "spectool.embedded",
            "spectool._quiet",
            "spectool._tracing",
            "spectool._otel_instrumentor",
        ),
        (),
    ),
    "serve": (("serve",), ["spectool_serving"], ("spectool_serving.vllm",), ()),  # [vllm]
    # the in-process drafter: model loading, grammar, adapters, int8, tuning
    "local": (("local",), ["spectool"], (), ("spectool.drafters", "spectool.embedded", "spectool._quiet")),
    "tracing": (("tracing",), ["spectool"], (), ("spectool._tracing", "spectool._otel_instrumentor")),
    # `pip install spectool-bench`: measurement runs on the layer it measures (the embedded engine,
    # the drafters: [serve] ⊇ [local]; docs/benchmark.md); what it adds (plots, BFCL's MathAPI) is its own
    BENCH: ((BENCH,), ["spectool_bench"], (), ()),
}
STDLIB = set(sys.stdlib_module_names)
# (module, distribution) imported only on a path another extra serves -> that extra. Checked in
# the layers whose install names that extra, skipped in the others.
ALLOWED = {
    ("spectool._model_cli", "matplotlib"): "bench",  # `spectool model figure`; else a missing-extra error
    # LocalDrafterOptions(runtime="llama.cpp"): opt-in, built from its sdist by the set-up
    ("spectool.drafters.local._llamacpp", "llama-cpp-python"): "llamacpp",
}
# import name -> distribution for what may not be installed here (an opt-in extra): without it
# an uninstalled package would be known only by its import name
NOT_INSTALLED = {"llama_cpp": "llama-cpp-python"}
# [bench]: the figures and fits spectool itself keeps (the ALLOWED modules above)
LAYERS["bench"] = (("bench", "serve"), ["spectool", "spectool_serving"], (), tuple(m for m, _ in ALLOWED))


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(*extras: str) -> set[str]:
    """Distributions an install of spectool[extras] brings, from the pyproject and the
    installed distributions' own requirements (markers evaluated, no extras beyond those named)."""
    optional = PYPROJECT["project"]["optional-dependencies"]
    todo = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    todo += [Requirement(r) for extra in extras if extra != BENCH for r in optional[extra]]
    if BENCH in extras:
        todo += [Requirement(r) for r in BENCH_PYPROJECT["project"]["dependencies"]]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = _norm(req.name)
        if name == "spectool":
            todo += [Requirement(r) for e in req.extras for r in optional[e]]
            continue
        if name in seen or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for r in map(Requirement, requires):
            if (
                not r.marker
                or r.marker.evaluate({"extra": ""})
                or any(r.marker.evaluate({"extra": e}) for e in req.extras)
            ):
                todo.append(r)
    return seen


def _imports(roots: list[str], skip: tuple[str, ...] = (), only: tuple[str, ...] = ()) -> dict[str, set[str]]:
    """Third-party distribution -> the modules (under ``roots``) that import it."""
    import grimp

    own = ("spectool", "spectool_serving")  # this repository's own packages, not third-party
    graph = grimp.build_graph(*dict.fromkeys([*roots, *own]), include_external_packages=True, cache_dir=None)
    dists = metadata.packages_distributions()
    ours = set(roots) | set(own)
    out: dict[str, set[str]] = {}
    for module in graph.modules:
        if (
            module.split(".")[0] in roots
            and not module.startswith(skip)
            and (not only or module.startswith(only))
        ):
            for target in graph.find_modules_directly_imported_by(module):
                top = target.split(".")[0]
                if top not in ours and top not in STDLIB:
                    for dist in dists.get(top, [NOT_INSTALLED.get(top, top)]):
                        out.setdefault(_norm(dist), set()).add(module)
    return out


def _missing(layer: str) -> dict[str, list[str]]:
    """What the layer imports that an install of its extras does not bring (-> a few importers)."""
    extras, roots, skip, only = LAYERS[layer]
    have = _closure(*extras)
    missing = {}
    # a namespace package (``opentelemetry``) has several distributions behind one import name:
    # grimp sees only the name, so any of them that the install brings provides it
    namespaces = [{_norm(d) for d in ds} for ds in metadata.packages_distributions().values() if len(ds) > 1]
    for dist, modules in _imports(roots, skip, only).items():
        # an ALLOWED import counts only in the layers whose install names the extra serving it
        counted = sorted(m for m in modules if (m, dist) not in ALLOWED or ALLOWED[m, dist] in extras)
        provided = dist in have or any(dist in ns and ns & have for ns in namespaces)
        if not provided and counted:
            missing[dist] = counted[:3]
    return missing


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_each_extra_installs_what_its_code_imports(layer):
    assert _missing(layer) == {}


@pytest.mark.parametrize("module, dist", sorted(ALLOWED))
def test_allowed_imports_are_real_and_their_extra_brings_them(module, dist):
    assert module in _imports([module.split(".")[0]], only=(module,)).get(dist, set())
    assert dist in _closure(ALLOWED[module, dist])


@pytest.mark.parametrize(
    "layer, extra, dropped",
    [
        # the bugs this test was written for: first [serve], then the drafter's own extra lacked xgrammar
        ("serve", "local", "xgrammar"),
        ("local", "local", "xgrammar"),
        # measurement's own additions are checked although the layer also names [serve]
        ("bench", "bench", "matplotlib"),
        ("core", None, "pydantic-settings"),
        # a namespace package: dropping every opentelemetry requirement leaves its import unprovided
        ("tracing", "tracing", "opentelemetry"),
        # spectool-bench's own additions, and the layer its requirement on spectool[serve] brings
        (BENCH, BENCH, "matplotlib"),
        (BENCH, BENCH, "torch"),
    ],
)
def test_the_check_catches_a_missing_requirement(monkeypatch, layer, extra, dropped):
    if extra == BENCH:
        bench = dict(BENCH_PYPROJECT["project"])
        # dropping torch: spectool-bench asks for plain spectool instead of spectool[serve]
        bench["dependencies"] = [
            "spectool" if r.startswith("spectool[") and dropped == "torch" else r
            for r in bench["dependencies"]
            if Requirement(r).name != dropped
        ]
        monkeypatch.setitem(BENCH_PYPROJECT, "project", bench)
        assert dropped in _missing(layer)
        return
    project = dict(PYPROJECT["project"])
    if extra is None:
        project["dependencies"] = [r for r in project["dependencies"] if Requirement(r).name != dropped]
    else:
        extras = dict(project["optional-dependencies"])
        extras[extra] = [r for r in extras[extra] if not Requirement(r).name.startswith(dropped)]
        project["optional-dependencies"] = extras
    monkeypatch.setitem(PYPROJECT, "project", project)
    assert any(dist.startswith(dropped) for dist in _missing(layer))
