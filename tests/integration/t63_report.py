#!/usr/bin/env python3
"""t63_report.py: `wdrift report` writes a page that stands alone and renders.

- A live daemon computes a study (t64_export.live_study: two proxies, a
  tensor named with quotes and markup) under alert rules of metric ratio
  and w1. The page names the study, its runs, its alerts and thresholds,
  escapes the names, and fetches nothing: no http(s) URL in src, href or
  url() (the SVG namespace aside), no script.
- Headless Chromium renders it with no console message (a copy with a
  script that logs an error and calls an undefined function proves the
  check sees them), into a screenshot that is not blank and shows the
  heatmap's blue and red.
- A drift log of 300 tensors x 1000 steps (candidate, 2 proxies, written
  here with h5py in the documented format): the report's time and size
  are printed, the size bounded, the heatmap is tensors down and steps
  across (checked cell by cell against the data), its labels do not
  overlap, and it renders.
- Odd logs draw finite charts in bounded time: one step, steps near 2^52
  and 2^62, a wall time of 1e300, a narrow ratio range, no rows, no values.
- Usage errors: no -o, --json, --endpoint: exit 2; a missing study: exit 1.
- At a glance (issue 15): each run has one colour in every chart, legend
  and table, twelve runs twelve colours, named at their lines' ends clear
  of each other; one ratio panel per candidate and proxy, each with the
  line ratio = 1 and on the same axes; one capped colour scale for every
  heatmap; no column for a step where the proxy's (or the candidate's) W1
  is 0, with a note saying so; the summary at the latest complete step,
  naming it and the later incomplete one. The ratio panels' reference and
  threshold lines lie under the data, their labels over it on a white halo.
- Scales: a pair firing at ratio 1.6 beside pairs far below 1 reads red
  (the red side capped by the ratios above 1 alone, the blue side by those
  below: docs/report.md), the pairs below 1 in shades of blue; the top
  tensors are ranked by the first trained proxy's ratio, named in the
  heading, even when the synthetic proxy comes first in the log.

Set WDRIFT_TEST_KEEP=DIR to keep the pages and screenshots there.
"""
import base64
import io
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import t64_export  # noqa: E402
from harness import Daemon, check  # noqa: E402
from t64_export import AGG, ODD, ROW_TYPE, WDRIFT  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ALERTS = """\
alerts:
  - name: fa-ratio-fp16
    study: fa
    metric: ratio
    proxy: fp16
    threshold: 0.75
    severity: critical
  - name: fa-w1-max
    study: fa
    metric: w1
    threshold: 0.005
  - name: fa-layers-p2
    study: fa
    metric: ratio
    proxy: p2
    scope: tensors
    tensors: "layers.*"
    threshold: 2.5
  - name: fa-quiet
    study: fa
    metric: stalled
    threshold: 86400
"""
BLUE, RED = (0x21, 0x66, 0xAC), (0xB2, 0x18, 0x2B)   # the heatmap's ends (chart.c)
DIGIT_W = 7.1                                        # px: a digit at 11 px, DejaVu Sans


def report(*args, timeout=60, max_bytes=64 << 20):
    """wdrift report, its output bounded: a runaway writer is stopped, not left to fill the disk."""
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    t0 = time.time()
    try:
        r = subprocess.run([WDRIFT, "report", *args], capture_output=True, text=True, timeout=timeout,
                           preexec_fn=limit)
        return r.returncode, r.stdout, r.stderr.strip(), time.time() - t0
    except subprocess.TimeoutExpired:
        return "timeout", "", "", time.time() - t0


def chromium(html, shot, tmp, height=3000):
    """Renders html headless: (exit status, console lines, seconds)."""
    run = tempfile.mkdtemp(prefix="chromium-", dir=tmp)
    home, ud = os.path.join(run, "home"), os.path.join(run, "profile")
    os.makedirs(home)
    t0 = time.time()
    try:
        p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            "--disable-background-networking", "--enable-logging=stderr", "--v=0",
                            f"--user-data-dir={ud}", f"--window-size=1000,{height}", f"--screenshot={shot}",
                            "file://" + os.path.abspath(html)],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, HOME=home),
                           stdin=subprocess.DEVNULL)
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired:
        rc, err = "timeout", ""
    # Chromium logs each console message, of any level, at INFO with the
    # tag CONSOLE: '[pid:tid:date:INFO:CONSOLE:140] "x", source: file://...'
    console = [ln for ln in err.splitlines() if "CONSOLE" in ln]
    return rc, console, time.time() - t0


def on_ramp(px, end):
    """Pixels on the heatmap's ramp from white to `end`, away from white."""
    a = (255.0 - px) / (255.0 - np.array(end, float))
    return (a.max(axis=1) - a.min(axis=1) < 0.04) & (a.mean(axis=1) > 0.15)


def looks(shot):
    """(distinct colours, non-white fraction, blue ramp pixels, red ramp pixels) of a screenshot."""
    from PIL import Image
    px = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(float)
    colours = len(np.unique(px @ np.array([65536.0, 256.0, 1.0])))
    return colours, float(np.mean(px.min(axis=1) < 240)), int(on_ramp(px, BLUE).sum()), int(on_ramp(px, RED).sum())


def self_contained(html):
    """'' when the page loads nothing from outside it, else what it would fetch."""
    refs = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]*)""", html, re.I)
    refs += re.findall(r"""url\(\s*["']?([^"')]*)""", html, re.I)
    bad = [u for u in refs if not u.startswith("data:") and not u.startswith("#")]
    bad += [m for m in re.findall(r"https?://[^\s\"'<>)]*", html) if m != "http://www.w3.org/2000/svg"]
    for tag in ("<script", "<link", "<iframe", "<object", "<embed", "@import", "javascript:"):
        if tag in html.lower():
            bad.append(tag)
    return ", ".join(bad[:5])


def finite_svg(html):
    """'' when no SVG attribute holds nan or inf, else the first that does."""
    m = re.search(r"""\s(?:x|y|x1|x2|y1|y2|cx|cy|r|width|height|points|transform)="[^"]*(?:nan|inf)[^"]*\"""",
                  html, re.I)
    return m.group(0) if m else ""


def svgs(html, cls):
    return re.findall(r'<svg class="%s" viewBox="0 0 (\d+) (\d+)"(.*?)</svg>' % cls, html, re.S)


def labels_fit(html):
    """'' when every x tick label of every chart lies inside its SVG, clear of the next, else the first that does not."""
    for cls in ("chart", "heat"):
        for w, _, body in svgs(html, cls):
            right = {}                    # by line: where the last label ends
            for x, y, text in re.findall(r'<text x="([-\d.]+)" y="([-\d.]+)" class="xt">([^<]*)</text>', body):
                half = len(text) * DIGIT_W / 2
                if float(x) - half < max(0, right.get(y, 0)) or float(x) + half > int(w):
                    return f"{cls}: '{text}' at x={x} in a width of {w}, the last label ending at {right.get(y)}"
                right[y] = float(x) + half
    return ""


def heat_rows(body):
    """A heatmap's row labels: (y of each, in the SVG's own units, with its offset)."""
    m = re.search(r'<g transform="translate\(0 ([\d.]+)\)">', body)
    dy = float(m.group(1)) if m else 0.0
    return [float(y) + dy for y in re.findall(r'<text x="\d+" y="([\d.]+)" class="rl">', body)]


def heat_pngs(html):
    from PIL import Image
    return [np.asarray(Image.open(io.BytesIO(base64.b64decode(b))).convert("RGB"))
            for b in re.findall(r'href="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)]


def run_colours(html):
    """{run: {colours}} from every place the page draws a run: chart lines, line-end names, legends, swatches;
    and how many places named each run."""
    got, places = {}, {}
    for pat, order in ((r'<g class="series" stroke="(#[0-9a-f]{6})" fill="#[0-9a-f]{6}" data-run="([^"]*)"', 1),
                       (r'<text [^>]*class="el" style="fill:(#[0-9a-f]{6})" data-run="([^"]*)"', 1),
                       (r'<span data-run="([^"]*)"><i style="border-top: 3px \w+ (#[0-9a-f]{6})"', 0),
                       (r'<i class="sw" data-run="([^"]*)" style="background:(#[0-9a-f]{6})"', 0)):
        for m in re.findall(pat, html):
            run, colour = (m[1], m[0]) if order else m
            got.setdefault(run, set()).add(colour)
            places[run] = places.get(run, 0) + 1
    return got, places


def one_colour_each(html, runs):
    """'' when each of runs has one colour wherever it is drawn, and no two share one; else what is wrong."""
    got, places = run_colours(html)
    bad = [f"{r}: {sorted(c)}" for r, c in got.items() if len(c) != 1]
    bad += [f"{r}: never drawn" for r in runs if r not in got]
    firsts = [next(iter(c)) for c in got.values()]
    if len(set(firsts)) != len(firsts):
        bad.append(f"two runs share a colour: {got}")
    return "; ".join(bad)


def panels(html):
    """[(pair, the panel's SVG)] of the ratio chart's small multiples."""
    out = []
    for chunk in html.split('<div class="panel" data-pair="')[1:]:
        pair, rest = chunk.split('"', 1)
        out.append((pair.replace("&amp;", "&"), rest.split("</svg>", 1)[0]))
    return out


def panels_ok(html, pairs):
    """'' when there is one ratio panel per pair, each with the line ratio = 1, all on one y axis; else why not."""
    got = panels(html)
    if sorted(p for p, _ in got) != sorted(pairs):
        return f"panels {[p for p, _ in got]}, not {pairs}"
    for pair, svg in got:
        if '<line class="ref"' not in svg or "ratio = 1</text>" not in svg:
            return f"{pair}: no ratio = 1 line"
        # legible: reference and threshold lines under the data, their labels over it, on a white halo
        lines = [m.start() for m in re.finditer(r'<line class="(?:ref|thr)"', svg)]
        labels = re.findall(r'<text [^>]*class="(?:refl|thrl)"[^>]*>', svg)
        data = [m.start() for m in re.finditer(r'<g class="series"', svg)]
        first_label = min(m.start() for m in re.finditer(r'<text [^>]*class="(?:refl|thrl)"', svg))
        if not data or max(lines) > min(data) or first_label < max(data):
            return f"{pair}: the reference lines are not under the data, or their labels not over it"
        if not all('paint-order="stroke"' in t and 'stroke="#ffffff"' in t for t in labels):
            return f"{pair}: a line's label has no white halo"
    ticks = {tuple(re.findall(r'class="yt">([^<]*)<', svg)) for _, svg in got}
    return "" if len(ticks) == 1 else f"the panels' y axes differ: {ticks}"


def heat_caps(html):
    """The (red, blue) caps of each heatmap, and whether each one's key says 'darker: beyond'."""
    maps = re.findall(r'<svg class="heat" viewBox="[^"]*" data-cap="([^"]*)"(?: data-cap-lo="([^"]*)")?(.*?)</svg>',
                      html, re.S)
    return [(hi, lo) for hi, lo, _ in maps], all("darker: beyond" in body for _, _, body in maps)


def keep(*paths):
    d = os.environ.get("WDRIFT_TEST_KEEP")
    if d:
        os.makedirs(d, exist_ok=True)
        for p in paths:
            if os.path.exists(p):
                shutil.copy(p, d)


def live(tmp):
    ctx = zmq.Context()
    dm = Daemon(tmp)
    try:
        got = t64_export.live_study(ctx, dm, tmp, alerts=ALERTS)
        if not got:
            return
        cfg, log = got
        page = os.path.join(tmp, "report.html")
        rc, out, err, dt = report("fa", "-c", cfg, "-o", page)
        check(rc == 0 and out == "" and os.path.exists(page) and not [x for x in os.listdir(tmp) if ".tmp-" in x],
              f"report -c CFG -o report.html, daemon running: exit 0 in {dt:.2f} s, no temp file left ({err})")
        with open(page, encoding="utf-8") as f:
            html = f.read()
        bad = self_contained(html)
        check(not bad, f"self-contained: no URL in src, href or url() but data:, no script ({bad})")
        said = re.search(r'id="daemon-says">([^<]*)<code>', html)
        check(said and re.fullmatch(r"At step \d+, the latest it compared, as ", said.group(1)),
              "the daemon running: the page says what wdriftd says of the study now, at its latest step",
              said.group(0) if said else html[:2000])
        check("wdrift report: study fa" in html and "<title>wdrift: fa</title>" in html, "the study's name")
        check(all(f">{r}<" in html or f">{r} " in html for r in ("fa", "lowprec", "lowbf")) and ">base<" in html,
              "the runs: baseline, candidate, both proxies")
        check("fp16 = run lowprec; p2 = run lowbf" in html, "the proxies, label = run")
        want = ("fa-ratio-fp16", "fa-w1-max", "fa-layers-p2", "<td>0.75</td>", "<td>0.005</td>", "<td>2.5</td>",
                "alert fa-ratio-fp16: max ratio[fp16] &gt; 0.75",
                "alert fa-w1-max (max W1 &gt; 0.005), a threshold on the max W1 over tensors, not the mean",
                "ratio[p2] of layers.* &gt; 2.5", "critical")
        missing = [w for w in want if w not in html]
        check(not missing, f"the alert rules, their thresholds drawn on the charts and listed ({missing})")
        row = re.search(r"<tr><td>fa-quiet</td>.*?</tr>", html)
        check(row and '<td class="l">-</td><td>86400</td><td>-</td>' in row.group(0),
              "a stalled rule: no scope and no 'for' in its row, as the config allows neither (a trial read max, 1)",
              row.group(0) if row else html[-500:])
        esc = 'odd,&quot;name&quot; &lt;b&gt;&amp;amp; ü'
        check(esc in html and ODD not in html and "<b>" not in html,
              "a tensor named with quotes and markup is escaped wherever it appears")
        check(not finite_svg(html) and not labels_fit(html), f"finite coordinates, labels inside their charts "
              f"({finite_svg(html)}{labels_fit(html)})")
        pngs = heat_pngs(html)
        check(len(pngs) == 2 and all(p.shape == (4, 3, 3) for p in pngs),
              f"a heatmap per proxy, 4 tensors x 3 steps ({[p.shape for p in pngs]})")
        # at a glance (issue 15)
        bad = one_colour_each(html, ("fa", "lowprec", "lowbf"))
        _, places = run_colours(html)
        check(not bad and places.get("fa", 0) >= 8,
              f"one colour per run in every chart, legend and table, fa in {places.get('fa')} places ({bad})")
        check(not panels_ok(html, ["fa / fp16", "fa / p2"]),
              f"one ratio panel per candidate and proxy, each with ratio = 1, on one axis ({panels_ok(html, ['fa / fp16', 'fa / p2'])})")
        pn = dict(panels(html))
        check("alert fa-ratio-fp16" in pn.get("fa / fp16", "") and "alert fa-ratio-fp16" not in pn.get("fa / p2", "")
              and "alert fa-layers-p2" in pn.get("fa / p2", ""), "a panel draws the thresholds of its proxy's alerts only")
        caps, keyed = heat_caps(html)
        check(len(caps) == 2 and len(set(caps)) == 1 and keyed, f"one colour scale for both heatmaps, capped ({caps})")
        # step 30: lowbf never came; the summary reads step 20, and says so
        check("Summary at step 20, the latest complete step" in html and 'data-step="20"' in html
              and "Step 30 is later but incomplete (lowbf not compared there; " in html
              and "with the largest ratio [fp16] at step 20</h3>" in html,
              "the summary and the top tensors at step 20, the latest complete step; step 30 named incomplete")
        rc, out, err, dt = report("fa", "-c", cfg, "-o", "-")
        check(rc == 0 and out.startswith("<!DOCTYPE html>") and out.endswith("</html>\n") and err == "",
              "-o -: standard output, nothing said on stderr", err)
        # usage errors and a missing study
        for args, code, what in ((["fa", "-c", cfg], 2, "no -o"), (["fa", "-c", cfg, "-o", page, "--json"], 2, "--json"),
                                 (["fa", "-c", cfg, "-o", page, "--endpoint", "ipc:///x"], 2, "--endpoint"),
                                 (["-c", cfg, "-o", page], 2, "no STUDY"),
                                 (["nope", "-c", cfg, "-o", os.path.join(tmp, "nope.html")], 1, "a missing study")):
            rc, out, err, dt = report(*args)
            check(rc == code and err and (code == 2 or ("no study 'nope'" in err and len(err.splitlines()) == 1)),
                  f"{what}: exit {code} ({err.splitlines()[0] if err else ''})")
        check(not os.path.exists(os.path.join(tmp, "nope.html")), "a missing study writes no page")
        rc, out, err, dt = report("--help")
        check(rc == 0 and out.startswith("usage: wdrift report"), "report --help")
        check(dm.stop() == 0, "SIGTERM")
        rc, out, err, dt = report("fa", "-c", cfg, "-o", page)
        check(rc == 0, f"report with the daemon stopped: exit 0 ({err})")
        check(err.startswith("wdrift report: wdriftd did not answer (") and "the page leaves out why runs have no "
              "rows (`wdrift drift fa` says it while wdriftd runs)" in err and err.count("\n") == 1,
              "... and stderr says the page lacks the daemon's reasons, once, before the written line", err)
        shot = os.path.join(tmp, "report.png")
        rc, console, dt = chromium(page, shot, tmp)
        check(rc == 0 and os.path.exists(shot), f"Chromium renders the page: exit {rc} in {dt:.1f} s")
        check(not console, f"no console message ({console[:2]})")
        colours, ink, blue, red = looks(shot) if os.path.exists(shot) else (0, 0, 0, 0)
        print(f"# screenshot: {colours} colours, {ink:.1%} not white, heatmap blue {blue} px, red {red} px")
        # the map's image is 600 px wide, 14 px a tensor: 4 rows, 2 maps; the key is 240 x 10 px a map
        check(colours > 100 and ink > 0.05 and blue > 12000 and red > 4000,
              "the screenshot is not blank: many colours, ink, the heatmap's blue and red")
        neg = os.path.join(tmp, "negative.html")
        with open(neg, "w", encoding="utf-8") as f:
            f.write(html.replace("</body>", '<script>console.error("x"); undefinedFunction();</script></body>'))
        rc, console, dt = chromium(neg, os.path.join(tmp, "negative.png"), tmp)
        check(rc == 0 and len(console) >= 2 and any("undefinedFunction" in c for c in console),
              f"negative control: a page that logs an error and calls an undefined function is caught ({len(console)} "
              f"console lines)")
        blank = os.path.join(tmp, "blank.html")
        with open(blank, "w") as f:
            f.write("<!DOCTYPE html><html><body><p>x</p></body></html>\n")
        rc, console, dt = chromium(blank, os.path.join(tmp, "blank.png"), tmp)
        c2, ink2, blue2, red2 = looks(os.path.join(tmp, "blank.png"))
        check(rc == 0 and not (c2 > 100 and ink2 > 0.05) and blue2 < 100 and red2 < 100,
              f"negative control: a blank page is seen as blank ({c2} colours, {ink2:.2%} ink, {blue2}, {red2})")
        keep(page, shot)
    finally:
        harness.teardown(dm, tmp, ctx)


def synthetic(path, T=300, S=1000):
    """A drift log as the daemon writes it: fa (candidate), p16run and pbfrun (proxies).

    The ratio of tensor i at step j is 2^band[j, i]: bands of tensors above
    and below 1 that move with the steps. The candidate's first 50 steps
    were first written without ratios (the proxies came later), then again
    with them. Returns band and the number of rows written."""
    kinds = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "input_layernorm",
             "post_attention_layernorm", "norm", "rotary.inv_freq", "extra"]
    names = [f"model.layers.{i // 12}.{'self_attn' if i % 12 < 4 else 'mlp'}.{kinds[i % 12]}.weight"
             for i in range(T)]
    steps = np.arange(1, S + 1, dtype=np.int64) * 100
    rt = np.dtype(ROW_TYPE + [("ratio", "<f8", (2,))])
    rng = np.random.default_rng(63)
    numel = rng.integers(1000, 4_000_000, T).astype(np.uint64)
    p16 = np.sqrt(steps / steps[-1])[:, None] * 1e-3 * rng.uniform(0.8, 1.2, T)[None, :]
    pbf = p16 * 2.0
    band = np.sin(np.arange(T) / 15.0)[None, :] * 1.5 + np.linspace(-1, 1, S)[:, None]
    cand = p16 * np.exp2(band)
    blocks = []
    for run, w in ((0, cand), (1, p16), (2, pbf)):
        r = np.zeros(S * T + 3 * S, rt)
        t = r[:S * T]
        t["step"] = np.repeat(steps, T)
        t["tensor"] = np.tile(np.arange(T), S)
        t["run"] = run
        t["role"] = 1 if run == 0 else 2
        t["w1"] = w.ravel()
        t["max_abs_diff"] = w.ravel() * 7
        t["rel_l2"] = w.ravel() * 1.3
        t["numel"] = np.tile(numel, S)
        t["wall"] = 1.7e9 + np.repeat(np.arange(S), T)
        t["ratio"] = np.nan
        if run == 0:
            t["ratio"][:, 0] = (w / p16).ravel()
            t["ratio"][:, 1] = (w / pbf).ravel()
        ag = r[S * T:].reshape(S, 3)
        for k in range(3):
            a = ag[:, k]
            a["step"], a["tensor"], a["run"], a["kind"], a["role"] = steps, AGG, run, k + 1, 1 if run == 0 else 2
            a["numel"] = int(numel.sum())
            a["wall"] = 1.7e9 + np.arange(S)
            agg = [lambda v: np.average(v, axis=1, weights=numel.astype(float)), lambda v: np.median(v, axis=1),
                   lambda v: v.max(axis=1)][k]
            a["w1"] = agg(w)
            a["max_abs_diff"] = a["rel_l2"] = a["ratio"] = np.nan
            if run == 0:
                for j, p in enumerate((p16, pbf)):
                    a["ratio"][:, j] = agg(w / p)
        blocks.append(r)
    rows = np.concatenate(blocks)
    early = rows[(rows["run"] == 0) & (rows["step"] <= steps[49])].copy()
    early["ratio"] = np.nan
    rows = np.concatenate([early, rows])
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("rows", data=rows, maxshape=(None,), chunks=(4096,))
        for n, v in (("tensors", names), ("runs", ["fa", "p16run", "pbfrun"]), ("proxies", ["fp16", "bf16"])):
            f.create_dataset(n, data=np.array(v, "S1024"), maxshape=(None,), chunks=(64,))
    return band, len(rows)


def scale(tmp):
    log = os.path.join(tmp, "big.h5")
    t0 = time.time()
    band, n = synthetic(log)
    print(f"# synthetic log: 300 tensors x 1000 steps x 3 runs, {n} rows, {os.path.getsize(log) >> 20} MiB, "
          f"written in {time.time() - t0:.1f} s")
    page = os.path.join(tmp, "big.html")
    rc, out, err, dt = report("big", "--log", log, "-o", page, timeout=120)
    size = os.path.getsize(page) if os.path.exists(page) else 0
    print(f"# report of 300 x 1000: {dt:.2f} s, {size} bytes ({size / 1e6:.2f} MB)")
    check(rc == 0 and dt < 30, f"report --log of 300 tensors x 1000 steps: exit 0 within the 30 s bound ({err})")
    check(err == f"wdrift report: wrote {page}: study 'big', 1000 steps (100 to 100000)",
          "-o FILE: says what it wrote, once, on stderr", err)
    check(0 < size < 20e6, "the page is under 20 MB")
    with open(page, encoding="utf-8") as f:
        html = f.read()
    check(not self_contained(html) and not finite_svg(html) and not labels_fit(html),
          f"self-contained, finite, labels inside ({self_contained(html)}{finite_svg(html)}{labels_fit(html)})")
    check("1000 compared steps, 300 tensors" in html and "300 tensors × 1000 snapshots" in html,
          "the page counts 1000 steps and 300 tensors")
    pngs = heat_pngs(html)
    check(len(pngs) == 2 and all(p.shape == (300, 1000, 3) for p in pngs),
          f"two heatmaps, each an image of 300 rows (tensors) x 1000 columns (steps) ({[p.shape for p in pngs]})")
    if len(pngs) == 2:
        # fp16: ratio 2^band; bf16: 2^(band - 1). Red where above 1, blue below.
        wrong = checked = 0
        for img, shift in zip(pngs, (0, 1)):
            b = band - shift
            for i, j in ((3, 10), (30, 990), (150, 500), (260, 20), (299, 999), (0, 0), (120, 700), (200, 300)):
                want = "red" if b[j, i] > 0.6 else "blue" if b[j, i] < -0.6 else None
                r, _, bl = img[i, j].astype(int)
                got = "red" if r > bl + 20 else "blue" if bl > r + 20 else "white"
                wrong += want is not None and want != got
                checked += want is not None
        check(wrong == 0 and checked >= 10, f"each cell's colour is its tensor's ratio at its step: tensors down, "
                                            f"steps across ({wrong} of {checked} cells wrong)")
    heat = svgs(html, "heat")
    ys = heat_rows(heat[0][2]) if heat else []
    gaps = np.diff(ys) if len(ys) > 1 else np.array([0])
    check(len(ys) >= 50 and gaps.min() >= 11 and ys[0] - 10 >= 0,
          f"row labels: {len(ys)} of 300, at least 11 px apart (10 px text), the first inside the map "
          f"({gaps.min() if len(ys) > 1 else None} px, first at {ys[0] if ys else None})")
    check(html.count('<rect class="hover"') == 600, "every row has its full name on hover, in both maps")
    shot = os.path.join(tmp, "big.png")
    rc, console, dt = chromium(page, shot, tmp)
    check(rc == 0 and os.path.exists(shot) and not console,
          f"Chromium renders the 300 x 1000 page in {dt:.1f} s, no console message ({rc}, {console[:2]})")
    colours, ink, blue, red = looks(shot) if os.path.exists(shot) else (0, 0, 0, 0)
    print(f"# screenshot: {colours} colours, {ink:.1%} not white, heatmap blue {blue} px, red {red} px")
    check(colours > 200 and ink > 0.2 and blue > 100000 and red > 100000,
          "not blank: the maps' blue and red fill much of the screenshot")
    keep(page, shot)


def odd_log(path, steps, wall=1.7e9, ratio=None, w1=None, name="w"):
    """One tensor, fa against one proxy, at each step; every row's values given or made up."""
    rt = np.dtype(ROW_TYPE + [("ratio", "<f8", (1,))])
    rows = np.zeros(4 * len(steps), rt)
    for i, s in enumerate(steps):
        for k in range(4):
            r = rows[4 * i + k]
            r["step"], r["kind"], r["tensor"], r["role"] = s, k, 0 if k == 0 else AGG, 1
            r["w1"] = 0.001 * (i + 1) if w1 is None else w1[i] if isinstance(w1, list) else w1
            r["ratio"] = ratio[i] if ratio is not None else 0.5 + 0.1 * i
            r["wall"], r["numel"] = wall, 10
    with h5py.File(path, "w") as f:
        f.create_dataset("rows", data=rows, maxshape=(None,))
        for n, v in (("tensors", [name.encode()]), ("runs", [b"fa"]), ("proxies", [b"fp16"])):
            f.create_dataset(n, data=np.array(v, "S1024"), maxshape=(None,))


def odd_logs(tmp):
    """Logs that once crashed the report or never let it finish; each drawn finite in bounded time."""
    cases = [
        ("one step", [1200], {}, True),
        # The x axis once stepped from tick to tick by adding: at 2^52 a
        # step of 0.2, and at 2^62 one of 500 (ulp 1024), adds nothing,
        # and the page grew without end.
        ("a step near 2^52", [2 ** 52 + 1], {}, True),
        ("steps 2^62 and 2^62 + 3000", [2 ** 62, 2 ** 62 + 3000], {}, True),
        ("ten steps from 2^62, 10^9 apart (19-digit labels)", [2 ** 62 + k * 10 ** 9 for k in range(10)], {}, False),
        ("a wall time of 1e300 (localtime() fails)", [10, 20], {"wall": 1e300}, False),
        ("ratios from 0.45 to 0.55", [10, 20, 30], {"ratio": [0.45, 0.5, 0.55]}, False),
        ("no value at all (every W1 and ratio NaN)", [10, 20], {"w1": np.nan, "ratio": [np.nan, np.nan]}, True),
        ("no rows", [], {}, False),
        ("W1 of 1e308 and -1e308 (damaged rows)", [10, 20], {"w1": [1e308, -1e308]}, True),
        ("ratios of 1e308 and 1e-320", [10, 20], {"ratio": [1e308, 1e-320]}, False),
        # a long name's label keeps its last 45 bytes: not half a character
        ("a name of 40 'ü' (80 bytes)", [10], {"name": "ü" * 40}, False),
    ]
    for what, steps, kw, render in cases:
        log = os.path.join(tmp, "odd.h5")
        page = os.path.join(tmp, "odd.html")
        odd_log(log, steps, **kw)
        rc, out, err, dt = report("odd", "--log", log, "-o", page, timeout=20, max_bytes=8 << 20)
        html, extra = "", ""
        if rc == 0:
            with open(page, "rb") as f:
                raw = f.read()
            try:
                html = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                html, extra = raw.decode("utf-8", "replace"), f"not UTF-8: {e}"
        if what == "one step":
            ticks = re.findall(r'class="xt">([^<]*)<', "".join(b for _, _, b in svgs(html, "chart")))
            extra = "" if ticks and all(re.fullmatch(r"\d+", t) for t in ticks) else f"step ticks {ticks}"
        elif what.startswith("ratios from"):
            ratio_svg = svgs(html, "chart")[1][2] if len(svgs(html, "chart")) > 1 else ""
            ticks = re.findall(r'class="yt">([^<]*)<', ratio_svg)
            extra = "" if len(ticks) >= 3 else f"log-scale ticks {ticks}: fewer than 3"
        elif what == "no rows":
            extra = "" if "no rows yet" in html else "no word of the empty log"
            if err != f"wdrift report: wrote {page}: study 'odd' has no results yet":
                extra += f" stderr {err!r}: not the written line"
        elif what.startswith("no value"):
            extra = "" if html.count("no values yet") == 2 else "charts not marked empty"
        elif what.startswith("a name"):
            extra = extra or ("" if f'class="rl">…{"ü" * 22}</text>' in html else "no label ending in 22 'ü'")
        bad = finite_svg(html) or labels_fit(html) or extra
        check(rc == 0 and html.endswith("</html>\n") and not bad,
              f"{what}: exit {rc} in {dt:.2f} s, finite charts {bad} {err}")
        for x in os.listdir(tmp):
            if ".tmp-" in x:
                os.unlink(os.path.join(tmp, x))
        if render and rc == 0:
            rc2, console, dt = chromium(page, os.path.join(tmp, "odd.png"), tmp, height=1200)
            check(rc2 == 0 and not console, f"{what}: Chromium renders it, no console message ({console[:2]})")


def study_log(path, cands, proxies, steps, T=6, offset=(), missing_last=(), seed=15, w1=None):
    """A drift log of candidates against proxies (each proxy's label is its run's name), as the daemon writes it.

    Every run starts from the baseline's weights (W1 0 at the first step) but those in offset, which start
    elsewhere (another seed). The runs in missing_last have no rows at the last step. Returns W1 by run
    (steps x tensors), made up here unless given."""
    rng = np.random.default_rng(seed)
    runs, P, S = list(cands) + list(proxies), len(proxies), len(steps)
    # with no proxy, no ratio field, as the daemon writes it (HDF5 has no array of 0)
    rt = np.dtype(ROW_TYPE + ([("ratio", "<f8", (P,))] if P else []))
    numel = rng.integers(100, 10000, T).astype(np.uint64)
    grow = np.sqrt((steps - steps[0]) / (steps[-1] - steps[0]))[:, None]
    if w1 is None:
        w1 = {}
        for i, r in enumerate(runs):
            scale = (1e-5 if r in cands else 1e-3) * (1 + i)
            w1[r] = scale * ((2.0 if r in offset else 0.0) + grow) * rng.uniform(0.3, 3, T)[None, :]
    rows = []
    for j, step in enumerate(steps):
        for ri, r in enumerate(runs):
            if r in missing_last and j == S - 1:
                continue
            b = np.zeros(T + 3, rt)
            t, cand = b[:T], r in cands
            t["step"], t["tensor"], t["run"], t["role"] = step, np.arange(T), ri, 1 if cand else 2
            t["w1"], t["max_abs_diff"], t["rel_l2"], t["numel"], t["wall"] = w1[r][j], w1[r][j] * 5, w1[r][j], numel, 1.7e9 + j
            if P:
                t["ratio"] = np.nan
            if cand:
                for k, pr in enumerate(proxies):
                    if not (pr in missing_last and j == S - 1):
                        with np.errstate(divide="ignore", invalid="ignore"):
                            t["ratio"][:, k] = np.where(w1[pr][j] > 0, w1[r][j] / w1[pr][j], np.nan)
            for kind in (1, 2, 3):
                a = b[T + kind - 1]
                a["step"], a["tensor"], a["run"], a["kind"], a["role"] = step, AGG, ri, kind, t["role"][0]
                a["numel"], a["wall"] = int(numel.sum()), 1.7e9 + j
                a["max_abs_diff"] = a["rel_l2"] = np.nan

                def agg(v, kind=kind):
                    ok = np.isfinite(v)
                    if not ok.any():
                        return np.nan
                    return (np.average(v[ok], weights=numel[ok].astype(float)) if kind == 1
                            else np.median(v[ok]) if kind == 2 else v[ok].max())
                a["w1"] = agg(t["w1"])
                if P:
                    a["ratio"] = [agg(t["ratio"][:, k]) for k in range(P)]
            rows.append(b)
    with h5py.File(path, "w", libver="latest") as f:
        f.create_dataset("rows", data=np.concatenate(rows), maxshape=(None,), chunks=True)
        for n, v in (("tensors", [f"layers.{i}.weight" for i in range(T)]), ("runs", runs), ("proxies", list(proxies))):
            f.create_dataset(n, data=np.array(v, "S1024"), maxshape=(None,))
    return w1


def glance(tmp):
    """Twelve runs (ten candidates, two proxies), as the issue's screenshots had: told apart at a glance."""
    cands, proxies = [f"cand{i}" for i in range(10)], ["p16", "seed"]
    steps = np.arange(20, dtype=np.int64) * 10
    log, page = os.path.join(tmp, "twelve.h5"), os.path.join(tmp, "twelve.html")
    study_log(log, cands, proxies, steps, offset=("seed",), missing_last=("p16",))
    rc, out, err, dt = report("twelve", "--log", log, "-o", page)
    check(rc == 0, f"report of 10 candidates and 2 proxies: exit 0 in {dt:.2f} s ({err})")
    with open(page, encoding="utf-8") as f:
        html = f.read()
    bad = one_colour_each(html, cands + proxies)
    got, _ = run_colours(html)
    check(not bad and len(got) == 12, f"twelve runs, twelve colours, each the same everywhere ({bad})")
    w1_svg = svgs(html, "chart")[0][2] if svgs(html, "chart") else ""
    ends = sorted(float(y) for y in re.findall(r'<text x="[\d.]+" y="([\d.]+)" class="el"', w1_svg))
    check(len(ends) == 12 and min(np.diff(ends)) >= 11.9,
          f"each of the twelve W1 lines named at its end, the names at least 12 px apart ({len(ends)}, "
          f"{min(np.diff(ends)) if len(ends) > 1 else None})")
    pairs = [f"{c} / {p}" for c in cands for p in proxies]
    check(not panels_ok(html, pairs), f"twenty ratio panels, one per pair, each with ratio = 1, on one axis "
                                      f"({panels_ok(html, pairs)})")
    caps, keyed = heat_caps(html)
    check(len(caps) == 20 and len(set(caps)) == 1 and keyed, f"one capped colour scale for the 20 heatmaps ({set(caps)})")
    # step 0: p16 starts from the baseline's weights (W1 0: ratio undefined); seed does not, but each
    # candidate does (ratio 0): neither map has a step-0 column, and each says why
    pngs = heat_pngs(html)
    check(len(pngs) == 20 and all(p.shape[:2] == (6, 19) for p in pngs),
          f"no step-0 column: 6 tensors x 19 steps in every map ({set(p.shape for p in pngs)})")
    check(html.count("Left out: step 0, where p16's W1 is 0") == 10
          and html.count("Left out: step 0, where cand3's W1 is 0") == 1,
          "a note under each map names the step left out and why")
    # the last step, 190, has no p16: the summary reads 180
    check("Summary at step 180, the latest complete step" in html
          and "Step 190 is later but incomplete (p16 not compared there; " in html,
          "without a config, the runs of the log make a step complete: the summary at step 180, 190 named incomplete")
    check(not self_contained(html) and not finite_svg(html) and not labels_fit(html),
          f"self-contained, finite, labels inside ({self_contained(html)}{finite_svg(html)}{labels_fit(html)})")
    shot = os.path.join(tmp, "twelve.png")
    rc, console, dt = chromium(page, shot, tmp, height=2400)
    check(rc == 0 and os.path.exists(shot) and not console,
          f"Chromium renders the twelve-run page in {dt:.1f} s, no console message ({rc}, {console[:2]})")
    keep(page, shot)


def top_table(html, run):
    """(heading, [column titles], [[cells]]) of run's table of the tensors with the largest ratio."""
    m = re.search(r'data-run="' + re.escape(run) + r'"[^<]*</i>[^<]*(: the \d+ tensors with the largest ratio[^<]*)'
                  r'</h3>\s*<table>(.*?)</table>', html, re.S)
    if not m:
        return "", [], []
    trs = re.findall(r"<tr>(.*?)</tr>", m.group(2), re.S)
    head = [re.sub(r"<[^>]*>", "", h) for h in re.findall(r"<th>(.*?)</th>", trs[0])] if trs else []
    rows = [[re.sub(r"<[^>]*>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr)] for tr in trs[1:]]
    return m.group(1), head, rows


def ladder_cap(v):
    """docs/report.md's cap of one side, from its values (each > 1): the 98th percentile, to its 1/16 of
    log2's upper edge, rounded up to 2, 4, 10 or a power of ten; 2 when there is none. As %g writes it."""
    ladder = [2, 4, 10] + [10.0 ** e for e in (2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15)]
    if len(v) == 0:
        return "2"
    a = np.sort(np.log2(v))
    need = (np.floor(a[len(a) - len(a) // 50 - 1] * 16) + 1) / 16
    return "%g" % next((c for c in ladder if np.log2(c) >= need - 1e-9), ladder[-1])


def red_minus_blue(img):
    """The mean of red less blue over a heatmap's cells: strongly positive when the map reads 'above 1'."""
    return float((img[..., 0].astype(int) - img[..., 2].astype(int)).mean())


def scales(tmp):
    """One pair firing at ratio 1.6 beside one far below 1 (0.01) and a synthetic proxy that both
    candidates are far below (as the demo's): the heatmap's red side is scaled by the ratios above 1
    alone, so 1.6 reads red, not near white; the blue side keeps its own range, so the demo-like
    pairs are not one uniform blue. The top tensors are ranked by the trained proxy's ratio, named."""
    cands, proxies = ["fast", "slow"], ["round:bf16", "lowp"]   # the synthetic proxy first in the log
    steps = np.arange(10, dtype=np.int64) * 10
    T = 8
    grow = np.sqrt(steps / steps[-1])[:, None]
    lowp = 1e-3 * grow * np.linspace(0.5, 2, T)[None, :]
    fast = lowp * np.linspace(1.75, 1.45, T)[None, :]           # lowp ratio falls with the tensor...
    synth = 1e-1 * grow * np.linspace(1, 0.05, T)[None, :]      # ...its ratio to round:bf16 rises, below 1
    w1 = {"fast": fast, "slow": lowp * 0.01, "round:bf16": synth, "lowp": lowp}
    # the caps by the documented rule, from the cells shown (step 0 left out: every W1 is 0 there)
    cells = np.concatenate([(w1[c][1:] / w1[p][1:]).ravel() for c in cands for p in proxies])
    want = (ladder_cap(cells[cells > 1]), ladder_cap(1 / cells[cells < 1]))
    log, page = os.path.join(tmp, "scales.h5"), os.path.join(tmp, "scales.html")
    study_log(log, cands, proxies, steps, T=T, w1=w1)
    rc, out, err, dt = report("scales", "--log", log, "-o", page)
    check(rc == 0, f"report of a pair at 1.6 beside pairs far below 1: exit 0 ({err})")
    with open(page, encoding="utf-8") as f:
        html = f.read()
    caps, keyed = heat_caps(html)
    check(len(set(caps)) == 1 and caps[0] == want and want[0] == "2" and keyed,
          f"one scale: red capped by the ratios above 1 alone ({want[0]}), blue by those below ({want[1]}): {caps}")
    pngs = heat_pngs(html)
    rb = [red_minus_blue(p) for p in pngs]
    print(f"# heatmaps' mean red - blue: {[round(x) for x in rb]} (fast/round:bf16, fast/lowp, slow/..., slow/...)")
    # fast/lowp at 1.45..1.75 on a cap of 2: red 200, blue 110 (on a cap of 1e3, 246 and 232)
    check(len(rb) == 4 and rb[1] > 60 and max(rb[0], rb[2], rb[3]) < -20,
          f"the pair at 1.6 reads red; the pairs far below 1 blue ({[round(x) for x in rb]})")
    check(len(pngs) == 4 and len({p.tobytes() for p in pngs[:1] + pngs[2:]}) == 3
          and all(len(np.unique(p.reshape(-1, 3), axis=0)) > 3 for p in (pngs[0], pngs[2])),
          "the pairs below 1 are not one uniform blue: tensors differ in shade")
    heading, head, rows = top_table(html, "fast")
    col = head.index("ratio [lowp]") if "ratio [lowp]" in head else None
    got = [float(r[col]) for r in rows] if col is not None else []
    check("largest ratio [lowp] at step 90" in heading and len(got) == T and got == sorted(got, reverse=True),
          f"the top tensors ranked by the first trained proxy's ratio, named in the heading ({heading!r}, {got})")
    shot = os.path.join(tmp, "scales.png")
    rc, console, dt = chromium(page, shot, tmp, height=2400)
    check(rc == 0 and os.path.exists(shot) and not console, f"Chromium renders it, no console message ({console[:2]})")
    keep(page, shot)


def no_proxy(tmp):
    """A study with no proxy: no ratio column, and no legend explaining one (a trial's page had it)."""
    log, page = os.path.join(tmp, "noproxy.h5"), os.path.join(tmp, "noproxy.html")
    study_log(log, ["fa"], [], np.arange(3, dtype=np.int64) * 10)
    rc, out, err, dt = report("noproxy", "--log", log, "-o", page)
    html = open(page, encoding="utf-8").read() if rc == 0 else ""
    check(rc == 0 and "mean ratio" not in html and "ratio = the candidate's W1" not in html
          and "The study has no proxy, so no ratio" in html,
          f"a study with no proxy: no ratio column, its legend says why there is none ({err})")
    check("<th>steps compared</th><th>last compared</th>" in html,
          "the runs table counts the steps compared (the drift log's), not the daemon's snapshots")


WAITING_ALERTS = """\
alerts:
  - name: near-a
    study: fa
    metric: w1
    scope: mean
    threshold: 0.0005
  - name: near-b
    study: fa
    metric: w1
    scope: mean
    threshold: 0.0005
    severity: critical
  - name: far
    study: fa
    metric: w1
    scope: mean
    threshold: 0.5
  - name: peak
    study: fa
    metric: w1
    scope: max
    threshold: 0.0005
"""


def w1_chart(html):
    """The W1 chart's SVG, and the note above it that names the thresholds not drawn ('' when none)."""
    part = html.split("<h2>Weight drift against step</h2>", 1)[-1]
    note = re.search(r'<p class="note" id="w1-not-drawn">(.*?)</p>', part.split("<svg", 1)[0])
    return part.split("<svg", 1)[-1].split("</svg>", 1)[0], note.group(1) if note else ""


def waiting_and_thresholds(tmp):
    """An ops trial's pages: W1 thresholds drawn on the chart they belong to, apart, and not scaling it flat;
    a study none of whose candidates has come names them and says so, not an empty page."""
    d = os.path.join(tmp, "waiting")
    os.mkdir(d)
    cfg = Daemon(d).write_config(extra=WAITING_ALERTS)   # written, never started: the daemon is not asked
    steps = np.arange(4, dtype=np.int64) * 10
    log, page = os.path.join(d, "cand.h5"), os.path.join(d, "cand.html")
    w1 = {"fa": np.linspace(0, 1e-3, 4)[:, None] * np.ones(6)[None, :]}   # the mean reaches 1e-3
    study_log(log, ["fa"], [], steps, w1=w1)
    rc, out, err, dt = report("fa", "-c", cfg, "--log", log, "-o", page)
    html = open(page, encoding="utf-8").read() if rc == 0 else ""
    svg, note = w1_chart(html)
    thr = [(float(y), t) for y, t in re.findall(r'<text x="[\d.]+" y="([-\d.]+)" class="thrl"[^>]*>([^<]*)<', svg)]
    check(sorted(t for _, t in thr) == ["alert near-a: mean W1 &gt; 0.0005", "alert near-b: mean W1 &gt; 0.0005"],
          f"the W1 chart draws the mean rules' thresholds, not the max rule's nor the far one ({thr}, {err})")
    check(len(thr) == 2 and abs(thr[0][0] - thr[1][0]) >= 12,
          f"two rules at one threshold: their labels 12 px apart, not over each other ({thr})")
    ticks = [float(v) for v in re.findall(r'class="yt">([^<]*)<', svg)]
    check(ticks and max(ticks) < 0.01, f"the axis fits the runs (W1 up to 1e-3), not the 0.5 rule ({ticks})")
    check("alert far (mean W1 &gt; 0.5), 500 times the highest W1 drawn (0.001)" in note
          and "alert peak (max W1 &gt; 0.0005), a threshold on the max W1 over tensors, not the mean" in note,
          f"the rules not drawn are named under the heading, with why ({note})")
    check('<tr class="unlogged"><td><i class="sw" data-run="lowprec" style="background:#d55e00"></i>lowprec</td>'
          '<td class="l">proxy</td>' in html, "the runs table names the proxy run that has no row, in its colour")
    # a run both candidate and proxy (docs/demo.md's), not come yet: one row, both roles, and the colour of
    # its later place, the one it keeps when it comes (a review's: two rows, and a colour that would change)
    both = os.path.join(d, "both.yaml")
    with open(cfg) as f, open(both, "w") as g:
        g.write(f.read().replace("candidates: [fa]", "candidates: [fa, lowprec]"))
    rc, out, err, dt = report("fa", "-c", both, "--log", log, "-o", page)
    html = open(page, encoding="utf-8").read() if rc == 0 else ""
    runs = html.split("<h3>Runs</h3>", 1)[-1].split("<h3>", 1)[0]
    row = '<tr class="unlogged"><td><i class="sw" data-run="lowprec" style="background:#009e73"></i>lowprec</td>'
    check(runs.count('data-run="lowprec"') == 1 and row + '<td class="l">candidate, proxy</td>' in runs
          and row in html.split("<h2>Summary", 1)[-1].split("<h2>", 1)[0],
          f"a run both candidate and proxy, not come yet: one row with both roles, in its proxy place's colour ({err})")

    # a study whose candidate never came: named, and the page says so, section by section
    log, page = os.path.join(d, "proxies.h5"), os.path.join(d, "proxies.html")
    study_log(log, [], ["lowprec"], steps)
    rc, out, err, dt = report("fa", "-c", cfg, "--log", log, "-o", page)
    html = open(page, encoding="utf-8").read() if rc == 0 else ""
    summary = html.split('<h2>Summary', 1)[-1].split("<h2>", 1)[0]
    unlogged = '<tr class="unlogged"><td><i class="sw" data-run="fa" style="background:#0072b2"></i>fa</td>'
    check(rc == 0 and unlogged + '<td colspan="4" class="l note">not compared yet: ' in summary
          and "No candidate has been compared yet" in summary,
          f"the summary names the candidate not compared yet, in its colour, and says none has been ({rc}, {err})")
    runs = html.split("<h3>Runs</h3>", 1)[-1].split("<h3>", 1)[0]
    check(unlogged + '<td class="l">candidate</td><td colspan="6" class="l note">not compared yet' in runs,
          "the runs table has the configured candidate's row")
    check('id="no-candidate">No candidate has been compared yet, so there is no ratio to draw' in html
          and "Per tensor: the ratio" not in html,
          "the ratio section says why it is empty; no heatmap section with no map")
    check(not finite_svg(html) and not self_contained(html), "the page is still whole and self-contained")


def main():
    if not os.path.exists(WDRIFT):
        print(f"not ok 1 - {WDRIFT} is not built")
        return 1
    try:
        import PIL
        print(f"# PIL {PIL.__version__}, {CHROMIUM}")
    except ImportError:
        print("# skip: PIL is not installed (apt-get install python3-pil)")
        return 77
    if not CHROMIUM:
        print("# skip: chromium is not installed (apt-get install chromium)")
        return 77
    tmp = tempfile.mkdtemp(prefix="wdrift-t63-")
    try:
        os.mkdir(os.path.join(tmp, "live"))
        live(os.path.join(tmp, "live"))
        scale(tmp)
        glance(tmp)
        scales(tmp)
        odd_logs(tmp)
        no_proxy(tmp)
        waiting_and_thresholds(tmp)
    finally:
        subprocess.run(["rm", "-rf", tmp])
    return harness.summary()


if __name__ == "__main__":
    sys.exit(main())
