"""Run settings: flags over a resumed run's settings over the config file over the environment."""

from __future__ import annotations

import pytest
from kforge.agent.settings import RunSettings, SettingsError, detected_device, resolve

ENV = {"OPENAI_BASE_URL": "http://env/v1", "OPENAI_API_KEY": "sk-env", "KFORGE_MODEL": "env-model"}


def test_precedence(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[kforge]\nmodel = "config-model"\nrounds = 7\ntemperature = 0.2\n')
    settings = resolve({"rounds": 3, "device": None}, config=config, saved={"temperature": 0.9}, env=ENV)
    assert (settings.base_url, settings.api_key) == ("http://env/v1", "sk-env")
    assert settings.model == "config-model" and settings.rounds == 3 and settings.temperature == 0.9
    assert settings.device == detected_device() and settings.endpoint_configured


def test_the_key_is_never_written_or_shown():
    settings = RunSettings(api_key="sk-secret", model="m")
    assert "api_key" not in settings.to_json() and "sk-secret" not in repr(settings)


def test_bad_settings_are_one_line_errors(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("roundz = 2\n")
    with pytest.raises(SettingsError, match="unknown settings roundz"):
        resolve({}, config=config, env={})
    with pytest.raises(SettingsError, match="no such config file"):
        resolve({}, config=tmp_path / "missing.toml", env={})
    with pytest.raises(SettingsError, match="device must be cuda or cpu"):
        resolve({"device": "tpu"}, env={})


def test_no_endpoint_and_no_embedded_policy_says_so_in_one_line(tmp_path, monkeypatch):
    import importlib.util

    from kforge.agent.cli import app
    from typer.testing import CliRunner

    if importlib.util.find_spec("kforge.agent.policy.embedded") is not None:
        pytest.skip("the embedded policy exists: with no endpoint it runs")
    for var in ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no user config file
    task = "tests/fixtures/agent/tasks/add_relu.py"
    result = CliRunner().invoke(app, ["optimize", task, "--device", "cpu", "--out", str(tmp_path)])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "no LLM endpoint configured" in lines[0]
    assert not any(tmp_path.glob("*/run.json"))  # nothing half-made
