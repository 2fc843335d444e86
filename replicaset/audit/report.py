"""The audit's outputs: a terminal summary and a self-contained HTML report with plots
(matplotlib, Agg backend, PNGs embedded as base64)."""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass
from typing import Any, TextIO

SUMMARY_VIOLATIONS_SHOWN = 10
SUMMARY_ROWS_SHOWN = 4
# How each kind of violation is drawn on the map: a range (a hole, a missing tail) as a
# bar over its LSNs, a single row as a marker.
MARK_STYLES = {
    "gap": {"color": "#c00000", "label": "gap (LSNs missing inside the WAL)"},
    "behind": {"color": "#ff8080", "label": "behind (missing tail: the set holds more)"},
    "duplicate": {"color": "black", "marker": "x", "label": "logged twice"},
    "out_of_order": {"color": "#e08000", "marker": "v", "label": "out of order"},
    "divergent": {"color": "#8000c0", "marker": "D", "label": "differs between members"},
}


@dataclass(frozen=True, slots=True)
class Mark:
    """Where one listed violation sits: on `member`'s WAL (None: every member's), origin
    `origin`, LSNs `low..high`."""

    member: str | None
    kind: str
    low: int
    high: int


def violation_marks(report: dict[str, Any]) -> dict[int, list[Mark]]:
    """The listed violations of every check, as marks per origin: what the violation map
    draws, so that the picture answers "where is it wrong" before the lists do."""
    marks: dict[int, list[Mark]] = {}
    for check in report["checks"]:
        for v in check["violations"]:
            if "origin" not in v or v.get("lsn") is None:
                continue
            name = check["name"]
            if name == "completeness":
                kind = "behind"
            elif name == "apply_once":
                kind = "duplicate"
            elif name == "agreement":
                kind = "divergent"
            elif name == "order":
                kind = v.get("kind", "gap")
            else:
                continue
            low, high = v["missing"] if v.get("missing") else (v["lsn"], v["lsn"])
            marks.setdefault(v["origin"], []).append(Mark(member=v.get("member"), kind=kind, low=low, high=high))
    return dict(sorted(marks.items()))


def _violation_note(violation: dict[str, Any], rows_max: int | None = None) -> str:
    """What a violation names besides its text, for the summary and the HTML alike: the missing
    (origin, lsn) range of a hole, and the rows (member:segment@offset), at most `rows_max`."""
    parts: list[str] = []
    if violation.get("missing"):
        first, last = violation["missing"]
        origin = violation["origin"]
        parts.append(f"missing {origin}:{first}" if first == last else
                     f"missing {origin}:{first}..{origin}:{last} ({last - first + 1} rows)")
    refs = [f"{r['member']}:{r['segment']}@{r['offset']}"
            for r in violation.get("rows", [])[:rows_max] if r.get("segment")]
    if refs:
        parts.append("rows " + ", ".join(refs))
    return "; ".join(parts)


def print_summary(report: dict[str, Any], out: TextIO) -> None:
    w = out.write
    w(f"replicaset audit: {report['rows_total']} WAL rows from {len(report['inputs'])} inputs "
      f"on {report['master']} in {report['timing_s']['total']:.1f} s\n")
    for i in report["inputs"]:
        w(f"  {i['member']:<12} {i['kind']:<6} id={i['instance_id']} segments={i['segments']} "
          f"start={i['wal_start_vclock']} horizon={i['horizon']} end={i['wal_end_vclock']} "
          f"checks {i['checks']}\n")
    w("rows per member and origin:\n")
    for r in report["rows_per_member_origin"]:
        w(f"  {r['member']:<12} origin {r['origin']:>2}: {r['rows']:>10} rows, lsn {r['min_lsn']}..{r['max_lsn']}\n")
    w(f"set maximum vclock: {report['max_vclock']}\n")
    for e in report["read_errors"]:
        w(f"READ ERROR {e.get('member')}: {e.get('segment', '')} {e.get('type', '')} {e['error']}\n")
    for e in report["warnings"]:
        w(f"warning {e['member']}: {e['segment']} {e['error']}\n")
    for c in report["checks"]:
        status = "skipped" if c["skipped"] else "ok" if c["ok"] else f"FAILED ({c['count']} violations)"
        w(f"{c['title']}: {status}\n")
        for v in c["violations"][:SUMMARY_VIOLATIONS_SHOWN]:
            note = _violation_note(v, SUMMARY_ROWS_SHOWN)
            w(f"    - {v['detail']}" + (f" [{note}]" if note else "") + "\n")
        if c["count"] > SUMMARY_VIOLATIONS_SHOWN:
            w(f"    ... {c['count'] - SUMMARY_VIOLATIONS_SHOWN} more (see --json/--html)\n")
    verdict = {0: "clean", 1: "violations found", 2: "read errors"}[report["exit_code"]]
    w(f"result: {verdict} (exit {report['exit_code']})\n")


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _violation_map(report: dict[str, Any]) -> str | None:
    """One panel per origin with violations: each member's WAL as a grey bar over the
    LSNs it holds of that origin, the set's highest LSN as a dashed line, and every listed
    violation where it sits (MARK_STYLES). None for a clean audit."""
    marks = violation_marks(report)
    if not marks:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    members = [i["member"] for i in report["inputs"]]
    held = {(r["member"], r["origin"]): (r["min_lsn"], r["max_lsn"]) for r in report["rows_per_member_origin"]}
    fig, axes = plt.subplots(len(marks), 1, figsize=(8, 0.5 + 0.45 * len(members) * len(marks)), squeeze=False)
    labelled: set[str] = set()
    for ax, (origin, found) in zip(axes[:, 0], marks.items()):
        for y, member in enumerate(members):
            span = held.get((member, origin))
            if span is not None:
                ax.barh(y, span[1] - span[0] + 1, left=span[0], height=0.25, color="#d0d0d0")
        top = report["max_vclock"].get(origin, report["max_vclock"].get(str(origin)))
        if top:
            ax.axvline(top + 0.5, color="#606060", linestyle="--", linewidth=1)
        for mark in found:
            style = MARK_STYLES[mark.kind]
            label = style["label"] if mark.kind not in labelled else None
            labelled.add(mark.kind)
            rows = range(len(members)) if mark.member is None else [members.index(mark.member)]
            for y in rows:
                if "marker" in style:
                    ax.plot([mark.low], [y], linestyle="none", marker=style["marker"], color=style["color"],
                            markersize=8, label=label)
                else:  # a bar over the range, and a tick that stays visible over millions of LSNs
                    ax.barh(y, mark.high - mark.low + 1, left=mark.low - 0.5, height=0.6, color=style["color"],
                            label=label)
                    ax.plot([(mark.low + mark.high) / 2], [y], linestyle="none", marker="|", markersize=16,
                            markeredgewidth=3, color=style["color"])
                label = None
        ax.set_yticks(range(len(members)))
        ax.set_yticklabels(members)
        ax.set_ylim(-0.7, len(members) - 0.3)
        ax.invert_yaxis()
        ax.set_title(f"origin {origin}", loc="left", fontsize="medium")
    axes[-1, 0].set_xlabel("LSN (dashed: the set's highest)")
    fig.tight_layout()
    handles, labels = [], []
    for ax in axes[:, 0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    axes[0, 0].legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return _png(fig)


def _plots(report: dict[str, Any]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = []
    tl = report["timeline"]
    if tl["series"]:
        fig, ax = plt.subplots(figsize=(8, 3.2))
        for origin, counts in tl["series"].items():
            xs = [i * tl["bucket_ms"] / 1000 for i in range(len(counts))]
            ax.plot(xs, counts, label=f"origin {origin}")
        ax.set_xlabel(f"seconds since {tl['start_ms']} ms (HLC physical)")
        ax.set_ylabel(f"rows per {tl['bucket_ms']} ms")
        ax.legend()
        plots.append(("Rows per origin over time", _png(fig)))
    per = report["rows_per_member_origin"]
    if per:
        members = sorted({r["member"] for r in per})
        origins = sorted({r["origin"] for r in per})
        fig, ax = plt.subplots(figsize=(8, 3.2))
        width = 0.8 / max(1, len(members))
        set_top = {o: report["max_vclock"].get(o, report["max_vclock"].get(str(o), 0)) for o in origins}
        for i, m in enumerate(members):
            tops = {r["origin"]: r["max_lsn"] for r in per if r["member"] == m}
            xs = [o + i * width for o in range(len(origins))]
            ax.bar(xs, [tops.get(o, 0) for o in origins], width=width, label=m)
            # What a member lacks of the set's highest LSN, stacked on its bar in red.
            short = [max(0, (set_top[o] or 0) - tops.get(o, 0)) for o in origins]
            if any(short):
                ax.bar(xs, short, bottom=[tops.get(o, 0) for o in origins], width=width, color="#c00000",
                       label="behind the set" if "behind the set" not in ax.get_legend_handles_labels()[1] else None)
        ax.set_xticks([o + 0.4 - width / 2 for o in range(len(origins))])
        ax.set_xticklabels([f"origin {o}" for o in origins])
        ax.set_ylabel("highest LSN in the WAL")
        ax.legend()
        plots.append(("LSN frontier per member and origin", _png(fig)))
    delay = report["replication_delay"]
    if delay.get("histogram"):
        edges = delay["bucket_edges_ms"]
        labels = [f"<{edges[i + 1]}" if i + 1 < len(edges) else f">={edges[i]}" for i in range(len(edges))]
        fig, ax = plt.subplots(figsize=(8, 3.2))
        members = list(delay["histogram"])
        width = 0.8 / max(1, len(members))
        for i, m in enumerate(members):
            ax.bar([b + i * width for b in range(len(edges))], delay["histogram"][m], width=width, label=m)
        ax.set_xticks(range(len(edges)))
        ax.set_xticklabels(labels, rotation=45)
        ax.set_xlabel("replication delay, ms (upper bound from HLC stamps)")
        ax.set_ylabel("rows")
        ax.legend()
        plots.append(("Replication delay distribution", _png(fig)))
    return plots


def render_html(report: dict[str, Any]) -> str:
    e = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>replicaset audit</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px}.bad{color:#b00}.ok{color:#070}</style>",
             "</head><body><h1>replicaset WAL-merge audit</h1>",
             f"<p>{report['rows_total']} WAL rows, {len(report['inputs'])} inputs, master "
             f"{e(report['master'])}, {report['timing_s']['total']:.1f} s, exit code {report['exit_code']}</p>",
             "<h2>Inputs</h2><table><tr><th>member</th><th>kind</th><th>id</th><th>segments</th>"
             "<th>WAL start (GC horizon)</th><th>horizon incl. checkpoints</th><th>WAL end</th></tr>"]
    for i in report["inputs"]:
        parts.append(f"<tr><td>{e(i['member'])}</td><td>{i['kind']}</td><td>{i['instance_id']}</td>"
                     f"<td>{i['segments']}</td><td>{i['wal_start_vclock']}</td><td>{i['horizon']}</td>"
                     f"<td>{i['wal_end_vclock']}</td></tr>")
    parts.append("</table><h2>Checks</h2><table><tr><th>check</th><th>result</th></tr>")
    for c in report["checks"]:
        status = ("<span>skipped: " + e(c["skipped"]) + "</span>" if c["skipped"] else
                  "<span class='ok'>ok</span>" if c["ok"] else f"<span class='bad'>{c['count']} violations</span>")
        parts.append(f"<tr><td>{e(c['title'])}</td><td>{status}</td></tr>")
    parts.append("</table>")
    violation_map = _violation_map(report)
    if violation_map is not None:
        title = "Where the violations are"
        parts.append(f"<h2 class='bad'>{title}</h2><img alt='{title}' src='{violation_map}'>")
    if report["read_errors"]:
        parts.append("<h2 class='bad'>Read errors</h2><ul>")
        parts.extend(f"<li>{e(str(x))}</li>" for x in report["read_errors"])
        parts.append("</ul>")
    for c in report["checks"]:
        if c["violations"]:
            parts.append(f"<h3 class='bad'>{e(c['title'])}</h3><ul>")
            for v in c["violations"]:
                note = _violation_note(v)
                parts.append(f"<li>{e(v['detail'])}" + (f" <small>[{e(note)}]</small>" if note else "") + "</li>")
            parts.append("</ul>")
    parts.append("<h2>Rows per member and origin</h2><table><tr><th>member</th><th>origin</th>"
                 "<th>rows</th><th>lsn</th></tr>")
    for r in report["rows_per_member_origin"]:
        parts.append(f"<tr><td>{e(r['member'])}</td><td>{r['origin']}</td><td>{r['rows']}</td>"
                     f"<td>{r['min_lsn']}..{r['max_lsn']}</td></tr>")
    parts.append("</table>")
    for title, src in _plots(report):
        parts.append(f"<h2>{e(title)}</h2><img alt='{e(title)}' src='{src}'>")
    d = report["replication_delay"]
    parts.append(f"<p><small>Delay method: {e(d.get('method', ''))}</small></p>")
    if d.get("per_member"):
        parts.append("<table><tr><th>member</th><th>rows</th><th>p50</th><th>p90</th><th>p99</th><th>max</th></tr>")
        for m, s in d["per_member"].items():
            parts.append(f"<tr><td>{e(m)}</td><td>{s['rows']}</td><td>{s['p50_ms']}</td><td>{s['p90_ms']}</td>"
                         f"<td>{s['p99_ms']}</td><td>{s['max_ms']}</td></tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts)
