"""Parsing Nsight Compute CSV and compute-sanitizer text, on output recorded on an H100
(tests/fixtures/profile/), and the wiring of ncu_metrics and sanitize around a worker."""

from __future__ import annotations

from pathlib import Path

import pytest
from kforge.tools import profile
from kforge.tools.sandbox import WorkerOutcome

SAMPLES = Path(__file__).parent / "fixtures" / "profile"
DURATIONS_NS = [58080.0, 42144.0, 41888.0]  # gpu__time_duration.sum of the three kernels


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def outcome(log: str = "", result: dict | None = None, returncode: int = 0) -> WorkerOutcome:
    return WorkerOutcome(
        result=result, returncode=returncode, timed_out=False, out_of_memory=False, elapsed_s=1.0, log=log
    )


# --- ncu ---------------------------------------------------------------------------------


def test_ncu_rows_skip_banner_and_units() -> None:
    rows = profile._ncu_rows(sample("ncu_raw.csv"))
    assert len(rows) == 3
    assert [profile._num(r[profile.DURATION]) for r in rows] == DURATIONS_NS
    assert "elementwise_kernel" in rows[0]["Kernel Name"]


def test_summarize_ncu_weights_by_kernel_time() -> None:
    summary = profile.summarize_ncu(profile._ncu_rows(sample("ncu_raw.csv")))
    assert summary["kernels"] == 3
    assert summary["gpu_time_ns"] == sum(DURATIONS_NS)
    dram = (60.58 * 58080 + 80.42 * 42144 + 80.84 * 41888) / sum(DURATIONS_NS)
    assert summary["dram_throughput_pct"] == pytest.approx(dram, abs=0.01)
    sm = (59.06 * 58080 + 7.60 * 42144 + 19.61 * 41888) / sum(DURATIONS_NS)
    assert summary["sm_throughput_pct"] == pytest.approx(sm, abs=0.01)
    assert 0 < summary["achieved_occupancy_pct"] <= 100
    stalls = summary["top_stalls"]
    assert 1 <= len(stalls) <= 3
    assert stalls[0]["reason"] == "long_scoreboard"
    assert [s["cycles_per_issue"] for s in stalls] == sorted(
        (s["cycles_per_issue"] for s in stalls), reverse=True
    )
    assert {s["reason"] for s in stalls} <= set(profile.STALL_REASONS)
    kernels = summary["top_kernels"]  # each of the three recorded kernels, longest first
    assert [k["share_pct"] for k in kernels] == [
        pytest.approx(100 * d / sum(DURATIONS_NS), abs=0.1) for d in DURATIONS_NS
    ]
    assert kernels[0]["name"].startswith("void elementwise_kernel") and kernels[0]["launches"] == 1
    assert kernels[0]["sm_throughput_pct"] == pytest.approx(59.06, abs=0.1)
    assert kernels[1]["dram_throughput_pct"] == pytest.approx(80.42, abs=0.1)
    line = profile.describe_ncu(summary)
    assert "long_scoreboard" in line and "longest void elementwise_kernel" in line and "(SM 59%" in line


def test_ncu_rows_of_text_without_a_table() -> None:
    assert profile._ncu_rows("") == []
    assert profile._ncu_rows("==PROF== Connected to process 1\n==ERROR== no kernels were profiled\n") == []


def test_num_reads_thousands_separators() -> None:
    assert profile._num("58,080") == 58080.0
    assert profile._num("n/a") == 0.0
    assert profile._num(None) == 0.0


def test_ncu_command_profiles_the_nvtx_range_into_a_log_file(tmp_path: Path) -> None:
    command = profile.ncu_command(tmp_path / "ncu.csv")
    assert command[0] == "ncu"
    assert command[command.index("--log-file") + 1] == str(tmp_path / "ncu.csv")
    assert command[command.index("--nvtx-include") + 1] == "kforge_profile/"
    assert "--csv" in command and command[command.index("--page") + 1] == "raw"
    metrics = command[command.index("--metrics") + 1].split(",")
    assert profile.DURATION in metrics
    assert set(profile.HEADLINE) <= set(metrics)
    assert profile.STALL_METRIC.format("long_scoreboard") in metrics


def test_ncu_metrics_runs_the_forward_under_ncu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(profile.shutil, "which", lambda name: f"/usr/local/cuda/bin/{name}")
    prefixes: list[list[str]] = []

    def run_forward(prefix: list[str]) -> WorkerOutcome:
        prefixes.append(prefix)
        Path(prefix[prefix.index("--log-file") + 1]).write_text(sample("ncu_raw.csv"))
        return outcome(result={"status": "ok"})

    summary = profile.ncu_metrics(run_forward, tmp_path)
    assert len(prefixes) == 1 and prefixes[0][0] == "ncu"
    assert summary["kernels"] == 3
    assert summary["gpu_time_ns"] == sum(DURATIONS_NS)


def test_ncu_metrics_reports_a_crashed_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(profile.shutil, "which", lambda name: f"/usr/bin/{name}")
    summary = profile.ncu_metrics(lambda prefix: outcome(log="Segmentation fault", returncode=-11), tmp_path)
    assert "ncu reported no kernels" in summary["error"]
    assert "SIGSEGV" in summary["error"]
    assert "Segmentation fault" in summary["log"]


def test_ncu_metrics_without_ncu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(profile.shutil, "which", lambda name: None)

    def never(prefix: list[str]) -> WorkerOutcome:
        raise AssertionError("must not run without ncu")

    assert profile.ncu_metrics(never, tmp_path) == {"error": "ncu not found on PATH"}


# --- compute-sanitizer ---------------------------------------------------------------


def test_memcheck_clean() -> None:
    assert profile.parse_sanitizer(sample("memcheck_clean.txt")) == {
        "errors": 0,
        "findings": [],
        "completed": True,
    }


def test_memcheck_out_of_bounds_write() -> None:
    report = profile.parse_sanitizer(sample("memcheck_oob.txt"))
    assert report["errors"] == 111618
    assert report["completed"]
    assert report["findings"] == ["Invalid __global__ write of size 16 bytes"]


def test_memcheck_findings_are_capped_at_ten() -> None:
    text = "========= Invalid __global__ read of size 4 bytes\n" * 25 + "========= ERROR SUMMARY: 25 errors\n"
    report = profile.parse_sanitizer(text)
    assert report["errors"] == 25
    assert len(report["findings"]) == 10


def test_racecheck_clean_and_hazard() -> None:
    clean = profile.parse_sanitizer(sample("racecheck_clean.txt"))
    assert clean["errors"] == 0 and clean["completed"] and clean["findings"] == []
    racy = profile.parse_sanitizer(sample("racecheck_hazard.txt"))
    assert racy["errors"] == 1
    assert racy["completed"]
    assert any("Race reported between Write access" in f for f in racy["findings"])


def test_sanitizer_output_cut_short_is_not_completed() -> None:
    report = profile.parse_sanitizer("========= COMPUTE-SANITIZER\nKilled\n")
    assert report == {"errors": None, "findings": [], "completed": False}


def test_sanitize_runs_memcheck_and_racecheck(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile.shutil, "which", lambda name: f"/usr/local/cuda/bin/{name}")
    logs = {"memcheck": sample("memcheck_oob.txt"), "racecheck": sample("racecheck_clean.txt")}
    tools: list[str] = []

    def run_forward(prefix: list[str]) -> WorkerOutcome:
        assert prefix[0] == "compute-sanitizer"
        tool = prefix[prefix.index("--tool") + 1]
        tools.append(tool)
        return outcome(log=logs[tool])

    report = profile.sanitize(run_forward)
    assert tools == ["memcheck", "racecheck"]
    assert report["memcheck"]["errors"] == 111618
    assert report["racecheck"]["errors"] == 0


def test_sanitize_without_the_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile.shutil, "which", lambda name: None)
    assert profile.sanitize(lambda prefix: outcome()) == {"error": "compute-sanitizer not found on PATH"}
