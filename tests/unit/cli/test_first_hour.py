"""CLI rough edges a new user hits first: kafka-configs.sh's [a,b] values, help on every flag."""

from __future__ import annotations

import argparse

import pytest

from cli.configs import parse_add_config
from cli.main import main
from client.admin_wire import CliError


def test_a_value_with_commas_goes_in_brackets() -> None:
    assert parse_add_config(["cleanup.policy=[compact,delete],retention.ms=1000"]) == [
        ("cleanup.policy", "compact,delete"), ("retention.ms", "1000")]
    assert parse_add_config(["a=1", "b = 2 "]) == [("a", "1"), ("b", "2")]


def test_an_unbracketed_comma_value_is_refused_with_the_bracket_form() -> None:
    with pytest.raises(CliError) as info:
        parse_add_config(["cleanup.policy=compact,delete"])
    assert info.value.exit_code == 2
    assert info.value.message == (
        "invalid --add-config 'delete'; a value with commas goes in brackets, as in "
        "kafka-configs.sh: 'cleanup.policy=[compact,delete]'")
    with pytest.raises(CliError, match="use NAME=VALUE"):
        parse_add_config(["nonsense"])


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}

    def grab(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        found.update(next(a for a in self._actions
                          if isinstance(a, argparse._SubParsersAction)).choices)
        raise SystemExit(0)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(argparse.ArgumentParser, "parse_args", grab)
        with pytest.raises(SystemExit):
            main([])
    return found


def test_every_flag_of_every_command_has_help() -> None:
    commands = _subcommands()
    assert {"broker", "share-groups", "consumer-groups", "topics", "configs", "acls",
            "users"} <= set(commands)
    missing = [(name, a.option_strings[0]) for name, p in commands.items()
               for a in p._actions if a.option_strings and not a.help]
    assert missing == []


def test_share_group_offsets_are_deleted_per_topic_and_a_partition_list_says_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    """kafka-share-groups.sh deletes whole topics' offsets; `orders:0,9` is a usage error that
    names the form to use, before anything is sent (no broker listens on port 1)."""
    with pytest.raises(SystemExit) as info:
        main(["share-groups", "--bootstrap-server", "127.0.0.1:1", "--delete-offsets",
              "--group", "workers", "--topic", "orders:0,9"])
    assert info.value.code == 2
    assert ("--delete-offsets deletes a share group's offsets of whole topics; give "
            "--topic orders (not orders:0,9)") in capsys.readouterr().err
