"""The command line as it stands before the index commands: version, help,
the quickstart, and one-line errors."""
import json

from click.testing import CliRunner

from sobolev_index import __version__
from sobolev_index.cli import main


def test_version_and_help():
    runner = CliRunner()
    result = runner.invoke(main, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output
    result = runner.invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "quickstart" in result.output


def test_quickstart_json_reports_a_working_pipeline():
    result = CliRunner().invoke(main, ["quickstart", "--json", "--seed", "3"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["nodes"] <= 300 and report["edges"] >= report["nodes"] - 1
    assert len(report["results"]) == 2
    chance = 1 / report["topics"]
    for row in report["results"]:
        assert row["pairs"] == report["measures"] * (report["measures"] - 1) // 2
        # Bags of one topic sit around the same anchors: S_1 must beat chance clearly.
        assert row["accuracy"] > 2 * chance


def test_library_errors_become_one_line():
    result = CliRunner().invoke(main, ["quickstart", "--seed", "-1"])
    assert result.exit_code == 1
    assert result.output.startswith("Error: ") and result.output.count("\n") == 1
