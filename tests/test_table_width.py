"""Every table kvplan prints fits a 120-column terminal, and nothing in it wraps into a stack of short lines.

A table wider than the terminal leaves out or shortens the columns its `Section.narrow` names (never the ones
that carry the answer: SLO figures, cost, verdicts), says so in a footer line, and `--wide` prints it whole.
A key/value table keeps each key on one line and wraps its text as a paragraph. Each command runs in-process
with the console 120 columns wide; every table it prints is rendered again as the console renders it.
"""

from __future__ import annotations

import io

import pytest
from rich.table import Table
from typer.testing import CliRunner

from kvplan.cli import app
from kvplan.cli import console as cli_console
from kvplan.cli.console import TextConsole

pytestmark = pytest.mark.unit

COLUMNS = 120
FOOTER = "--wide shows all"


def run(monkeypatch, *args: str) -> tuple[str, list[Table]]:
    """`kvplan ARGS` on a 120-column console: its stdout and every table it printed."""
    printed: list[Table] = []
    real_print = cli_console.out.print

    def recording(*objects, **kwargs):
        printed.extend(o for o in objects if isinstance(o, Table))
        return real_print(*objects, **kwargs)

    monkeypatch.setattr(cli_console.out, "print", recording)
    monkeypatch.setattr(cli_console.out, "width", COLUMNS)
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code in (0, 4, 6), result.output
    assert printed, f"kvplan {' '.join(args)} printed no table"
    return result.stdout, printed


def plain(text) -> str:
    """A title, header or cell as text (kvplan builds them as str or as rich Text)."""
    return getattr(text, "plain", str(text))


def lines(table: Table, width: int) -> list[str]:
    """The table as kvplan's console prints it at `width` columns."""
    console = TextConsole(file=io.StringIO(), color_system=None)
    console.width = width          # after it is made: off a terminal without COLUMNS it takes no limit
    console.print(table)
    return console.file.getvalue().splitlines()


def assert_fits(tables: list[Table]) -> None:
    for table in tables:
        printed = lines(table, COLUMNS)
        widest = max(printed, key=len)
        assert len(widest) <= COLUMNS, f"{table.title}: {len(widest)} columns:\n" + "\n".join(printed)
        if table.show_header:   # a cell that wrapped adds a line: the table prints as many as with no limit
            assert len(printed) == len(lines(table, 1_000_000)), f"{table.title}: a cell wrapped:\n" + "\n".join(printed)
            header = printed[plain(table.title).count("\n") + 2]
            assert sum(line == header for line in printed) == 1
        else:                   # every key on a line of its own: the first column never breaks
            keys = [plain(cell) for cell in table.columns[0].cells] if len(table.columns) > 1 else []
            for key in keys:
                assert any(line.startswith(f"│ {key} ") for line in printed), f"{table.title}: key {key!r} broke"


COMMANDS = {
    "validate": ["validate", "examples/local.yaml"],
    "validate-cluster": ["validate", "examples/cluster.yaml"],
    "validate-native": ["validate", "docs/examples/native-offload.yaml"],
    "simulate": ["simulate", "examples/mooncake-replay.yaml"],
    "simulate-seeds": ["simulate", "examples/local.yaml", "--seeds", "3"],
    "simulate-ablate": ["simulate", "examples/local.yaml", "--ablate"],
    "simulate-ablate-seeds": ["simulate", "examples/local.yaml", "--ablate", "--seeds", "2"],
    "size": ["size", "examples/mooncake-replay.yaml"],
    "capacity": ["capacity", "examples/local.yaml", "--slo", "ttft_p99=500ms", "--seeds", "2", "--no-cache"],
    "sweep": ["sweep", "examples/local.yaml", "--vary", "serving.max_num_seqs=2,8", "--vary",
              "workload.arrivals.session_rate=1/s,3/s", "--vary", "lmcache.ddr.size=1GiB", "--seeds", "2",
              "--no-cache"],
    "plan": ["plan", "examples/local.yaml", "--rate", "32/s", "--slo", "ttft_p99=300ms", "--no-cache"],
    "plan-top": ["plan", "examples/local.yaml", "--rate", "16/s", "--slo", "ttft_p99=300ms", "--top", "2",
                 "--no-cache"],
    "catalog": ["catalog"],
    "compare": ["compare", "docs/fidelity/rag.yaml", "--observed", "docs/fidelity/run-rag"],
}


@pytest.mark.parametrize("name", COMMANDS)
def test_every_table_fits_120_columns_without_a_wrapped_cell(monkeypatch, name):
    _, tables = run(monkeypatch, *COMMANDS[name])
    assert_fits(tables)


def test_the_ablation_leaves_out_columns_keeps_the_answer_and_says_which(monkeypatch):
    stdout, tables = run(monkeypatch, *COMMANDS["simulate-ablate-seeds"])
    ablation = next(t for t in tables if plain(t.title).startswith("Ablation"))
    headers = [plain(c.header) for c in ablation.columns]
    assert {"TTFT p99", "recomputed", "$/h", "SLO"} <= set(headers)
    assert "HBM blocks" not in headers
    footer = next(line for line in stdout.splitlines() if FOOTER in line)
    assert footer.startswith("left out: HBM blocks") and "shortened: vs the row above" in footer
    changes = [plain(cell) for cell in ablation.columns[-1].cells][1:]
    assert changes and all(("differs" in c) != ("within noise" in c) for c in changes)   # one of the two, the shorter


def test_wide_prints_the_ablation_whole_past_the_terminal(monkeypatch):
    stdout, tables = run(monkeypatch, *COMMANDS["simulate-ablate-seeds"], "--wide")
    ablation = next(t for t in tables if plain(t.title).startswith("Ablation"))
    assert "HBM blocks" in [plain(c.header) for c in ablation.columns]
    assert FOOTER not in stdout
    assert max(len(line) for line in stdout.splitlines() if "± " in line) > COLUMNS
    assert "within noise: " in stdout


def test_the_plan_shortens_verdicts_then_drops_eviction_and_wide_restores_them(monkeypatch):
    stdout, tables = run(monkeypatch, *COMMANDS["plan"])
    candidates = next(t for t in tables if plain(t.title).startswith("Candidates"))
    headers = [plain(c.header) for c in candidates.columns]
    assert "eviction" not in headers and {"$/h", "TTFT p99", "verdict"} <= set(headers)
    verdicts = [plain(cell) for cell in candidates.columns[-1].cells]
    assert "WINNER" in verdicts and "cheaper, misses TTFT p99 (stopped)" in verdicts
    assert "left out: eviction; shortened: verdict; --wide shows all" in stdout

    stdout, tables = run(monkeypatch, *COMMANDS["plan"], "--wide")
    candidates = next(t for t in tables if plain(t.title).startswith("Candidates"))
    assert "eviction" in [plain(c.header) for c in candidates.columns]
    assert "requests over it)" in stdout and FOOTER not in stdout


def test_a_plan_over_seeds_leaves_out_vs_winner_then_prints_means_until_its_top_table_fits(monkeypatch):
    stdout, tables = run(monkeypatch, "plan", "examples/local.yaml", "--rate", "8/s", "--slo", "ttft_p99=300ms",
                         "--slo", "e2e_p99=2s", "--slo", "tpot_p50=20ms", "--seeds", "2", "--max-runs", "30",
                         "--no-cache")
    top = next(t for t in tables if plain(t.title).startswith("Top"))
    assert_fits([top])
    assert [plain(c.header) for c in top.columns] == ["rank", "candidate", "$/h", "TTFT p99", "TPOT p50", "E2E p99"]
    assert not any(" ± " in plain(cell) for cell in top.columns[3].cells)     # the first SLO column: its means
    assert "left out: vs winner; shortened: TTFT p99" in stdout
    stdout, _ = run(monkeypatch, "plan", "examples/local.yaml", "--rate", "8/s", "--slo", "ttft_p99=300ms",
                    "--slo", "e2e_p99=2s", "--slo", "tpot_p50=20ms", "--seeds", "2", "--max-runs", "30",
                    "--no-cache", "--wide")
    assert "vs winner" in stdout and " ± " in stdout and FOOTER not in stdout


def test_the_catalog_leaves_out_the_example_drive_and_wide_shows_it(monkeypatch):
    stdout, _ = run(monkeypatch, "catalog")
    assert "left out: example; --wide shows all" in stdout and "Samsung PM9A3" not in stdout
    stdout, _ = run(monkeypatch, "catalog", "--wide")
    assert "Samsung PM9A3" in stdout and FOOTER not in stdout


def test_a_table_that_fits_is_left_whole(monkeypatch):
    stdout, tables = run(monkeypatch, *COMMANDS["simulate-ablate"])
    ablation = next(t for t in tables if plain(t.title).startswith("Ablation"))
    assert len(ablation.columns) == 11            # every column: only the last one was shortened to fit
    assert "shortened: vs the row above; --wide shows all" in stdout


def test_off_a_terminal_every_column_prints_whole(monkeypatch):
    """A pipe (no terminal, no COLUMNS) has no width to fit: `kvplan plan ... | grep` sees every column."""
    monkeypatch.setattr(cli_console.out, "width", cli_console.WIDE)
    result = CliRunner().invoke(app, COMMANDS["plan"], catch_exceptions=False)
    assert "eviction" in result.stdout and FOOTER not in result.stdout
