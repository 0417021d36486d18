"""An import-linter contract type: "outside a package, import only its public modules".

    [importlinter]
    contract_types =
        private: importlinter_private.PrivateModulesContract

    [importlinter:contract:public-only]
    type = private
    source_modules = spectool_bench
    owners = spectool

A module is private when any part of its name below the owner starts with ``_``
(``spectool._loop``, ``spectool.drafters.local._local``). Every direct import from a source module
(and its descendants) into an owner's private module, from outside that owner, breaks the
contract. The built-in contract types cannot say this: their wildcards replace whole names only,
so ``spectool._*`` is no expression, and a hand-typed list misses every new private module.
Indirect imports (through the owner's public modules) are the point of a public surface: allowed.
"""

from __future__ import annotations

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output


def _private_part(module: str, owner: str) -> bool:
    if not module.startswith(owner + "."):
        return False
    return any(part.startswith("_") for part in module[len(owner) + 1 :].split("."))


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


class PrivateModulesContract(Contract):
    type_name = "private"

    source_modules = fields.ListField(subfield=fields.StringField())
    owners = fields.ListField(subfield=fields.StringField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        sources = list(self.source_modules)  # type: ignore[call-overload]
        owners = list(self.owners)  # type: ignore[call-overload]
        for name in sources + owners:
            if name not in graph.modules:
                raise ValueError(f"module {name} is not in the graph")
        violations = []
        for importer in sorted(graph.modules):
            if not any(_inside(importer, s) for s in sources):
                continue
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                for owner in owners:
                    if _private_part(imported, owner) and not _inside(importer, owner):
                        lines = [
                            d["line_number"]
                            for d in graph.get_import_details(importer=importer, imported=imported)
                        ]
                        violations.append({"importer": importer, "imported": imported, "lines": lines})
        return ContractCheck(kept=not violations, metadata={"violations": violations})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for v in check.metadata["violations"]:
            lines = ", ".join(f"l.{n}" for n in v["lines"])
            output.print_error(f"{v['importer']} imports the private {v['imported']} ({lines})", bold=False)
            output.new_line()
