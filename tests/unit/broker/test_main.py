"""`shoal broker`'s startup line and help (broker/main.py)."""

from __future__ import annotations

import pytest

from broker.main import listening_line, main


def test_a_listener_named_after_its_protocol_is_named_once() -> None:
    assert listening_line("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092) == (
        "listening on 127.0.0.1:9092 (PLAINTEXT)")


def test_a_custom_listener_name_comes_with_its_protocol() -> None:
    assert listening_line("INTERNAL", "SASL_SSL", "0.0.0.0", 9093) == (
        "listening on 0.0.0.0:9093 (listener INTERNAL, SASL_SSL)")


def test_broker_help_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["broker", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for default in ("default 127.0.0.1:9092", "default ./data", "(default: INFO)",
                    "(default: plain)", "docs/configuration.md"):
        assert default in text, default
