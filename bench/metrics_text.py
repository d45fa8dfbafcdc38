"""Prometheus text exposition as the cluster bench reads it from each broker's ``/metrics``.

``parse_metrics`` turns the text into samples (name, labels, value); ``metric_sum`` and
``metric_by`` add up the samples of one name that match some labels (in total, or per value of
one label); ``scrape`` fetches and parses a broker's page. Pure apart from ``scrape``.
"""

from __future__ import annotations

import urllib.request

Sample = tuple[str, dict[str, str], float]


def parse_metrics(text: str) -> list[Sample]:
    """Samples of a Prometheus text exposition: (name, labels, value); comments skipped.

    Label values may hold escaped quotes and backslashes (``\\"``, ``\\\\``, ``\\n``).
    Raises ValueError on a line that is not a sample."""
    out: list[Sample] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        labels: dict[str, str] = {}
        brace = line.find("{")
        if brace < 0:
            name, _, rest = line.partition(" ")
        else:
            name, i = line[:brace], brace + 1
            while True:
                while i < len(line) and line[i] in " ,":
                    i += 1
                if i >= len(line):
                    raise ValueError(f"unterminated labels: {line!r}")
                if line[i] == "}":
                    i += 1
                    break
                eq = line.index("=", i)
                key = line[i:eq].strip()
                if line[eq + 1] != '"':
                    raise ValueError(f"unquoted label value: {line!r}")
                j, value = eq + 2, []
                while line[j] != '"':
                    if line[j] == "\\":
                        j += 1
                        value.append({"n": "\n"}.get(line[j], line[j]))
                    else:
                        value.append(line[j])
                    j += 1
                labels[key] = "".join(value)
                i = j + 1
            rest = line[i:]
        fields = rest.split()
        if not name or not fields:
            raise ValueError(f"not a sample: {line!r}")
        out.append((name, labels, float(fields[0])))
    return out


def metric_sum(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(v for n, lab, v in samples
               if n == name and all(lab.get(k) == want for k, want in labels.items()))


def metric_by(samples: list[Sample], name: str, label: str, **labels: str) -> dict[str, float]:
    """``name``'s samples matching ``labels``, summed per value of ``label``."""
    out: dict[str, float] = {}
    for n, lab, v in samples:
        if n == name and label in lab and all(lab.get(k) == w for k, w in labels.items()):
            out[lab[label]] = out.get(lab[label], 0.0) + v
    return out


def scrape(port: int) -> list[Sample]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return parse_metrics(r.read().decode())
