"""[scenario]: offline passes (the default) or a server scenario (issue 36).

``kind = "offline"``: the corpus processed in bulk, priced per validated corpus; a campaign file
without [scenario] is this one, its ids, locks and pass.json unchanged.

``kind = "server"``: each variant that declares ``request_rate`` (req/s) is a server pass: vLLM's
OpenAI-compatible server is started for the pass (set-up), and vLLM's own load generator
(``vllm bench serve``) offers it the corpus's items as requests, one per id, at the endpoint the
task kind names (lab.kinds: completions, ``/classify``, ``/v1/embeddings``), arriving at that
mean rate (Poisson at ``burstiness`` 1, gamma otherwise, drawn from [timing] seed), at most
``max_concurrency`` in flight, after ``warmup_requests`` kept out of the figures
(lab.passes.tasks.server_job). A variant without ``request_rate`` stays an offline pass: the
offline reference the served outputs are judged against, by the kind's agreement rule.

The latency objective is locked with the protocol, before timing: per metric a percentile and a
bound in seconds (``ttft``: time to first token; ``tpot``: time per output token after the first;
``e2el``: end-to-end latency), and ``share``, the share of requests that must meet every bound
(lab.engines.serving_figures.Objective, built by the pass from :meth:`ScenarioSection.bounds`; its
definitions are vLLM's ``calculate_metrics``). A
server pass holds the objective when every declared percentile is within its bound and the
share of good requests reaches ``share``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from lab.facts.errors import UserError

SCENARIOS = ("offline", "server")
"""The scenarios a campaign declares ([scenario] kind); the first is the default."""


class ScenarioError(UserError):
    """A [scenario] that cannot run as declared; one line with the fix."""


@dataclass(frozen=True)
class ScenarioSection:
    """[scenario]: ``kind`` (SCENARIOS), and for a server scenario the arrivals (``burstiness``: 1
    Poisson, < 1 burstier, > 1 more regular), ``max_concurrency`` (requests in flight at most;
    absent: no cap), ``warmup_requests`` (sent before the measured requests, kept out), and the
    objective: ``ttft_s``, ``tpot_s``, ``e2el_s`` (bounds in seconds, each optional, at least one for
    a server), ``*_percentile`` (which percentile each bound applies to, default 99) and ``share``
    (share of requests that must meet every declared bound, default 0.9); the user's traffic:
    ``peak_rate`` (req/s the lots must hold) and ``average_rate`` (req/s: cost per million
    requests), each optional (without them nothing is sized or priced); ``search``: a rate search
    (lab.orchestration.search: each configuration's declared rates climbed in ascending order, the
    rates above one that does not hold the objective not run in that repetition). Raises
    ScenarioError."""

    kind: str = "offline"  # "offline" (a corpus in bulk) or "server" (requests at request_rate, an objective)
    burstiness: float = 1.0  # arrivals: 1 Poisson, < 1 burstier, > 1 more regular (gamma shape)
    max_concurrency: int | None = None  # requests in flight at most; not set: no cap
    warmup_requests: int = 2  # sent before each server pass's measured requests, kept out of its figures
    ttft_s: float | None = None  # objective: time to first token bound (s) at ttft_percentile
    ttft_percentile: float = 99.0
    tpot_s: float | None = None  # objective: time per output token bound (s) at tpot_percentile
    tpot_percentile: float = 99.0
    e2el_s: float | None = None  # objective: end-to-end latency bound (s) at e2el_percentile
    e2el_percentile: float = 99.0
    share: float = 0.9  # share of requests that must meet every declared bound
    peak_rate: float | None = None  # the traffic's peak (req/s) the lots must hold at the objective
    average_rate: float | None = None  # the traffic's average (req/s): cost per million requests
    search: bool = False  # climb each configuration's rates; skip those above one that fails

    def __post_init__(self) -> None:
        if self.kind not in SCENARIOS:
            raise ScenarioError(f"[scenario] kind {self.kind!r} unknown; use {' or '.join(map(repr, SCENARIOS))}")
        if self.kind == "offline":
            given = [k for k, v in asdict(self).items() if k != "kind" and v != getattr(ScenarioSection, k)]
            if given:
                raise ScenarioError(f"[scenario] {given[0]} applies to kind = \"server\" only; declare "
                                    f"kind = \"server\" or remove {given[0]}")
            return
        if not 0 < self.burstiness < float("inf"):
            raise ScenarioError(f"[scenario] burstiness {self.burstiness!r} must be > 0 (1: Poisson arrivals)")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ScenarioError(f"[scenario] max_concurrency {self.max_concurrency!r} must be >= 1, or left out "
                                "for no cap")
        if not 0 <= self.warmup_requests <= 1000:
            raise ScenarioError(f"[scenario] warmup_requests {self.warmup_requests!r} must be 0 to 1000")
        if not 0 < self.share <= 1:
            raise ScenarioError(f"[scenario] share {self.share!r} must be in (0, 1] (share of requests meeting "
                                "every bound), e.g. 0.9")
        for key in ("peak_rate", "average_rate"):
            value = getattr(self, key)
            if value is not None and not 0 < value < float("inf"):
                raise ScenarioError(f"[scenario] {key} {value!r} must be requests per second > 0, e.g. 20")
        if self.peak_rate is not None and self.average_rate is not None and self.average_rate > self.peak_rate:
            raise ScenarioError(f"[scenario] average_rate {self.average_rate:g} is above peak_rate "
                                f"{self.peak_rate:g} req/s; the peak is the highest traffic, the average below it")
        bounds = self.bounds()
        if not bounds:
            raise ScenarioError("[scenario] a server scenario needs a latency objective, locked before timing: "
                                "declare ttft_s, tpot_s or e2el_s (seconds), e.g. ttft_s = 1.0")
        for metric, p, bound in bounds:
            if not 0 < p < 100:
                raise ScenarioError(f"[scenario] {metric}_percentile {p!r} must be in (0, 100), e.g. 99")
            if not 0 < bound < float("inf"):
                raise ScenarioError(f"[scenario] {metric}_s {bound!r} must be seconds > 0")

    @property
    def server(self) -> bool:
        return self.kind == "server"

    def bounds(self) -> list[tuple[str, float, float]]:
        """(metric, percentile, bound in s) of each declared bound, in ttft, tpot, e2el order."""
        return [(m, float(getattr(self, f"{m}_percentile")), float(getattr(self, f"{m}_s")))
                for m in ("ttft", "tpot", "e2el") if getattr(self, f"{m}_s") is not None]

    def extra(self) -> dict:
        """PassSpec.extra's ``scenario`` entry: {} offline (pass.json unchanged), else the section."""
        return {"scenario": asdict(self)} if self.server else {}


def scenario_of(extra: dict) -> ScenarioSection:
    """The scenario a pass spec's ``extra`` holds (ScenarioSection.extra's ``scenario`` entry; the
    offline scenario when absent). Raises ScenarioError / TypeError for a malformed entry."""
    return ScenarioSection(**extra.get("scenario", {}))


def check_variants(scenario: ScenarioSection, kind, variants, reference: str) -> None:
    """The variants against the scenario (ScenarioError, one line): ``request_rate`` only in a server
    scenario; a server scenario serves a ``kind`` (lab.kinds.kind.TaskKind) that names a
    ``served_endpoint``, bounds only the latencies its answers have (a kind whose answer comes
    whole has no TTFT apart from its end-to-end latency, and no TPOT: ``e2el_s``), has at least
    one variant with a rate, and its reference variant is an offline one (the served outputs are
    judged against it)."""
    rated = [v for v in variants if v.request_rate is not None]
    if not scenario.server:
        if rated:
            raise ScenarioError(f"variant {rated[0].name} declares request_rate, a server pass's factor; declare "
                                "[scenario] kind = \"server\" with its latency objective, or remove request_rate")
        return
    if kind.served_endpoint is None:
        raise ScenarioError(f"[scenario] kind = \"server\" does not serve {kind.name} tasks (the user's own code "
                            "is not a server); declare a built-in [task] kind, or remove [scenario]")
    streamed = [m for m, _, _ in scenario.bounds() if m != "e2el"]
    if streamed and not kind.streams:
        raise ScenarioError(f"[scenario] {streamed[0]}_s bounds a streamed answer, and a {kind.name} answer comes "
                            "whole: bound its end-to-end latency with e2el_s instead (e.g. e2el_s = 0.5)")
    if not rated:
        raise ScenarioError("[scenario] kind = \"server\" but no variant declares request_rate; add a series "
                            "with factor = \"request_rate\", values = [1, 2, 4] and engine = \"vllm\"")
    if scenario.search:
        ladders: dict[str | None, list] = {}
        for v in rated:
            ladders.setdefault(v.ladder_id, []).append(v)
        short = next((vs[0] for vs in ladders.values() if len(vs) < 2), None)
        if short is not None:
            raise ScenarioError(f"[scenario] search = true climbs each server configuration's rates, and variant "
                                f"{short.name} is the only rate of its configuration; declare at least two rates "
                                "for it (values = [1, 2, 4, 8]), or remove search")
    ref = next((v for v in variants if v.name == reference), None)
    if ref is not None and ref.request_rate is not None:
        raise ScenarioError(f"reference_variant {reference!r} is a server pass; in a server scenario the reference "
                            "is an offline variant (no request_rate) whose outputs the served ones must agree with")
