"""The catalog that prices a comparison (lab.compare.decision.choose_catalog), as a typed record:
the user's own (the bundle's without --catalog), every archive's own found and named, never chosen;
its one line (catalog_line)."""

from __future__ import annotations

import dataclasses

from lab.compare.comparison_records import CatalogChoice, CatalogFound
from lab.compare.decision import CATALOG_DEFAULT, catalog_line, choose_catalog
from lab.cost.forfaits import load_catalog
from tests.unit.test_compare_caveats import evidence


def test_the_bundles_catalog_prices_and_an_archives_own_is_only_found():
    bundle = load_catalog(None)
    rows = tuple(dataclasses.replace(r, catalog_version="1999-01-01") for r in bundle.rows)
    own = dataclasses.replace(bundle, rows=rows, path="a.tar.gz:report/catalog.csv", sha256="f" * 64)
    chosen, info = choose_catalog([dataclasses.replace(evidence("a"), catalog=own)], None)
    assert chosen.version == bundle.version and isinstance(info, CatalogChoice)
    assert (info.path, info.version, info.source, info.explicit) == (
        bundle.path, bundle.version, "the bundle's catalog", False)
    assert info.found == (CatalogFound("the bundle's catalog", bundle.version, info.sha256),
                          CatalogFound("a's own catalog", "1999-01-01", "f" * 64))
    line = catalog_line(info)
    assert line == (f"priced with catalog version {bundle.version} (sha256 {info.sha256[:16]}..., the bundle's "
                    f"catalog; {CATALOG_DEFAULT}); also found: a's own catalog: 1999-01-01")
