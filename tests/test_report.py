"""`kvplan report`: a simulation or sweep result as one self-contained HTML page, or as Markdown.

The inputs are the files the other commands write (`kvplan simulate --out`, with `--seeds` and
`--ablate`, `kvplan sweep --out`, `kvplan size --out`, `kvplan capacity --out`, `kvplan plan --json` and
`kvplan doctor --json`, `kvplan compare --json`; `kvplan observe --json`, which needs a live stack, as
it would write it), made here from the local example cut down to a few dozen
requests. The page is then opened in a real browser (Debian's `chromium`, headless): every plot
must be drawn, nothing may be loaded from elsewhere and nothing may log an error.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from kvplan.cli import app
from kvplan.live.observe import Component, Snapshot
from kvplan.report import scatter, svg
from kvplan.report.figures import cdf

from conftest import REPO, example_data, with_changes

SMALL = {"workload__requests": 40}


def kvplan(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Result files as the commands write them: one run, one run with --ablate and --seeds 2, sweeps, a sizing."""
    tmp = tmp_path_factory.mktemp("report")
    spec = tmp / "small.yaml"
    spec.write_text(yaml.safe_dump(with_changes(example_data("local"), **SMALL)))
    made = {"result": tmp / "result.json", "ablation": tmp / "ablation.json", "grid": tmp / "grid.json",
            "line": tmp / "line.json", "size": tmp / "size.json", "capacity": tmp / "capacity.json",
            "plan": tmp / "plan.json"}
    commands = [("simulate", spec, "--out", made["result"]), ("size", spec, "--out", made["size"]),
                ("simulate", spec, "--ablate", "--seeds", "2", "--out", made["ablation"]),
                ("sweep", spec, "--vary", "workload.arrivals.session_rate=1/s,4/s", "--vary", "lmcache.ddr.size=256MiB,1GiB",
                 "--no-cache", "--out", made["grid"]),
                ("sweep", spec, "--vary", "workload.arrivals.session_rate=1/s,2/s,4/s", "--no-cache", "--out", made["line"]),
                ("capacity", spec, "--slo", "ttft_p99=1s", "--seeds", "2", "--low", "2/s", "--high", "32/s",
                 "--no-cache", "--out", made["capacity"])]
    for command in commands:
        result = kvplan(*command)
        assert result.exit_code == 0, result.output
    plan = kvplan("plan", spec, "--rate", "2/s", "--slo", "ttft_p99=2s", "--max-instances", "1", "--no-cache", "--json")
    assert plan.exit_code == 0, plan.output
    made["plan"].write_text(plan.stdout)          # `kvplan plan --json > plan.json`
    doctor = kvplan("doctor", spec, "--json", "--seeds", "2")
    assert doctor.exit_code in (0, 6), doctor.output    # 6: it found a problem, which is what the page shows
    made["doctor"] = tmp / "doctor.json"
    made["doctor"].write_text(doctor.stdout)
    recorded = REPO / "tests" / "fixtures" / "fidelity-zen1"       # a benchmark run recorded on a real stack
    compare = kvplan("compare", recorded / "chat.yaml", "--observed", recorded / "run-chat", "--json")
    assert compare.exit_code == 0, compare.output
    made["compare"] = tmp / "compare.json"
    made["compare"].write_text(compare.stdout)
    made["snapshot"] = tmp / "snapshot.json"      # `kvplan observe --json` needs a live stack: its JSON as it writes it
    made["snapshot"].write_text(Snapshot(
        taken_at=1_700_000_000.0,
        components=[Component(name="vllm http://127.0.0.1:8000", up=True), Component(name="lmcache", up=True),
                    Component(name="ceph", up=False, detail="ceph df: timed out")],
        vllm={"http://127.0.0.1:8000": {"prompt_tokens": 1000.0, "hbm_tokens": 600.0, "lmcache_tokens": 250.0,
                                        "computed_tokens": 150.0}},
        lmcache={"lookup_requested_tokens": 400.0, "lookup_hit_tokens": 250.0}, ceph=None).model_dump_json())
    return made


def report(source: Path, out: Path) -> str:
    result = kvplan("report", source, "-o", out)
    assert result.exit_code == 0, result.output
    return out.read_text()


# --- what the page holds --------------------------------------------------------------------------

def test_a_run_becomes_one_page_with_its_tables_and_plots(files, tmp_path):
    page = report(files["result"], tmp_path / "report.html")
    for heading in ("Summary", "Latency", "Where the KV came from", "Links", "Over time", "Cost"):
        assert f"<h2>{heading}</h2>" in page
    for title in ("TTFT: share of requests within x", "TPOT: share of requests within x", "Where prompt KV came from",
                  "Hit ratio per tier", "Busy share of the engines and every link", "Bytes moved per link",
                  "Requests waiting over time", "TTFT over time", "HBM KV block utilisation over time",
                  "Cost per hour by tier"):
        assert re.search(rf'<title id="fig-\d+-title">{re.escape(title)}</title>', page), title
    assert "<caption>Where prompt KV came from</caption>" in page      # the same tables kvplan simulate prints


def test_a_result_without_a_cost_says_so(files, tmp_path):
    data = json.loads(files["result"].read_text())
    data.pop("cost", None)
    older = tmp_path / "older.json"
    older.write_text(json.dumps(data))
    page = report(older, tmp_path / "report.html")
    assert "This result file carries no cost" in page and "Cost per hour by tier" not in page


def test_the_page_is_self_contained(files, tmp_path):
    """No scripts, no stylesheets or images from elsewhere, and a policy that forbids loading any."""
    page = report(files["ablation"], tmp_path / "report.html")
    assert "<script" not in page and "<link" not in page and "url(" not in page
    assert not re.search(r"""(src|href)=["'](?!#)""", page)
    assert re.findall(r"https?://[^\s\"'<>]+", page) == ["http://www.w3.org/2000/svg"] * page.count("<svg ")
    assert "default-src 'none'" in page


def test_the_same_input_gives_the_same_bytes(files, tmp_path):
    first = report(files["ablation"], tmp_path / "a.html")
    assert report(files["ablation"], tmp_path / "b.html") == first


def test_every_plot_has_axes_and_an_accessible_title(files, tmp_path):
    page = report(files["result"], tmp_path / "report.html")
    plots = re.findall(r"<svg class=\"plot\".*?</svg>", page, re.S)
    assert plots
    for plot in plots:
        ident = re.search(r'id="(fig-\d+)"', plot)[1]
        assert f'aria-labelledby="{ident}-title {ident}-desc"' in plot
        assert '<g class="axes"' in plot and "<text" in plot


def test_latency_cdfs_come_from_every_request(files, tmp_path):
    """The CDF is drawn from the per-request table, and the caption says so."""
    page = report(files["result"], tmp_path / "report.html")
    assert "Empirical CDF over 40 requests" in page


def test_seeds_and_ablation_are_compared_line_by_line(files, tmp_path):
    """--seeds 2 --ablate: the seeds' table and CDFs, then the ablation's, each run one line."""
    page = report(files["ablation"], tmp_path / "report.html")
    assert "<caption>Across 2 seeds (1..2): mean ± 95 % CI</caption>" in page
    assert "<caption>Ablation: the same workload, one tier at a time</caption>" in page
    ttft = re.findall(r"<svg[^>]*>\s*<title[^>]*>TTFT: share of requests within x</title>.*?</svg>", page, re.S)
    lines = [re.findall(r'<g class="series"><title>([^<]*)</title>', plot) for plot in ttft]
    assert lines == [["seed 1", "seed 2"], ["no reuse", "hbm only", "+ ddr", "+ nvme", "+ ceph"], ["this run"]]


def test_a_two_path_sweep_becomes_heat_maps(files, tmp_path):
    page = report(files["grid"], tmp_path / "sweep.html")
    assert "<h2>Heat maps</h2>" in page
    assert ">TTFT p99 over workload.arrivals.session_rate and lmcache.ddr.size</title>" in page
    assert page.count('<g class="cells"') >= 5


def test_a_one_path_sweep_becomes_lines_over_its_values(files, tmp_path):
    page = report(files["line"], tmp_path / "sweep.html")
    assert "<h2>Metrics per point</h2>" in page
    assert all(f">{v}</text>" in page for v in ("1/s", "2/s", "4/s"))


def test_a_sweep_without_cost_says_why_there_is_no_frontier(files, tmp_path):
    """A point carries no cost when a price is in neither the catalog nor the spec."""
    sweep = json.loads(files["grid"].read_text())
    for point in sweep["points"]:
        point["cost"] = None
    unpriced = tmp_path / "unpriced.json"
    unpriced.write_text(json.dumps(sweep))
    page = report(unpriced, tmp_path / "sweep.html")
    assert "carry no cost, so there is no cost frontier" in page


def test_the_pareto_frontier_keeps_the_points_nothing_beats_on_both():
    points = [scatter.Point(1.0, 9.0, "a"), scatter.Point(2.0, 5.0, "b"), scatter.Point(3.0, 6.0, "c"),
              scatter.Point(4.0, 1.0, "d"), scatter.Point(4.0, 2.0, "e")]
    assert [p.label for p in scatter.pareto_frontier(points)] == ["a", "b", "d"]
    chart, unlabelled = scatter.scatter_frontier("fig-1", "cost vs TTFT", points, x_label="$/h", y_label="TTFT",
                                             x_format=svg.fmt_dollars, y_format=svg.fmt_seconds,
                                             y_marks=[(2.5, "SLO: TTFT p99 2.5 s")])
    assert chart.count("<circle") == 5 and chart.count("(on the frontier)") == 3
    assert 'class="frontier"' in chart
    # every point is named next to it, and the SLO is a dashed line across the plot with its legend entry
    labels = re.search(r'<g class="point-labels".*?</g>', chart, re.S)[0]
    assert sorted(re.findall(r">([a-e])</text>", labels)) == ["a", "b", "c", "d", "e"] and unlabelled == 0
    assert chart.count('<g class="mark">') == 1 and ">SLO: TTFT p99 2.5 s</text>" in chart


def test_point_labels_that_would_collide_are_left_to_the_tooltip():
    names = ["one", "two", "three", "four", "five", "six", "seven"]
    spots = scatter.place_labels([(100, 100, name) for name in names], area=(0, 0, 640, 340))
    assert [s is None for s in spots] == [False] * 6 + [True]
    assert len({(x, y, anchor) for x, y, anchor, _ in filter(None, spots)}) == 6    # beside, above and below it
    # near the plot's left edge a label goes to the right of its point, or above or below it, never past the edge
    edge = scatter.place_labels([(75, 100, "rate=1/s, size=256MiB")], area=(72, 0, 640, 340),
                                taken=[(140, 95, 150, 105)])
    assert edge[0] is not None and edge[0][2] == "start"


def test_a_heat_map_colours_on_a_fixed_labelled_scale():
    """73.8 % and 73.9 % are nearly the same colour on 0-100 %, not the two ends of the ramp; the key is ticked."""
    chart = svg.heat_map("fig-1", "hit", ["a", "b"], ["x"], [[0.738, 0.739]], x_label="rate", y_label="size",
                         value_format=svg.fmt_share, lower_is_better=False, key_label="hit ratio")
    fills = re.findall(r'<rect [^>]*fill="(#[0-9a-f]{6})" stroke="#fff"><title>', chart)
    assert len(fills) == 2 and fills[0] == fills[1]
    for tick in ("0%", "20%", "100%", "hit ratio"):
        assert f">{tick}</text>" in chart
    assert svg.colour_range([0.046, 0.048], svg.fmt_seconds) == (0.0, 0.05)


def test_bars_have_box_swatches_and_their_values_written_next_to_them():
    chart = svg.bar_chart("fig-1", "bytes", ["ddr", "nvme"], [svg.Bars("read", [3 * 2 ** 30, 0.0]),
                                                             svg.Bars("written", [2 ** 20, 5 * 2 ** 30])],
                          value_label="bytes", value_format=svg.fmt_bytes)
    assert '<g class="legend"' in chart and "<line" not in re.search(r'<g class="legend".*?</g>', chart, re.S)[0]
    values = re.findall(r'class="value" fill="#333">([^<]*)</text>', chart)
    assert values == ["3 GiB", "1 MiB", "0", "5 GiB"]       # a sliver and a zero still say what they are
    ticks = re.findall(r'<text [^>]*y="[^"]*" text-anchor="middle" font-size="11">([^<]*)</text>', chart)
    assert ticks[:3] == ["0", "1 GiB", "2 GiB"]              # binary units, as the tables print bytes


def test_tick_labels_read_as_values():
    assert svg.fmt_seconds(1000) == "1,000 s" and svg.fmt_seconds(0.12) == "120 ms"
    assert svg.fmt_bytes(250 * 2 ** 20) == "250 MiB" and svg.fmt_bytes(1.5 * 2 ** 40) == "1.5 TiB"
    log = svg.Scale.fit([10e6, 10e12], 0, 100, log=True, binary=True)
    assert [svg.fmt_bytes(t) for t in log.ticks()] == ["1 MiB", "32 MiB", "1 GiB", "32 GiB", "1 TiB", "32 TiB"]
    close = svg.dollars_telling_apart([0.1656, 0.1658])
    ticks = [close(t) for t in svg.Scale.fit([0.1656, 0.1658], 0, 100).ticks()]
    assert len(set(ticks)) == len(ticks) and close(0.1656) == "$0.16560"


def test_a_sweep_with_cost_per_point_draws_the_frontier(files, tmp_path):
    """Sweep points carry their cost (kvplan.cost), so the page plots cost against p99 TTFT and a cost heat map."""
    assert all(p["cost"]["usd_per_hour"] > 0 for p in json.loads(files["grid"].read_text())["points"])
    page = report(files["grid"], tmp_path / "sweep.html")
    assert ">Cost against p99 TTFT: the Pareto frontier</title>" in page and 'class="frontier"' in page
    assert ">cost ($/h) over workload.arrivals.session_rate and lmcache.ddr.size</title>" in page


# --- Markdown --------------------------------------------------------------------------------------

def test_markdown_has_the_same_tables_and_names_the_plots(files, tmp_path):
    md = report(files["ablation"], tmp_path / "report.md")
    mark, md = md.split("\n", 1)
    assert mark.startswith("<!-- written by kvplan report ")              # hidden when rendered; --overwrite's mark
    assert md.startswith("# local: 2 seeds (1..2), ablation (2 seeds)\n")
    assert "| setup | req/s | TTFT p50 | TTFT p99 | TPOT p50 | E2E p50 | recomputed | HBM blocks |" in md
    assert "| tier | tokens | share | tok hit | chunk hit | read | written | evicted | peak fill |" in md
    assert "- TTFT: share of requests within x: Empirical CDF" in md
    assert "<svg" not in md


def test_every_json_kvplan_writes_becomes_a_page(files, tmp_path):
    """simulate (one run, --seeds --ablate), sweep, size, capacity and plan: each file is read by its keys."""
    titles = {}
    for which, source in files.items():
        result = kvplan("report", source, "-o", tmp_path / f"{which}.html")
        assert result.exit_code == 0, f"{which}: {result.output}"
        titles[which] = re.search(r"<h1>(.*?)</h1>", (tmp_path / f"{which}.html").read_text())[1]
    assert titles["plan"].startswith("plan: #") and " at $" in titles["plan"]
    assert titles["capacity"].startswith("local: capacity ")
    assert titles["doctor"].startswith("local: doctor, ")
    assert titles["snapshot"] == "live snapshot: 2/3 components up"
    rows = json.loads(files["compare"].read_text())["rows"]
    assert titles["compare"] == f"predicted against observed: {len(rows)} metrics"


def test_a_snapshot_page_lists_the_components_and_draws_where_prompt_tokens_came_from(files, tmp_path):
    page = report(files["snapshot"], tmp_path / "snapshot.html")
    assert '<th scope="row">ceph</th><td>DOWN</td><td>ceph df: timed out</td>' in page
    bars = re.findall(r'<rect [^>]*><title>http://127.0.0.1:8000 — ([^<]*)</title>', page)
    assert bars == ["hbm (prefix cache): 60%", "LMCache: 25%", "computed: 15%"]


@pytest.mark.parametrize("command, says", [("validate", "is the resolved spec `kvplan validate --json` prints"),
                                           ("catalog", "is the catalog `kvplan catalog --json` prints")])
def test_json_that_is_not_an_answer_is_refused_with_what_it_is(tmp_path, command, says):
    printed = kvplan(command, *(["examples/local.yaml"] if command == "validate" else []), "--json")
    assert printed.exit_code == 0, printed.output
    source = tmp_path / f"{command}.json"
    source.write_text(printed.stdout)
    result = kvplan("report", source, "-o", tmp_path / "r.html")
    assert result.exit_code == 1 and says in result.output and "fix:" in result.output


def test_a_compare_page_gives_each_metric_its_error_as_compare_prints_it(files, tmp_path):
    rows = {row["metric"]: row for row in json.loads(files["compare"].read_text())["rows"]}
    page = report(files["compare"], tmp_path / "compare.html")
    ttft = rows["TTFT p50"]
    assert re.search(rf'<th scope="row">TTFT p50</th><td>[^<]+</td><td>[^<]+</td><td>{ttft["error"] * 100:+.1f} %</td>',
                     page)
    hbm = rows["prompt tokens from hbm"]                 # a share: its error is in percentage points already
    assert f'<td>{hbm["error"]:+.1f} pp</td>' in page
    for title in ("Latency: predicted and observed", "Relative error of each metric"):
        assert f">{title}</title>" in page


def test_a_doctor_page_holds_the_findings_their_fixes_and_what_each_proven_fix_changed(files, tmp_path):
    diagnosis = json.loads(files["doctor"].read_text())
    assert diagnosis["findings"], "the small spec has a finding (its ddr tier duplicates HBM)"
    page = report(files["doctor"], tmp_path / "doctor.html")
    for finding in diagnosis["findings"]:
        assert f'<th scope="row">{html.escape(finding["title"]).replace("&#x27;", "&#39;")}</th>' in page
        if finding["fixes"]:
            assert f"<caption>{finding['code']}: fixes</caption>" in page
    proven = {fix["proof"]["label"] for f in diagnosis["findings"] for fix in f["fixes"]
              if fix["proof"] and fix["proof"]["verdict"] != "refused"}
    for label in proven:
        assert f">{label} before and after each fix</title>" in page


def test_a_plan_page_holds_the_answer_the_ledger_and_cost_against_the_slo(files, tmp_path):
    plan = json.loads(files["plan"].read_text())
    page = report(files["plan"], tmp_path / "plan.html")
    for heading in ("Answer", "Ledger", "Cost against the SLO"):
        assert f"<h2>{heading}</h2>" in page
    assert "<caption>Every candidate, cheapest first</caption>" in page
    assert page.count("<td>WINNER</td>") == 1 and f'<th scope="row">{plan["winner"]}</th>' in page
    assert len(re.findall(r"<tr>", page.split("Every candidate, cheapest first")[1])) >= len(plan["candidates"])
    assert re.search(r'<title id="fig-\d+-title">Cost against TTFT p99</title>', page)
    simulated = [c for c in plan["candidates"] if c["measured"]]
    assert f"{len(simulated)} simulated candidates; on the frontier: " in page
    assert "SLO: TTFT p99 2 s" in page                        # the target drawn as a line


def test_a_plan_page_shows_headroom_when_the_file_carries_one(files, tmp_path):
    """A later kvplan adds headroom to the plan; the page shows what it finds, never drops it."""
    plan = json.loads(files["plan"].read_text())
    plan["headroom"] = {"rate_per_s": 3.5, "share": 0.75}
    winner = next(c for c in plan["candidates"] if c["index"] == plan["winner"])
    winner["capacity"] = 3.5
    source = tmp_path / "plan.json"
    source.write_text(json.dumps(plan))
    page = report(source, tmp_path / "plan.html")
    assert "<caption>The winner&#39;s headroom</caption>" in page and '<th scope="row">capacity</th>' in page
    assert "Also in this plan file: headroom" in page and '<th scope="row">headroom: rate_per_s</th>' in page


def test_a_capacity_page_draws_latency_against_load_with_the_limit_marked(files, tmp_path):
    found = json.loads(files["capacity"].read_text())
    page = report(files["capacity"], tmp_path / "capacity.html")
    assert "<h2>Latency against load</h2>" in page and "<caption>Every probe, by load</caption>" in page
    plot = re.search(r"<svg[^>]*>\s*<title[^>]*>TTFT p99 against load</title>.*?</svg>", page, re.S)[0]
    assert re.search(r'<g class="mark"><title>capacity [\d.]+/s</title>', plot)
    assert "SLO TTFT p99 1 s" in plot
    assert plot.count("<circle") == sum(1 for p in found["probes"] if p["metrics"].get("ttft_p99"))


def test_an_ablation_over_seeds_keeps_every_seed(files, tmp_path):
    """--ablate --seeds 2 writes each setup's run under each seed; the page compares their means and lists each."""
    data = json.loads(files["ablation"].read_text())
    assert all([r["seed"] for r in entry["results"]] == [1, 2] for entry in data["ablation"])
    page = report(files["ablation"], tmp_path / "report.html")
    assert "<h1>local: 2 seeds (1..2), ablation (2 seeds)</h1>" in page
    assert "<caption>TTFT p99 of each setup under each seed</caption>" in page
    assert "vs the row above (2 seeds, paired)" in page


def test_an_ablation_file_of_an_earlier_kvplan_still_reads(files, tmp_path):
    """Earlier files hold one result per setup (the first seed's): read as a one-seed ablation."""
    data = json.loads(files["ablation"].read_text())
    data["ablation"] = [{"setup": e["setup"], "result": e["results"][0]} for e in data["ablation"]]
    older = tmp_path / "older.json"
    older.write_text(json.dumps(data))
    page = report(older, tmp_path / "report.html")
    assert "ablation (seed 1)" in page and "TTFT p99 of each setup under each seed" not in page


def test_a_run_page_marks_its_saturated_device(files, tmp_path):
    """The verdict of kvplan.sim.bottleneck: named in the summary, its bar set apart in the busy shares."""
    data = json.loads(files["result"].read_text())
    for link in data["links"]:
        link["utilisation"] = 0.85 if link["name"] == "nvme/0" else 0.1
    data["engine_busy"] = [0.3 for _ in data["engine_busy"]]
    busy = tmp_path / "busy.json"
    busy.write_text(json.dumps(data))
    page = report(busy, tmp_path / "report.html")
    assert "<caption>Bottleneck</caption>" in page
    assert "nvme/0 is 85% busy (saturated from 80%): reads and writes of the nvme tier on node 0" in page
    plot = re.search(r"<svg[^>]*>\s*<title[^>]*>Busy share of the engines and every link</title>.*?</svg>", page, re.S)[0]
    marked = re.findall(r'<rect [^>]*fill="#D55E00"><title>([^<]*)</title>', plot)
    assert marked == ["nvme/0: 85%"]
    for title in ("Requests waiting over time", "TTFT over time"):
        assert f">{title}</title>" in page


# --- plotting pieces -------------------------------------------------------------------------------

def test_a_cdf_keeps_real_sample_values_and_ends_at_one():
    values = np.random.default_rng(0).lognormal(size=10_000)
    xs, ys = cdf(values, max_points=400)
    assert len(xs) <= 401 and ys[0] == 0.0 and ys[-1] == 1.0
    assert set(xs) <= set(values.tolist()) and xs == sorted(xs)


def test_ticks_are_round_numbers_covering_the_data():
    scale = svg.Scale.fit([0.013, 0.87], 0, 100)
    assert scale.lo == 0.0 and scale.hi == 1.0 and scale.ticks() == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    log = svg.Scale.fit([0.004, 2.5], 0, 100, log=True)
    assert (log.lo, log.hi) == (0.001, 10.0) and log.ticks() == [0.001, 0.01, 0.1, 1.0, 10.0]


# --- bad input -------------------------------------------------------------------------------------

@pytest.mark.parametrize("content, says", [
    (None, "no such file"),
    ('{"name": "x", "per_request"', "is not JSON"),
    ("[1, 2]", "holds a JSON array"),
    ('{"requests": 3}', "is JSON but not a kvplan result"),
    ('{"results": []}', "holds no results"),
    ('{"name": "x", "spec_hash": "ab", "per_request": {}}', "Field required"),
])
def test_a_bad_input_names_the_file_the_problem_and_a_fix(tmp_path, content, says):
    source = tmp_path / "input.json"
    if content is not None:
        source.write_text(content)
    result = kvplan("report", source, "-o", tmp_path / "r.html")
    assert result.exit_code == 1
    assert str(source) in result.output and says in result.output and "fix:" in result.output
    assert not (tmp_path / "r.html").exists()


def test_an_unknown_report_format_is_a_usage_error(files, tmp_path):
    result = kvplan("report", files["result"], "-o", tmp_path / "report.pdf")
    assert result.exit_code == 2 and "neither .html nor .md" in result.output


def test_simulate_does_not_load_the_report_renderer():
    """The plotting and page code is imported by `kvplan report` only."""
    code = ("import sys; from typer.testing import CliRunner; from kvplan.cli import app; "
            "r = CliRunner().invoke(app, ['simulate', 'examples/local.yaml', '--format', 'md']); assert r.exit_code == 0; "
            "print(sorted(m for m in sys.modules if m.startswith('kvplan.report')))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    assert not {"kvplan.report.svg", "kvplan.report.html", "kvplan.report.figures"} & set(eval(loaded.stdout))


# --- in a real browser -----------------------------------------------------------------------------

CHECK = """<script>
/* Injected by the test, before the page's own policy: records every error and, once loaded,
   which plots have a box and drawn marks, into the element #kvplan-check. */
(function () {
  var errors = [];
  window.addEventListener("error", function (e) {
    errors.push("error: " + (e.message || (e.target && (e.target.src || e.target.href)) || "a resource failed"));
  }, true);
  window.addEventListener("unhandledrejection", function (e) { errors.push("rejection: " + e.reason); });
  document.addEventListener("securitypolicyviolation", function (e) {
    errors.push("blocked: " + e.violatedDirective + " " + e.blockedURI);
  });
  var consoleError = console.error;
  console.error = function () {
    errors.push("console.error: " + Array.prototype.join.call(arguments, " "));
    consoleError.apply(console, arguments);
  };
  window.addEventListener("load", function () {
    var plots = Array.prototype.slice.call(document.querySelectorAll("svg.plot"));
    var drawn = plots.filter(function (plot) {
      var box = plot.getBoundingClientRect();
      var marks = Array.prototype.slice.call(plot.querySelectorAll("path, rect, circle, line")).filter(function (m) {
        var b = m.getBBox();
        return b.width > 0 || b.height > 0;
      });
      return box.width > 0 && box.height > 0 && marks.length > 0;
    });
    /* every label inside its plot's box, and no two labels of a plot on top of one another */
    var clipped = [], overlaps = [];
    plots.forEach(function (plot) {
      var box = plot.getBoundingClientRect();
      var texts = Array.prototype.slice.call(plot.querySelectorAll("text")).map(function (t) {
        return {text: t.textContent, r: t.getBoundingClientRect()};
      });
      texts.forEach(function (t, i) {
        if (t.r.left < box.left - 1 || t.r.right > box.right + 1 || t.r.top < box.top - 1 || t.r.bottom > box.bottom + 1) {
          clipped.push(plot.id + ": " + t.text);
        }
        texts.slice(i + 1).forEach(function (u) {
          var w = Math.min(t.r.right, u.r.right) - Math.max(t.r.left, u.r.left);
          var h = Math.min(t.r.bottom, u.r.bottom) - Math.max(t.r.top, u.r.top);
          if (w > 1 && h > 3) { overlaps.push(plot.id + ": " + t.text + " / " + u.text); }
        });
      });
    });
    var footer = document.querySelector("footer").getBoundingClientRect();
    var out = document.createElement("pre");
    out.id = "kvplan-check";
    out.textContent = JSON.stringify({plots: plots.length, drawn: drawn.map(function (p) { return p.id; }),
                                      errors: errors, resources: performance.getEntriesByType("resource").length,
                                      clipped: clipped, overlaps: overlaps,
                                      height: Math.ceil(document.documentElement.scrollHeight),
                                      footer_bottom: Math.ceil(footer.bottom + window.scrollY)});
    document.body.appendChild(out);
  });
})();
</script>"""


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium")
    assert exe, "Debian's chromium is missing: apt-get install -y chromium (./install.sh test installs it)"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--hide-scrollbars", f"--user-data-dir={profile}"]
    return subprocess.run([exe, *flags, *args], capture_output=True, text=True, timeout=90)


def browser_check(page: Path, tmp_path: Path) -> dict:
    """Open a copy of `page` with CHECK injected first in <head>; return what CHECK found."""
    checked = tmp_path / f"checked-{page.name}"
    checked.write_text(page.read_text().replace("<head>", "<head>\n" + CHECK, 1))
    result = chromium("--virtual-time-budget=10000", "--dump-dom", checked.as_uri(), profile=tmp_path / "profile")
    found = re.search(r'<pre id="kvplan-check">(.*?)</pre>', result.stdout, re.S)
    assert found, f"chromium printed no check result (exit {result.returncode}):\n{result.stderr[-2000:]}"
    return json.loads(found[1].replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.mark.stack
@pytest.mark.parametrize("which", ["result", "ablation", "grid", "size", "capacity", "plan", "doctor", "compare",
                                   "snapshot"])
def test_chromium_draws_every_plot_without_errors(files, tmp_path, which):
    page = tmp_path / "report.html"
    text = report(files[which], page)
    found = browser_check(page, tmp_path)
    assert found["errors"] == []
    assert found["resources"] == 0                              # nothing fetched: the page is all there is
    assert found["plots"] == text.count('<svg class="plot"') > 0
    assert found["drawn"] == [f"fig-{i}" for i in range(1, found["plots"] + 1)]
    assert found["clipped"] == [], "labels cut off at a plot's edge"
    assert found["overlaps"] == [], "labels drawn over one another"

    # the whole page in one screenshot, footer included: nothing is cut at the bottom
    shot = tmp_path / "report.png"
    height = found["height"]
    result = chromium(f"--window-size=1280,{height}", f"--screenshot={shot}", page.as_uri(), profile=tmp_path / "profile")
    assert shot.exists(), result.stderr[-2000:]
    assert png_size(shot) == (1280, height)
    assert found["footer_bottom"] <= height
    assert shot.stat().st_size > 60_000, "the screenshot is nearly blank"
