"""Files of a comparison: compare.csv (one row per archive x variant), decision.md, report.html.

Empty cell = not measured or not priced; the row's ``exclusions``/``cards_note`` say why
(SPEC 3.10).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lab.compare.decision import (
    Comparison,
    HostAgreement,
    agreement_text,
    catalog_line,
    ids_clause,
    same_result_clause,
)
from lab.compare.evidence import NO_PACKAGE
from lab.compare.projection import Projection
from lab.cost.forfaits import money
from lab.passes.records import SETUP_PHASES
from lab.report.caveats import rests_on
from lab.report.condition_cells import starved_text
from lab.report.decision_note import output_tokens_text

AGREEMENT_COLUMNS = ("agreement_vs", "agreement_ids", "agreement_differing", "agreement_share",
                     "agreement_lowest_cosine", "agreement_max_differing", "agreement_min_cosine", "agreement_ok")
"""compare.csv's agreement rule across rentals as numbers (lab.compare.decision.agreement_pairs), one
value per other host sharing the row's variant, space-separated in ``same_result``'s order (the
host tags in ``agreement_vs`` joined by "; "): ids compared, ids that differ, their share, the lowest
per-id cosine (embeddings), the rule, its verdict. Empty when no other host has the variant."""
CSV_COLUMNS = ("banner", "host", "archive", "hardware", "threads", "gpu_priced", "variant_id", "variant_label",
               "accepted", "verdict", "successes", "failures", "failure_kinds", "durations_s",
               "median_s", "min_s", "max_s", "items_per_s_median", "items_per_s_worst",
               "setup_s", "cards_measured", "cards_note", "archive_package",
               "archive_committed_budget", "cost_per_validated_corpus", "currency",
               "load_items", "hours_median", "hours_worst", "package_days", "package_lots",
               "package_cards", "hours_per_lot_worst", "hours_allowed", "committed_budget",
               "cost_per_million_items", "eligible", "chosen", "exclusions", "caveats", "durations_caveat",
               "metric_name", "metric_median", "metric_min", "metric_max", "reference_label",
               "reference_metric_median", "metric_gap_to_reference", "same_result", *AGREEMENT_COLUMNS,
               "items_per_pass", "extrapolation", "long_passes", "min_window_s",
               "min_accepted_passes", "too_short", "catalog_version", "catalog_sha256",
               "archive_catalog_version", "price_note", "starved_passes", "output_tokens",
               "output_tokens_per_s_median", "output_tokens_at_load", "cost_per_item",
               "cost_per_million_output_tokens", "tokens_note")


def _rate(x: float | None) -> float | None:
    """items/s at the raw table's precision (4 decimals)."""
    return None if x is None else round(x, 4)


def _money(x) -> float | None:
    return None if x is None else float(x)


def projection_row(p: Projection, c: Comparison | None = None) -> dict:
    """One compare.csv row. ``c`` adds what the comparison knows beyond the row: the banner
    (partial evidence, passes too short allowed), the catalog that priced the decision, and the
    row's per-id agreement with the same variant on the other hosts."""
    q, s = p.archive_quote, p.sizing
    agree = [x for x in (c.agreements if c else ()) if x.variant_id == p.variant_id and p.host in (x.a, x.b)]
    own = next((a for a in (c.archives if c else ()) if a.host == p.host), None)
    return {
        "banner": " | ".join(c.banners) if c else "",
        "host": p.host, "archive": p.archive, "hardware": p.hardware, "threads": p.threads, "gpu_priced": p.gpu,
        "variant_id": p.variant_id, "variant_label": p.label, "accepted": p.accepted,
        "verdict": p.verdict, "successes": p.successes, "failures": p.failures,
        "failure_kinds": " ".join(p.failure_kinds),
        "durations_s": " ".join(f"{d:.3f}" for d in p.durations_s),
        "median_s": p.median_s, "min_s": p.min_s, "max_s": p.max_s,
        "items_per_s_median": _rate(p.items_per_s_median),
        "items_per_s_worst": p.items_per_s_worst,
        "setup_s": p.setup_s, "cards_measured": p.cards_measured, "cards_note": p.cards_note,
        "archive_package": f"{q.days} days x {q.lots} lot(s) of {q.cards_per_lot} card(s)" if q else None,
        "archive_committed_budget": _money(q.committed_budget) if q else None,
        "cost_per_validated_corpus": _money(p.cost_per_validated_corpus),
        "currency": (s.quote.currency if s else q.currency if q else None),
        "load_items": p.load_items, "hours_median": p.hours_median, "hours_worst": p.hours_worst,
        "package_days": s.quote.days if s else None, "package_lots": s.quote.lots if s else None,
        "package_cards": s.quote.total_cards if s else None,
        "hours_per_lot_worst": s.hours_needed if s else None,
        "hours_allowed": s.hours_allowed if s else None,
        "committed_budget": _money(s.quote.committed_budget) if s else None,
        "cost_per_million_items": _money(p.cost_per_million_items),
        "eligible": p.eligible,
        "chosen": (c.chosen is not None and p.key == c.chosen.key) if c else None,  # the decision's row
        "exclusions": "; ".join(p.exclusions), "caveats": rests_on([p.basis]),
        "durations_caveat": p.durations_caveat,
        "metric_name": p.metric_name, "metric_median": p.metric_median, "metric_min": p.metric_min,
        "metric_max": p.metric_max, "reference_label": p.reference_label,
        "reference_metric_median": p.reference_metric_median, "metric_gap_to_reference": p.metric_gap,
        "same_result": "; ".join(
            f"vs {x.other(p.host)}: {ids_clause(x)}, {same_result_clause(x)}" for x in agree),
        **agreement_cells(p.host, agree),
        "items_per_pass": p.items_per_pass, "extrapolation": p.extrapolation,
        "long_passes": p.long_passes, "min_window_s": p.min_window_s,
        "min_accepted_passes": p.min_accepted_passes, "too_short": p.too_short,
        "catalog_version": c.catalog.version if c and c.catalog else None,
        "catalog_sha256": c.catalog.sha256 if c and c.catalog else None,
        "archive_catalog_version": own.catalog_version if own else None, "price_note": p.price_note,
        "starved_passes": " ".join(x.pass_id for x in p.starved_passes),
        "output_tokens": p.output_tokens,
        "output_tokens_per_s_median": (None if p.output_tokens_per_s_median is None
                                       else round(p.output_tokens_per_s_median, 4)),
        "output_tokens_at_load": p.output_tokens_at_load, "cost_per_item": _money(p.cost_per_item),
        "cost_per_million_output_tokens": _money(p.cost_per_million_output_tokens), "tokens_note": p.tokens_note,
    }


def agreement_cells(host: str, pairs: list[HostAgreement]) -> dict:
    """A compare.csv row's AGREEMENT_COLUMNS from its agreement_pairs entries ``pairs`` (``host``:
    the row's host): one value per pair, space-separated; None when there is no pair."""
    if not pairs:
        return dict.fromkeys(AGREEMENT_COLUMNS)

    def cells(values) -> str | None:
        return " ".join("" if v is None else str(v) for v in values).strip() or None

    return {"agreement_vs": "; ".join(x.other(host) for x in pairs),
            "agreement_ids": cells(x.ids for x in pairs), "agreement_differing": cells(x.flips for x in pairs),
            "agreement_share": cells(x.share for x in pairs),
            "agreement_lowest_cosine": cells(x.cosine_worst for x in pairs),
            "agreement_max_differing": cells(x.max_differing for x in pairs),
            "agreement_min_cosine": cells(x.min_cosine for x in pairs),
            "agreement_ok": cells(x.agreement_ok for x in pairs)}


def comparison_table(c: Comparison) -> pd.DataFrame:
    return pd.DataFrame([projection_row(p, c) for p in c.projections], columns=list(CSV_COLUMNS))


def _h(x) -> str:
    return "not measured" if x is None else f"{x:.2f} h"


def decision_markdown(c: Comparison) -> str:
    """decision.md: the decision and its motivation first, then the rows, then the rules."""
    out = ["# Comparison of rentals" + (": " + " | ".join(c.banners) if c.banners else ""), ""]
    if c.ran:  # the user's own code: the outputs judged and priced are that code's
        out += [f"**What ran.** {c.ran[0].upper()}{c.ran[1:]}", ""]
    if c.load_items is None:  # server archives without --load: the serving part is the decision
        out += ["No --load was given: no offline configuration is projected; the decision is the serving "
                "part's, for the traffic the campaign declares.", ""]
    elif c.chosen is None:
        out += ["**Decision: none.** " + "; ".join(c.motivation) + ".", ""]
    else:
        p, sizing = c.chosen, c.chosen.sizing
        assert sizing is not None  # a chosen configuration is one that was sized
        q = sizing.quote
        out += [f"**Decision: host {p.host} ({p.hardware}, archive {p.archive}), {p.label}: "
                f"{q.days}-day package x "
                f"{q.lots} lot(s) of {q.gpu_name} ({q.total_cards} card(s)), committed budget "
                f"{q.committed_budget:.2f} {q.currency}, covering the declared load of "
                f"{c.load_items} items.**" + (f" {cav[0].upper()}{cav[1:]}." if (cav := rests_on([p.basis])) else ""),
                "",
                f"**Quality.** {p.quality_text()}; {c.stands_on}.", "",
                "**Motivation.** " + "; ".join(c.motivation) + ".", ""]
        out += [f"- {line}." for line in c.per_host]
        out += [f"- Package sizing, per lot ({q.lots} lot(s), each {1 / q.lots:.0%} of the load, at "
                f"the worst pass): {_h(sizing.hours_needed)} of {_h(sizing.hours_allowed)} allowed.",
                f"- The whole load on one lot: {_h(p.hours_median)} at the median pass, "
                f"{_h(p.hours_worst)} at the worst pass (without setup).",
                f"- Projection: {p.spread_text()}.",
                f"- Cost per million items: {p.cost_per_million_items:.2f} {q.currency}.",
                *[f"- {line}." for line in tokens_lines(p)],
                f"- {p.cards_note}.", ""]
    if c.catalog is not None:
        out += [f"- Prices: {catalog_line(c.catalog)}."]
        out += [f"- {x.host}: {x.price_note}." for x in _first_per_host(c.projections) if x.price_note]
        out += [""]
    if c.serving is not None:
        out += ["## Serving: which package holds the declared traffic", "", *c.serving.lines(), ""]
    out += ["## What would change the decision", ""]
    out += [f"- {line}" for line in c.what_would_change] or ["- nothing computed (no choice)"]
    out += ["", "## Declared load and calendar", "",
            f"- Load: {c.load_items} items of the corpus's mix." if c.load_items is not None else
            "- Load: none given (--load): the offline configurations are not projected.",
            f"- Window start: {c.window_start.isoformat()}; deadline: "
            f"{c.deadline.isoformat() if c.deadline else 'none given'}"
            + (f" ({c.hours_available:.2f} h available)" if c.hours_available is not None else ""),
            f"- Packages considered: every package of the catalog for the archive's GPU, 1 to "
            f"{c.max_lots} lots; catalog {c.catalog_path}.",
            "- k lots are k rentals each processing 1/k of the load at the worst measured pass's "
            f"throughput, after the largest measured setup (its phases {', '.join(SETUP_PHASES)}).", "",
            "## Archives", ""]
    for a in c.archives:
        k = a.cost
        package = (f"package in its [cost]: {k.gpu} {k.days} days x {k.lots} lot(s)" if k
                   else f"not priced: {NO_PACKAGE}")
        out.append(f"- {a.host}: `{a.name}`: {a.hardware}, driver {a.driver}, threads {a.threads}, "
                   f"{package}; verified ({a.files_checked} files), {a.signature}")
    ident = c.identity
    if ident.two_models:
        out += ["", f"**Two models compared, not two rentals of one question** ({'; '.join(ident.two_models)}). "
                f"Same corpus (sha256 `{ident.corpus_sha256}`), same quality and timing rules: checked before "
                "comparing.", ""]
    else:
        out += ["", f"Same corpus (sha256 `{ident.corpus_sha256}`), same model files, same quality "
                "and timing rules: checked before comparing.", ""]
    if ident.missing:
        out += [f"- Not in every archive (projected where measured, not compared across hosts): {k}: {', '.join(v)}"
                for k, v in ident.missing.items()] + [""]
    out += ["## Same ML result?", "",
            "Per host: the metric of the passes (median and range) and its gap to the archive's "
            "reference variant. Across hosts, same variant: the predictions of each host's first "
            "accepted pass compared per id by the agreement rule the protocol locks, the one each campaign "
            "applies against its reference variant ([quality] max_differing: the share of ids that may differ; "
            "embeddings: an id differs when its vectors' cosine is below min_cosine); the same ML result when "
            "the rule holds and the gap between the metric medians is within the protocol's [quality] "
            "tolerance.", ""]
    out += [f"- {p.key}: {p.quality_text()}" for p in c.projections]
    out += [f"- {agreement_text(x)}" for x in c.agreements] or [
        "- no two hosts share predictions to compare" + (" among the offline variants (the served outputs: the "
                                                          "serving section)" if c.serving is not None else "")]
    out += ["", "## Configurations", ""]
    for p in c.projections:
        aq = p.archive_quote
        out += [f"### {p.key}", "",
                f"- Hardware: {p.hardware}; {p.cards_note}",
                f"- Quality: {p.verdict}; successes {p.successes}, failures {p.failures}"
                + (f" ({', '.join(p.failure_kinds)})" if p.failure_kinds else ""),
                "- Measured window (s): " + (", ".join(f"{d:.3f}" for d in p.durations_s) or "none")
                + (f"; median {p.median_s:.3f}, min {p.min_s:.3f}, max {p.max_s:.3f}"
                   if p.median_s is not None else "")
                + (f". **Not steady-state:** {p.durations_caveat}" if p.durations_caveat else ""),
                f"- Throughput: median pass {p.items_per_s_median or 0:.2f} items/s, worst pass "
                f"{p.items_per_s_worst or 0:.2f} items/s" if p.items_per_s_median else
                "- Throughput: not measured (no successful pass)",
                (f"- Archive's package: {aq.gpu_name} {aq.days} days x {aq.lots} lot(s), committed "
                 f"{aq.committed_budget:.2f} {aq.currency}; cost per validated corpus "
                 + (f"{p.cost_per_validated_corpus:.2f} {aq.currency}"
                    if p.cost_per_validated_corpus is not None else "undefined (no accepted corpus)"))
                if aq else "- Archive's package: not priced ("
                + next((x.removeprefix("price: ") for x in p.exclusions if x.startswith("price: ")),
                       "no quote") + ")",
                f"- Metric: {p.quality_text()}",
                f"- Projection: {_h(p.hours_median)} at the median pass, {_h(p.hours_worst)} at the "
                f"worst pass (the whole load on one lot, without setup); {p.spread_text()}"]
        if p.too_short:
            out.append(f"- **{p.too_short[0].upper()}{p.too_short[1:]}**")
        if p.starved_passes:
            out.append(f"- **Starved:** {starved_text(list(p.starved_passes))}")
        if p.price_note:
            out.append(f"- Prices: {p.price_note}")
        if p.sizing:
            s = p.sizing.quote
            out.append(f"- Smallest covering package: {s.days} days x {s.lots} lot(s) = "
                       f"{s.committed_budget:.2f} {s.currency} ({p.sizing.hours_needed:.2f} h per lot of "
                       f"{p.sizing.hours_allowed:.2f} h allowed); {p.cost_per_million_items:.2f} "
                       f"{s.currency} per million items" + (f"; {cav}" if (cav := rests_on([p.basis])) else ""))
        out += [f"- {line}" for line in tokens_lines(p)]
        if p.exclusions:
            out.append("- Excluded: " + "; ".join(p.exclusions))
        out.append("")
    out += ["## Does the evidence distinguish the hosts?", "",
            "Per pair, same variant on two archives: distinguished when an exact Mann-Whitney rank "
            "test of their measured-window durations gives p <= 0.05 (ranges that do not overlap "
            "give its smallest p); never below the sample sizes at which the test can reach 0.05 "
            "(2 and 2 or 3 and 3 passes cannot: 'not enough passes to distinguish'). Seed: when the "
            "spread is comparable to the gap between the medians, the series does not distinguish "
            "the options.", ""]
    for x in c.cross_pairs:
        out.append(f"- {x.variant}: {x.a} vs {x.b}: "
                   f"{'distinguished' if x.distinguished else 'NOT distinguished'} ({x.reason})")
    out += ["", "## Decision path", ""] + [f"{i}. {line}" for i, line in enumerate(c.path, 1)]
    return "\n".join(out) + "\n"


def tokens_lines(p: Projection) -> list[str]:
    """A generation configuration's output tokens (as the campaign's decision note says them,
    lab.report.decision_note.output_tokens_text) and, at the load, the covering package's cost per item
    and per million output tokens; [] for the other kinds (they generate no text)."""
    if p.output_tokens is None:
        return []
    lines = [f"Output tokens: {output_tokens_text(p.output_tokens, p.items_per_pass, p.output_tokens_per_s_median)}"]
    if p.cost_per_item is None or p.cost_per_million_output_tokens is None or p.sizing is None:
        return lines + [f"At the load: {p.tokens_note}"]
    currency = p.sizing.quote.currency
    return lines + [f"At the load ({p.load_items} items, {p.output_tokens_at_load} output tokens projected): "
                    f"cost per item {p.cost_per_item} {currency}; per million output tokens "
                    f"{money(p.cost_per_million_output_tokens, currency)} (the covering package's committed "
                    "budget / items, / output tokens x 10^6)"]


def _first_per_host(projections) -> list[Projection]:
    return list({p.host: p for p in reversed(list(projections))}.values())[::-1]


def write_comparison(c: Comparison, out_dir: str | Path) -> dict:
    """Write decision.md, compare.csv and report.html under ``out_dir``, and serving.csv for server
    archives (lab.compare.serving.SERVING_COLUMNS); returns their paths ({"decision", "csv", "html"},
    "serving_csv" when written)."""
    from lab.compare.page import comparison_report
    from lab.compare.serving import SERVING_COLUMNS
    from lab.report.csv_safe import write_csv

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    decision, csv, html = out / "decision.md", out / "compare.csv", out / "report.html"
    paths = {"decision": decision, "csv": csv, "html": html}
    md, table = decision_markdown(c), comparison_table(c)
    decision.write_text(md, encoding="utf-8")
    write_csv(table, csv)  # formula-like cells neutralised, as in every CSV written
    html.write_text(comparison_report(c, md, table), encoding="utf-8")
    if c.serving is not None:
        paths["serving_csv"] = write_csv(pd.DataFrame(c.serving.rows(), columns=list(SERVING_COLUMNS)),
                                         out / "serving.csv")
    return paths
