"""Import graph of the repository's packages: import cycles between modules and between packages.

Usage (from the repository root):

    python scripts/import_graph.py            # packages lab and tui; exit 1 on a cycle
    python scripts/import_graph.py PKG ...    # other top-level packages importable from cwd

The graph is grimp's (the library import-linter is built on): every `import` statement of
every module, including imports inside functions and methods, and including imports under
`if TYPE_CHECKING:` (they are counted: a cycle that only type checking closes is still a
cycle in the design). External packages are left out. A cycle is a strongly connected
component of more than one module (Tarjan's algorithm); a module importing itself is not
reported.

The same graph is then read with packages as units (``package_of``: a top-level package's
direct child, so ``lab.passes.events`` counts as ``lab.passes`` and ``lab.cli`` as itself): two
packages that import each other through different modules (``lab.passes.runner`` ->
``lab.memory.peaks`` and ``lab.memory.feasibility`` -> ``lab.passes.events``) make no module
cycle and still tie the packages into one layer. Such a package cycle fails too.

Output: `modules: N`, then one line per cycle `cycle (M modules): a -> b -> ... -> a` (a
shortest import chain around the component through its first module), then `cycles: K`;
`packages: N`, one line per package cycle `package cycle (M packages): p -> q -> p (m1 -> n1;
m2 -> n2)` (one importing module pair per step), then `package cycles: K`.
Exit status: 0 no cycle, 1 at least one cycle (module or package), 2 a package cannot be found.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterable

import grimp

DEFAULT_PACKAGES = ("lab", "tui")


def strongly_connected_components(nodes: Iterable[str], successors: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (no recursion limit). Returns each component's modules, sorted."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(root, iter(sorted(successors.get(root, ()))))]
        index[root] = lowlink[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = lowlink[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(successors.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    lowlink[node] = min(lowlink[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                lowlink[parent] = min(lowlink[parent], lowlink[node])
            if lowlink[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def module_graph(packages: Iterable[str]) -> dict[str, set[str]]:
    """Direct imports between the packages' own modules: {importer: {imported, ...}}.

    Raises ModuleNotFoundError (from grimp) when a package cannot be found on sys.path.
    """
    graph = grimp.build_graph(*packages, include_external_packages=False,
                              exclude_type_checking_imports=False, cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) - {m} for m in graph.modules}


def cycles(successors: dict[str, set[str]]) -> list[list[str]]:
    """Components of more than one module, largest first."""
    found = [c for c in strongly_connected_components(successors, successors) if len(c) > 1]
    return sorted(found, key=lambda c: (-len(c), c))


def package_of(module: str) -> str:
    """The unit a module counts in at package level: the top-level package's direct child
    (``lab.report.html`` -> ``lab.report``; ``lab.cli`` -> ``lab.cli``; ``lab`` -> ``lab``)."""
    return ".".join(module.split(".")[:2])


def package_graph(successors: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph with each module replaced by ``package_of`` it (imports inside one
    package dropped): {package: {imported package, ...}}."""
    out: dict[str, set[str]] = {}
    for module, imported in successors.items():
        unit = package_of(module)
        out.setdefault(unit, set()).update(package_of(m) for m in imported)
        out[unit].discard(unit)
    return out


def witness(importer: str, imported: str, successors: dict[str, set[str]]) -> str:
    """One module of package ``importer`` importing one of package ``imported``: "m -> n"."""
    pairs = sorted((m, n) for m, ns in successors.items() if package_of(m) == importer
                   for n in ns if package_of(n) == imported)
    return f"{pairs[0][0]} -> {pairs[0][1]}" if pairs else "?"


def cycle_path(component: list[str], successors: dict[str, set[str]]) -> list[str]:
    """A shortest closed import chain through the component's first module (breadth first)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(successors[node] & members):
                if child == start:
                    back = []
                    step = node
                    while step != start:
                        back.append(step)
                        step = previous[step]
                    return [start, *reversed(back), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return [start, start]  # unreachable for a strongly connected component


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Import graph of the packages; exit 1 on an import cycle.")
    parser.add_argument("packages", nargs="*", default=list(DEFAULT_PACKAGES))
    args = parser.parse_args(argv)
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # packages are found from the current directory, as `python -m` does
    try:
        successors = module_graph(args.packages)
    except (ModuleNotFoundError, ValueError) as exc:
        print(f"import_graph: {exc} (run from the folder that holds the packages)", file=sys.stderr)
        return 2
    found = cycles(successors)
    print(f"modules: {len(successors)} in {', '.join(args.packages)} "
          f"(imports inside functions and under TYPE_CHECKING counted)")
    for component in found:
        print(f"cycle ({len(component)} modules): {' -> '.join(cycle_path(component, successors))}")
    print(f"cycles: {len(found)}")
    packages = package_graph(successors)
    found_packages = cycles(packages)
    print(f"packages: {len(packages)} (each top-level package's direct children as units)")
    for component in found_packages:
        path = cycle_path(component, packages)
        steps = "; ".join(witness(a, b, successors) for a, b in itertools.pairwise(path))
        print(f"package cycle ({len(component)} packages): {' -> '.join(path)} ({steps})")
    print(f"package cycles: {len(found_packages)}")
    return 1 if found or found_packages else 0


if __name__ == "__main__":
    sys.exit(main())
