"""Kafka's ``sasl.jaas.config`` value: one JAAS login module with its options.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret";

Grammar (as Kafka's ``JaasConfig`` reads it): a login module class name, a control flag
(``required``, ``requisite``, ``sufficient``, ``optional``), any number of ``name=value`` options
and a closing ``;``. A value is a double-quoted string (``\\"`` and ``\\\\`` escape a quote and a
backslash; other ``\\x`` stand for ``x``) or a bare word. Kafka requires exactly one login module
in ``sasl.jaas.config``; so does this parser. Errors never quote option values (they may be
passwords).

For the PLAIN module, ``user_<name>="<password>"`` options are the users the broker accepts;
``username``/``password`` are the broker's own login (Kafka uses it for inter-broker connections).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasError(ValueError):
    """A JAAS config that cannot be read; the message says where (never an option's value)."""


@dataclass(frozen=True, slots=True)
class JaasEntry:
    login_module: str
    flag: str
    options: Mapping[str, str] = field(default_factory=dict)

    def plain_users(self) -> dict[str, str]:
        """``user_<name>`` options: {name: password}."""
        return {k[len("user_"):]: v for k, v in self.options.items()
                if k.startswith("user_") and len(k) > len("user_")}


def _tokens(text: str, where: str) -> list[tuple[str, str]]:
    """Split into ('word'|'string'|'=' |';', text) tokens.

    Raises:
        JaasError: an unterminated quoted string or a stray character.
    """
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "=;":
            out.append((c, c))
            i += 1
        elif c == '"':
            buf: list[str] = []
            i += 1
            while True:
                if i >= n:
                    raise JaasError(f"{where}: a quoted value is not closed")
                c = text[i]
                if c == "\\" and i + 1 < n:
                    buf.append(text[i + 1])
                    i += 2
                elif c == '"':
                    i += 1
                    break
                else:
                    buf.append(c)
                    i += 1
            out.append(("string", "".join(buf)))
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in '=;"':
                i += 1
            out.append(("word", text[start:i]))
    return out


def parse_jaas_config(text: str, where: str = "sasl.jaas.config") -> JaasEntry:
    """Parse one login module. ``where`` names the config in error messages.

    Raises:
        JaasError: empty, no control flag, a malformed option, no closing ';', or more than one
            login module.
    """
    toks = _tokens(text, where)
    if not toks:
        raise JaasError(f"{where} is empty; expected '<LoginModule> required <options>;'")
    kind, module = toks[0]
    if kind != "word":
        raise JaasError(f"{where}: expected a login module class name first")
    if len(toks) < 2 or toks[1][0] != "word" or toks[1][1].lower() not in FLAGS:
        raise JaasError(f"{where}: login module {module} must be followed by a control flag "
                        f"({', '.join(FLAGS)})")
    flag = toks[1][1].lower()
    options: dict[str, str] = {}
    i = 2
    while True:
        if i >= len(toks):
            raise JaasError(f"{where}: the login module {module} must end with ';'")
        kind, value = toks[i]
        if kind == ";":
            i += 1
            break
        if (kind != "word" or i + 2 >= len(toks) or toks[i + 1][0] != "="
                or toks[i + 2][0] not in ("word", "string")):
            raise JaasError(f"{where}: expected name=value or ';' after "
                            f"{'the control flag' if i == 2 else repr(toks[i - 3][1]) + '=...'}")
        if value in options:
            raise JaasError(f"{where}: option {value!r} is given twice")
        options[value] = toks[i + 2][1]
        i += 3
    if i != len(toks):
        raise JaasError(f"{where} must contain exactly one login module")
    return JaasEntry(module, flag, options)
