#!/usr/bin/env python3
"""Package quotes (forfaits), campaign window and cost per validated corpus.

The single implementation of the pricing rule (seed: "Calcolare il costo
impegnato con i nostri forfait"): committed budget = package price per lot x
lots, whatever part of the package a short run leaves unused; cost per validated
corpus = committed budget / distinct useful corpora actually accepted, undefined
(not zero) when none is. Standard library only, Python 3.10+: this file also runs
alone as ``calcul_forfaits.py`` next to ``tarifs-forfaits.csv``.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import sys
from dataclasses import asdict, dataclass
from datetime import date, datetime, timezone
from decimal import ROUND_HALF_UP, Decimal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

try:
    from lab.facts.errors import UserError as _UserError
except ImportError:  # run alone as scripts/calcul_forfaits.py, copied without the lab: a plain ValueError
    _UserError = ValueError  # type: ignore[assignment,misc]

PACKAGE_HOURS = {3: 72, 7: 168, 30: 720}  # days -> hours (seed: 3, 7 or 30 days)
CATALOG_COLUMNS = ("gpu", "gpu_name", "cards_per_lot", "days", "price_per_lot",
                   "currency", "catalog_version")
# Next to __file__ WITHOUT resolving symlinks: a symlinked or copied script finds
# the catalog that sits beside it.
DEFAULT_CATALOG = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                               "tarifs-forfaits.csv")
CENT = Decimal("0.01")
MAX_COUNT = 1_000_000  # lots, days, cards, accepted corpora: beyond it a value is a typo
MAX_CATALOG_BYTES = 4 * 2**20  # a catalog is a few hundred rows; beyond it the file is not one
PRICE_RE = re.compile(r"^[0-9]{1,12}(\.[0-9]{1,2})?$")  # up to 999,999,999,999.99


CATALOG_FIX = "pass --catalog FILE"
"""The fix "give another catalog" in the command line's terms; a caller in other terms (a
campaign file's [cost] catalog, the Cost screen's field) rewords it: PricingError.reworded."""


class PricingError(_UserError):
    """Bad input or catalog; the message is one line: the problem and the fix. A
    ``lab.facts.errors.UserError`` (a ValueError) in the lab; a ValueError when the file runs alone."""

    def reworded(self, catalog_fix: str) -> str:
        """The message with CATALOG_FIX said as ``catalog_fix`` (where no --catalog flag exists)."""
        return str(self).replace(CATALOG_FIX, catalog_fix)


@dataclass(frozen=True)
class CatalogRow:
    """One catalog row: a package of ``days`` for one lot of ``cards_per_lot`` cards."""
    gpu: str
    gpu_name: str
    cards_per_lot: int
    days: int
    price_per_lot: Decimal
    currency: str
    catalog_version: str
    line: int  # line number in the CSV file (header = 1)

    @property
    def package_hours(self) -> int:
        return PACKAGE_HOURS[self.days]


@dataclass(frozen=True)
class Catalog:
    """Validated catalog: unique (gpu, days) rows, one currency. ``sha256``: of the file read,
    where the caller recorded it (lab.compare; this module stays standard-library only)."""
    path: str
    rows: tuple[CatalogRow, ...]
    sha256: str = ""

    @property
    def version(self) -> str:
        """The catalog's version: the latest ``catalog_version`` (YYYY-MM-DD) of its rows."""
        return max(r.catalog_version for r in self.rows)

    def prices(self) -> frozenset:
        """What the catalog prices, without file layout: one tuple per row (gpu, gpu_name,
        cards_per_lot, days, price_per_lot, currency, catalog_version). Two catalogs with the
        same prices() price every package alike whatever their line order or spacing."""
        return frozenset((r.gpu, r.gpu_name, r.cards_per_lot, r.days, r.price_per_lot, r.currency,
                          r.catalog_version) for r in self.rows)

    @property
    def currency(self) -> str:
        return self.rows[0].currency

    def gpus(self) -> list[str]:
        return sorted({r.gpu for r in self.rows})

    def row(self, gpu: str, days: int) -> CatalogRow | None:
        """The row for ``gpu`` and ``days``, or None when the catalog has none."""
        return next((r for r in self.rows if r.gpu == gpu and r.days == days), None)


@dataclass(frozen=True)
class Quote:
    """Committed budget of one package: price_per_lot x lots (money in ``currency``)."""
    gpu: str
    gpu_name: str
    days: int
    package_hours: int
    lots: int
    cards_per_lot: int
    total_cards: int
    price_per_lot: Decimal
    committed_budget: Decimal
    currency: str
    catalog_version: str
    accepted_results: int | None = None
    cost_per_validated_corpus: Decimal | None = None


@dataclass(frozen=True)
class Window:
    """Campaign window; ``window_seconds`` is real elapsed time (DST aware)."""
    start: datetime
    end: datetime
    window_seconds: int

    @property
    def window_hours(self) -> Decimal:
        return Decimal(self.window_seconds) / Decimal(3600)


@dataclass(frozen=True)
class Coverage:
    """How one package length relates to a window: periods needed, extra periods.

    ``extra_periods`` are stated, never assumed bought. Money fields are None when
    the catalog has no price for this package ("not in catalog").
    """
    days: int
    package_hours: int
    covers: bool
    periods_needed: int
    extra_periods: int
    price_per_lot: Decimal | None
    extra_cost: Decimal | None  # extra_periods x price_per_lot x lots


def money(amount: Decimal | None, currency: str) -> str:
    """``amount`` with 2 decimals and the currency, or "not in catalog" for None."""
    if amount is None:
        return "not in catalog"
    return f"{amount.quantize(CENT, rounding=ROUND_HALF_UP)} {currency}"


def _positive_int(value, what: str, fix: str) -> int:
    """An integer 1..MAX_COUNT written with ASCII digits only (no sign, '_', exponent)."""
    text = str(value).strip()
    shown = text if len(text) <= 24 else f"{text[:12]}... ({len(text)} characters)"
    if isinstance(value, bool) or not (text.isascii() and text.isdigit()) or int(text[:24]) < 1:
        raise PricingError(f"{what} must be an integer >= 1, got {shown!r}: {fix}")
    if len(text.lstrip("0")) > len(str(MAX_COUNT)) or int(text) > MAX_COUNT:
        raise PricingError(f"{what} {shown} is beyond {MAX_COUNT:,}: {fix}")
    return int(text)


def load_catalog(path: str | None = None) -> Catalog:
    """Read and validate a catalog CSV (columns CATALOG_COLUMNS).

    Raises PricingError (one line, with the file's line number) for a missing file
    or column, a malformed row, days other than 3/7/30, a duplicate (gpu, days),
    mixed currencies or an empty catalog.
    """
    path = path or DEFAULT_CATALOG
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:  # -sig: spreadsheet BOM
            text = fh.read(MAX_CATALOG_BYTES + 1)  # bounded: /dev/zero or a huge file never fills memory
            if len(text) > MAX_CATALOG_BYTES:
                raise PricingError(f"{path}: larger than {MAX_CATALOG_BYTES:,} characters, not a catalog of "
                                   f"package rows; {CATALOG_FIX} (a CSV catalog)")
            reader = csv.DictReader(io.StringIO(text, newline=""))
            missing = [c for c in CATALOG_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise PricingError(f"{path}: line 1: missing column(s) {', '.join(missing)}: "
                                   f"the header must be {','.join(CATALOG_COLUMNS)}")
            rows = [_parse_row(raw, reader.line_num, path) for raw in reader]
    except OSError as exc:
        raise PricingError(f"cannot read catalog {path}: {exc.strerror}; "
                           f"{CATALOG_FIX}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise PricingError(f"{path}: not a UTF-8 CSV catalog ({exc}); save it as UTF-8 CSV") \
            from None
    if not rows:
        raise PricingError(f"{path}: no package rows: add at least one row under the header")
    seen: dict[tuple[str, int], int] = {}
    for r in rows:
        if (r.gpu, r.days) in seen:
            raise PricingError(f"{path}: line {r.line}: duplicate row for {r.gpu} {r.days} days "
                               f"(first at line {seen[r.gpu, r.days]}): keep one")
        seen[r.gpu, r.days] = r.line
        if r.currency != rows[0].currency:
            raise PricingError(f"{path}: line {r.line}: mixed currencies {rows[0].currency} "
                               f"(line {rows[0].line}) and {r.currency}: use one currency")
    return Catalog(path=path, rows=tuple(rows))


def _parse_row(raw: dict, line: int, path: str) -> CatalogRow:
    where = f"{path}: line {line}: malformed row"
    if None in raw or any(raw.get(c) is None for c in CATALOG_COLUMNS):
        raise PricingError(f"{where}: expected {len(CATALOG_COLUMNS)} cells "
                           f"({','.join(CATALOG_COLUMNS)})")
    cell = {c: raw[c].strip() for c in CATALOG_COLUMNS}
    if not cell["gpu"] or not cell["gpu_name"]:
        raise PricingError(f"{where}: gpu and gpu_name must not be empty")
    fix = "fix the row"
    try:
        cards = _positive_int(cell["cards_per_lot"], "cards_per_lot", fix)
        days = _positive_int(cell["days"], "days", fix)
    except PricingError as exc:
        raise PricingError(f"{where}: {exc}") from None
    if days not in PACKAGE_HOURS:
        raise PricingError(f"{where}: days {days} is not a package (3, 7 or 30)")
    price = None
    if PRICE_RE.match(cell["price_per_lot"]):  # plain digits: no exponent, '_' or sign
        price = Decimal(cell["price_per_lot"])
    if price is None or price <= 0:
        raise PricingError(f"{where}: price_per_lot {cell['price_per_lot'][:24]!r} must be a "
                           "positive amount written in plain digits with at most 2 decimals "
                           "(no exponent, '_' or sign), e.g. 110.00")
    cur = cell["currency"]
    if not (len(cur) == 3 and cur.isalpha() and cur.isupper()):
        raise PricingError(f"{where}: currency {cur!r} must be a 3-letter code, e.g. USD")
    try:
        date.fromisoformat(cell["catalog_version"])
    except ValueError:
        raise PricingError(f"{where}: catalog_version {cell['catalog_version']!r} must be "
                           "a date YYYY-MM-DD") from None
    return CatalogRow(cell["gpu"].lower(), cell["gpu_name"], cards, days, price, cur,
                      cell["catalog_version"], line)


def known_gpu(catalog: Catalog, gpu: str) -> str:
    """Normalised GPU id; raises PricingError listing the known ones when unknown."""
    gpu = str(gpu).strip().lower()
    if gpu not in catalog.gpus():
        raise PricingError(f"unknown GPU {gpu!r}: known GPUs are {', '.join(catalog.gpus())} "
                           f"(or {CATALOG_FIX} with a fuller catalog)")
    return gpu


def find_row(catalog: Catalog, gpu: str, days) -> CatalogRow:
    """The catalog row for ``gpu`` and ``days``.

    Raises PricingError: unknown GPU (lists the known ones), days not a package,
    or no row for that package ("not in catalog", never an invented price).
    """
    gpu = known_gpu(catalog, gpu)
    days = _positive_int(days, "days", "packages are 3, 7 or 30 days")
    if days not in PACKAGE_HOURS:
        raise PricingError(f"days {days} not offered: packages are 3, 7 or 30 days")
    row = catalog.row(gpu, days)
    if row is None:
        offered = sorted(r.days for r in catalog.rows if r.gpu == gpu)
        raise PricingError(f"{gpu} {days} days: not in catalog (this catalog offers "
                           f"{', '.join(map(str, offered))} days); {CATALOG_FIX}")
    return row


def cost_per_validated_corpus(committed_budget: Decimal, accepted: int) -> Decimal | None:
    """committed_budget / accepted; None (undefined, not zero) when accepted == 0.

    ``accepted`` counts distinct validated corpora, each once (never repetitions).
    Raises PricingError when it is negative or not an integer.
    """
    if isinstance(accepted, bool) or not isinstance(accepted, int) or accepted < 0:
        raise PricingError(f"accepted corpora must be an integer >= 0, got {accepted!r}")
    return None if accepted == 0 else committed_budget / accepted


def quote(catalog: Catalog, gpu: str, days, lots=1, accepted_results=None) -> Quote:
    """Quote ``lots`` lots of the ``days`` package of ``gpu``.

    committed_budget = price_per_lot x lots; total_cards = cards_per_lot x lots
    (a B200 lot already holds 2 cards: never multiplied again). With
    ``accepted_results`` (integer >= 1) adds the cost per validated corpus.
    Raises PricingError for every bad input (see find_row, lots, accepted_results).
    """
    row = find_row(catalog, gpu, days)
    lots = _positive_int(lots, "--lots", "a lot is the unit sold (1, 2, ...)")
    budget = row.price_per_lot * lots
    per_corpus = None
    if accepted_results is not None:
        accepted_results = _positive_int(
            accepted_results, "--accepted-results",
            "count distinct validated corpora; omit it while none is validated "
            "(the cost per corpus is undefined at 0)")
        per_corpus = cost_per_validated_corpus(budget, accepted_results)
    return Quote(row.gpu, row.gpu_name, row.days, row.package_hours, lots, row.cards_per_lot,
                 row.cards_per_lot * lots, row.price_per_lot, budget, row.currency,
                 row.catalog_version, accepted_results, per_corpus)


def parse_instant(text: str, tz: str | None = None, what: str = "time") -> datetime:
    """Parse an ISO date-time with an offset, or a naive one placed in IANA zone ``tz``.

    Raises PricingError for a malformed value, an unknown zone, a naive value
    without ``tz``, a local time that does not exist or occurs twice (DST), or an
    instant outside the years 1-9999 once converted to UTC (e.g. year 1 at +01:00).
    """
    try:
        value = _parse_instant(text, tz, what)
        value.astimezone(timezone.utc)  # in range in UTC too: later arithmetic goes through it
    except OverflowError:
        raise PricingError(f"{what} {text!r} is out of range once converted to UTC (years 1 to 9999): "
                           "write a real date, e.g. 2026-10-23T09:00+02:00") from None
    return value


def _parse_instant(text: str, tz: str | None, what: str) -> datetime:
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise PricingError(f"{what} {text!r} is not an ISO date-time: "
                           "write e.g. 2026-10-23T09:00+02:00") from None
    if value.tzinfo is not None:
        return value
    if not tz:
        raise PricingError(f"{what} {text!r} has no time zone: add an offset "
                           "(e.g. +02:00) or pass --tz Europe/Rome")
    try:
        zone = ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise PricingError(f"unknown time zone {tz!r}: use an IANA name such as "
                           "Europe/Rome") from None
    local = value.replace(tzinfo=zone)
    back = local.astimezone(timezone.utc).astimezone(zone).replace(tzinfo=None)
    if back != value:
        raise PricingError(f"{what} {text!r} does not exist in {tz} (clocks jump): "
                           "pick another time or give an offset")
    if local.utcoffset() != value.replace(tzinfo=zone, fold=1).utcoffset():
        raise PricingError(f"{what} {text!r} occurs twice in {tz} (clocks go back): "
                           "give an explicit offset")
    return local


def parse_window(start: str, end: str, tz: str | None = None) -> Window:
    """Campaign window from two ISO date-times; real elapsed seconds via UTC.

    (Subtracting two datetimes of one zone in Python ignores a DST change: both
    ends are converted to UTC first.) Raises PricingError when end <= start.
    """
    t0 = parse_instant(start, tz, "window start")
    t1 = parse_instant(end, tz, "window end")
    seconds = int((t1.astimezone(timezone.utc) - t0.astimezone(timezone.utc)).total_seconds())
    if seconds <= 0:
        raise PricingError(f"window end {end!r} is not after window start {start!r}: "
                           "swap them or fix the dates")
    return Window(t0, t1, seconds)


def coverage(window: Window, days: int, price_per_lot: Decimal | None = None,
             lots: int = 1) -> Coverage:
    """Periods of the ``days`` package needed to hold ``window`` (seed: no automatic
    extension is assumed; extra periods are quantified, with their cost for ``lots``
    lots when ``price_per_lot`` is known)."""
    hours = PACKAGE_HOURS[days]
    periods = max(1, -(-window.window_seconds // (hours * 3600)))  # exact ceiling
    extra = None if price_per_lot is None else price_per_lot * lots * (periods - 1)
    return Coverage(days, hours, periods == 1, periods, periods - 1, price_per_lot, extra)


def format_hours(window: Window) -> str:
    """Window length in hours: "96", or "1.50" when not a whole number of hours."""
    h = window.window_hours
    return f"{h.normalize():f}" if h == h.to_integral_value() else f"{h.quantize(CENT)}"


def _coverage_line(c: Coverage, currency: str, lots: int) -> str:
    if c.covers:
        return f"covered by one {c.days}-day package ({c.package_hours} h)"
    cost = "price not in catalog" if c.extra_cost is None else \
        f"{money(c.extra_cost, currency)} for {lots} lot(s)"
    return (f"exceeds the {c.days}-day package ({c.package_hours} h): needs {c.periods_needed} "
            f"periods, i.e. {c.extra_periods} extra period(s) ({cost}), not included, "
            "no automatic extension assumed")


def render_quote(q: Quote, window: Window | None = None) -> str:
    """Human-readable quote (one field per line)."""
    cards = f"{q.total_cards} GPU" + ("s" if q.total_cards != 1 else "")
    lines = [f"Quote - catalog version {q.catalog_version}",
             f"GPU:                {q.gpu_name} ({q.gpu})",
             f"Package:            {q.days} days ({q.package_hours} h)",
             f"Price per lot:      {money(q.price_per_lot, q.currency)}",
             f"Lots:               {q.lots}",
             f"Cards per lot:      {q.cards_per_lot}",
             f"Total cards:        {cards}",
             f"Total (committed budget): {money(q.committed_budget, q.currency)} "
             "(price per lot x lots; a short run is not billed by the hour)"]
    if q.accepted_results is not None:
        lines += [f"Accepted results:   {q.accepted_results} distinct validated corpora",
                  f"Cost per validated corpus: {money(q.cost_per_validated_corpus, q.currency)}"]
    if window is not None:
        c = coverage(window, q.days, q.price_per_lot, q.lots)
        lines += [f"Campaign window:    {window.start.isoformat()} to "
                  f"{window.end.isoformat()} = {format_hours(window)} h",
                  f"Window vs package:  {_coverage_line(c, q.currency, q.lots)}"]
    return "\n".join(lines)


def render_listing(catalog: Catalog, gpu: str, window: Window | None = None, lots: int = 1) -> str:
    """The 3/7/30-day packages of ``gpu``, "not in catalog" where missing."""
    gpu = known_gpu(catalog, gpu)
    lines = [f"Packages for {gpu} (catalog {catalog.path}):"]
    if window is not None:
        lines.append(f"Campaign window: {window.start.isoformat()} to {window.end.isoformat()}"
                     f" = {format_hours(window)} h")
    for days in PACKAGE_HOURS:
        row = catalog.row(gpu, days)
        text = "not in catalog" if row is None else (
            f"{money(row.price_per_lot, row.currency)} per lot of {row.cards_per_lot} card(s), "
            f"catalog version {row.catalog_version}")
        line = f"  {days:>2} days ({PACKAGE_HOURS[days]:>3} h): {text}"
        if window is not None:
            c = coverage(window, days, row.price_per_lot if row else None, lots)
            line += f"; {_coverage_line(c, catalog.currency, lots)}"
        lines.append(line)
    return "\n".join(lines)


def _jsonable(obj):
    if isinstance(obj, Decimal):
        return str(obj.quantize(CENT, rounding=ROUND_HALF_UP))
    if isinstance(obj, datetime):
        return obj.isoformat()
    raise TypeError(type(obj).__name__)


def _package_json(catalog: Catalog, gpu: str, days: int, window: Window | None,
                  lots: int) -> dict:
    row = catalog.row(gpu, days)
    price = row.price_per_lot if row else None
    item = {"gpu": gpu, "days": days, "package_hours": PACKAGE_HOURS[days],
            "in_catalog": row is not None,
            "price_per_lot": price,
            "cards_per_lot": row.cards_per_lot if row else None,
            "currency": catalog.currency,
            "catalog_version": row.catalog_version if row else None}
    if window is not None:
        item["coverage"] = asdict(coverage(window, days, price, lots))
    return item


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit status 2
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def main(argv: list[str] | None = None) -> int:
    """CLI (calcul_forfaits.py). Returns 0, or 2 after one error line on stderr."""
    p = _Parser(prog="calcul_forfaits.py", description="Quote IteraGPU flat-rate packages.")
    p.add_argument("--gpu", help="GPU id from the catalog, e.g. rtx-4090 or b200")
    p.add_argument("--days", help="package length: 3, 7 or 30")
    p.add_argument("--lots", default="1", help="number of lots (integer >= 1, default 1)")
    p.add_argument("--accepted-results", help="distinct validated corpora (integer >= 1)")
    p.add_argument("--window-start", help="campaign start, ISO with offset or with --tz")
    p.add_argument("--window-end", help="campaign end, ISO with offset or with --tz")
    p.add_argument("--tz", help="IANA zone for naive window times, e.g. Europe/Rome")
    p.add_argument("--catalog", help=f"catalog CSV (default: {DEFAULT_CATALOG})")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    a = p.parse_args(argv)
    try:
        if (a.window_start is None) != (a.window_end is None):
            raise PricingError("give both --window-start and --window-end")
        if a.days is not None and a.gpu is None:
            raise PricingError("--days needs --gpu")
        if a.accepted_results is not None and a.days is None:
            raise PricingError("--accepted-results needs --gpu and --days")
        catalog = load_catalog(a.catalog)
        window = parse_window(a.window_start, a.window_end, a.tz) if a.window_start else None
        lots = _positive_int(a.lots, "--lots", "a lot is the unit sold (1, 2, ...)")
        out: dict = {"catalog": catalog.path}
        if window is not None:
            out["window"] = {**asdict(window), "window_hours": format_hours(window)}
        if a.gpu is not None and a.days is not None:
            q = quote(catalog, a.gpu, a.days, lots, a.accepted_results)
            per_result = ("accepted_results", "cost_per_validated_corpus")
            out["quote"] = {k: v for k, v in asdict(q).items()
                            if a.accepted_results is not None or k not in per_result}
            text = render_quote(q, window)
        else:
            gpus = [known_gpu(catalog, a.gpu)] if a.gpu is not None else catalog.gpus()
            text = "\n".join(render_listing(catalog, g, window, lots) for g in gpus)
            out["packages"] = [_package_json(catalog, g, d, window, lots)
                               for g in gpus for d in PACKAGE_HOURS]
        if window is not None and "quote" in out:
            out["coverage"] = asdict(coverage(window, q.days, q.price_per_lot, q.lots))
    except PricingError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, default=_jsonable, indent=2) if a.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
