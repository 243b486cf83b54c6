// The portal: signs in with a key from the URL fragment (#token=gmk_...&
// month=YYYY-MM; a fragment never reaches a server log) and draws the
// month from the /v1 API. A tenant's key gets its tenant's view; an admin
// or department key gets the fleet view, and opens any of its tenants'
// views from there. No libraries.
(function () {
  "use strict";
  var params = new URLSearchParams(location.hash.replace(/^#/, ""));
  var token = params.get("token") || "";
  var month = params.get("month") || "";
  // Keep the token out of the address bar and the history once read.
  if (token && history.replaceState) { history.replaceState(null, "", location.pathname + location.search); }
  // Twenty colours a reader tells apart (d3's category20), in that order.
  var palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5"];
  // The meter table's places and units (internal/meter, held to it by a
  // test): every quantity of a unit shows the same decimals everywhere.
  var PLACES = { gpu_hours: 3, sm_active_hours: 3, memory_gib_hours: 1, energy_kwh: 3, pcie_gib: 2, nvlink_gib: 2 };
  var UNITS = { gpu_hours: "GPU-hours", sm_active_hours: "SM-active hours", memory_gib_hours: "GiB-hours", energy_kwh: "kWh", pcie_gib: "GiB", nvlink_gib: "GiB" };

  function el(id) { return document.getElementById(id); }
  function fail(msg) {
    var e = el("error");
    e.textContent = msg;
    e.hidden = false;
    document.body.dataset.ready = "error";
  }
  function api(path) {
    return fetch(path, { headers: { Authorization: "Bearer " + token } }).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok) { throw new Error(body.message || ("HTTP " + r.status)); }
        return body;
      });
    });
  }
  // query is a URL query of the non-empty values.
  function query(values) {
    return Object.keys(values).filter(function (k) { return values[k] !== "" && values[k] != null; })
      .map(function (k) { return k + "=" + encodeURIComponent(values[k]); }).join("&");
  }
  function text(parent, tag, value, cls) {
    var n = document.createElement(tag);
    n.textContent = value;
    if (cls) { n.className = cls; }
    parent.appendChild(n);
    return n;
  }
  function clear(id) { var n = typeof id === "string" ? el(id) : id; while (n.firstChild) { n.removeChild(n.firstChild); } return n; }
  function rowsOf(tableId) { return clear(el(tableId).tBodies[0]); }
  function svg(tag, attrs) {
    var n = document.createElementNS("http://www.w3.org/2000/svg", tag);
    Object.keys(attrs).forEach(function (k) { n.setAttribute(k, attrs[k]); });
    return n;
  }
  function titled(node, tip) { var t = svg("title", {}); t.textContent = tip; node.appendChild(t); return node; }

  // fixed rounds a decimal string half away from zero to places, in
  // decimal: the labels show the API's amounts as its own rounding would.
  function fixed(s, places) {
    var m = /^(-?)(\d+)(?:\.(\d+))?$/.exec(String(s));
    if (!m) { return String(s); }
    var frac = (m[3] || "") + "0".repeat(places + 1);
    var n = BigInt(m[2] + frac.slice(0, places));
    if (frac.charAt(places) >= "5") { n += BigInt(1); }
    var str = n.toString().padStart(places + 1, "0");
    var out = places > 0 ? str.slice(0, -places) + "." + str.slice(-places) : str;
    return (m[1] && /[1-9]/.test(out) ? "-" : "") + out;
  }
  // qty is a meter's quantity (a decimal string or a number) at its places.
  function qty(v, meter) { return fixed(typeof v === "number" ? v.toFixed(9) : v, PLACES[meter]); }
  function hoursOfMicros(us) { return qty(us / 3.6e9, "gpu_hours"); }
  // addDecimal adds decimal strings exactly at 9 places.
  function addDecimal(a, b) {
    var scale = function (s) { return BigInt(fixed(s || "0", 9).replace(".", "")); };
    var n = (scale(a) + scale(b)).toString(), neg = n.charAt(0) === "-";
    n = (neg ? n.slice(1) : n).padStart(10, "0");
    return (neg ? "-" : "") + n.slice(0, -9) + "." + n.slice(-9);
  }

  // Times and days for people, in the tenant's zone.
  function fmt(iso, tz, opts) {
    return new Intl.DateTimeFormat("en-GB", Object.assign({ timeZone: tz || "UTC" }, opts)).format(new Date(iso));
  }
  function dayLabel(iso, tz) { return fmt(iso, tz, { day: "numeric", month: "short" }); }
  // through says up to when usage counts: "through 30 Nov 2026, 24:00
  // America/New_York" (a midnight is the end of the day before).
  function through(iso, tz) {
    var t = new Date(iso), hm = fmt(iso, tz, { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
    if (hm === "00:00") { t = new Date(t.getTime() - 1); hm = "24:00"; }
    return "through " + fmt(t.toISOString(), tz, { day: "numeric", month: "short", year: "numeric" }) + ", " + hm + " " + (tz || "UTC");
  }

  // niceTicks are an axis's labels up to max: 0, then equal steps of 1, 2
  // or 5 times a power of ten, the last at or above max.
  function niceTicks(max) {
    if (!(max > 0)) { return [0, 1]; }
    var raw = max / 5, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * mag; }).filter(function (s) { return s >= raw * (1 - 1e-9); })[0];
    var ticks = [0];
    while (ticks[ticks.length - 1] < max * (1 - 1e-9)) { ticks.push(Math.round((ticks[ticks.length - 1] + step) / step) * step); }
    return ticks;
  }
  function tickText(v) { return String(Number(v.toPrecision(12))); }
  // chartWidth is the chart box's width in CSS pixels, so that a chart's
  // 12 px text stays 12 px on a phone; 1000 before layout.
  function chartWidth(id) { var w = el(id).clientWidth - 16; return w > 0 ? Math.max(300, Math.round(w)) : 1000; }
  // labelStep labels every how many days fit the width (60 px a label).
  function labelStep(n, width) { return Math.max(1, Math.ceil(n / Math.max(1, Math.floor(width / 60)))); }

  // barChart draws stacked bars per day, one colour per series, with a y
  // axis of nice ticks in unit, the days as dates, a legend telling every
  // series apart and a tooltip with the exact figure on every bar.
  // rows: [{day, series, value (number), exact (string)}].
  function barChart(chartId, legendId, rows, unit, tz, attrs) {
    var days = [], series = [], byDay = {};
    rows.forEach(function (r) {
      if (!(r.day in byDay)) { byDay[r.day] = {}; days.push(r.day); }
      if (series.indexOf(r.series) < 0) { series.push(r.series); }
      byDay[r.day][r.series] = r;
    });
    days.sort();
    series.sort();
    var W = chartWidth(chartId), H = 280, left = 52, bottom = 28, top = 26, max = 0;
    days.forEach(function (d) {
      var t = 0;
      series.forEach(function (s) { t += byDay[d][s] ? byDay[d][s].value : 0; });
      max = Math.max(max, t);
    });
    var ticks = niceTicks(max), axisMax = ticks[ticks.length - 1];
    var root = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": unit + " by day" });
    if (days.length === 0) {
      root.appendChild(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", fill: "#6b7280" })).textContent = "No usage in this month yet";
    }
    var y = function (v) { return H - bottom - v / axisMax * (H - bottom - top); };
    ticks.forEach(function (t) {
      root.appendChild(svg("line", { x1: left, x2: W, y1: y(t), y2: y(t), stroke: "#eceef1" }));
      root.appendChild(svg("text", { x: left - 6, y: y(t) + 4, "text-anchor": "end", "font-size": 12, fill: "#6b7280", "data-tick": tickText(t) }))
        .textContent = tickText(t);
    });
    root.appendChild(svg("text", { x: 4, y: 12, "font-size": 12, fill: "#6b7280" })).textContent = unit;
    var slot = (W - left) / Math.max(days.length, 1), step = labelStep(days.length, W - left);
    days.forEach(function (d, i) {
      var base = H - bottom;
      series.forEach(function (s) {
        var r = byDay[d][s];
        if (!r || r.value <= 0) { return; }
        var h = r.value / axisMax * (H - bottom - top);
        base -= h;
        var a = { x: left + i * slot + slot * 0.15, y: base, width: slot * 0.7, height: h, fill: palette[series.indexOf(s) % palette.length] };
        Object.keys(attrs(r)).forEach(function (k) { a[k] = attrs(r)[k]; });
        root.appendChild(titled(svg("rect", a), dayLabel(d, tz) + " · " + s + ": " + r.exact + " " + unit));
      });
      if (i % step === 0) {
        root.appendChild(svg("text", { x: left + i * slot + slot / 2, y: H - 8, "text-anchor": "middle", "font-size": 12, fill: "#6b7280" }))
          .textContent = dayLabel(d, tz);
      }
    });
    clear(chartId).appendChild(root);
    var legend = clear(legendId);
    series.forEach(function (s, k) {
      var span = document.createElement("span"), i = document.createElement("i");
      i.style.background = palette[k % palette.length];
      span.appendChild(i);
      span.appendChild(document.createTextNode(s));
      legend.appendChild(span);
    });
  }

  // heldChart draws, per day, the GPU-hours held beside those with the SMs
  // active: the gap is what was held but not used.
  function heldChart(points, tz) {
    var W = chartWidth("held-chart"), H = 220, left = 52, bottom = 28, top = 26, max = 0;
    points.forEach(function (p) { max = Math.max(max, parseFloat(p.gpu_hours)); });
    var ticks = niceTicks(max), axisMax = ticks[ticks.length - 1];
    var root = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "GPU-hours held and used by day" });
    var y = function (v) { return H - bottom - v / axisMax * (H - bottom - top); };
    ticks.forEach(function (t) {
      root.appendChild(svg("line", { x1: left, x2: W, y1: y(t), y2: y(t), stroke: "#eceef1" }));
      root.appendChild(svg("text", { x: left - 6, y: y(t) + 4, "text-anchor": "end", "font-size": 12, fill: "#6b7280", "data-tick": tickText(t) }))
        .textContent = tickText(t);
    });
    root.appendChild(svg("text", { x: 4, y: 12, "font-size": 12, fill: "#6b7280" })).textContent = "GPU-hours";
    var slot = (W - left) / Math.max(points.length, 1), step = labelStep(points.length, W - left);
    var colours = { gpu_hours: "#9ca3af", sm_active_hours: "#1f77b4" };
    points.forEach(function (p, i) {
      ["gpu_hours", "sm_active_hours"].forEach(function (m, k) {
        var v = parseFloat(p[m]) || 0;
        var r = svg("rect", { x: left + i * slot + slot * (0.15 + 0.35 * k), y: y(v), width: slot * 0.35, height: H - bottom - y(v),
          fill: colours[m], "data-held-day": p.bucket.slice(0, 10), "data-meter": m, "data-value": v.toFixed(6) });
        root.appendChild(titled(r, dayLabel(p.bucket, tz) + ": " + (k ? "SM-active " : "held ") + qty(p[m] || "0", m) + " GPU-hours"));
      });
      if (i % step === 0) {
        root.appendChild(svg("text", { x: left + i * slot + slot / 2, y: H - 8, "text-anchor": "middle", "font-size": 12, fill: "#6b7280" }))
          .textContent = dayLabel(p.bucket, tz);
      }
    });
    clear("held-chart").appendChild(root);
    var legend = clear("held-legend");
    [["held", "#9ca3af"], ["SM-active", "#1f77b4"]].forEach(function (x) {
      var span = document.createElement("span"), i = document.createElement("i");
      i.style.background = x[1];
      span.appendChild(i);
      span.appendChild(document.createTextNode(x[0]));
      legend.appendChild(span);
    });
  }

  // forecastChart draws the month's cumulative spend before tax: the actual
  // days as a solid line, the projection dashed, the band shaded, and the
  // month-end total, low and high labelled.
  function forecastChart(fc, currency, places, tz) {
    el("forecast-section").hidden = false; // laid out first: the chart takes its box's width
    var path = fc.path || [];
    var W = chartWidth("forecast-chart"), H = 250, left = 52, bottom = 28, top = 26, max = 0;
    var right = Math.min(190, Math.round(W * 0.38));
    path.forEach(function (p) { max = Math.max(max, parseFloat(p.high)); });
    var ticks = niceTicks(max), axisMax = ticks[ticks.length - 1];
    var root = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "cumulative spend before tax with the month-end forecast",
      "data-forecast-total": fc.total, "data-forecast-low": fc.low, "data-forecast-high": fc.high, "data-forecast-days": path.length });
    var slot = (W - left - right) / Math.max(path.length, 1);
    var x = function (k) { return left + (k + 1) * slot; }; // a point sits at the end of its day
    var y = function (v) { return H - bottom - parseFloat(v) / axisMax * (H - bottom - top); };
    ticks.forEach(function (t) {
      root.appendChild(svg("line", { x1: left, x2: W - right, y1: y(t), y2: y(t), stroke: "#eceef1" }));
      root.appendChild(svg("text", { x: left - 6, y: y(t) + 4, "text-anchor": "end", "font-size": 12, fill: "#6b7280", "data-tick": tickText(t) }))
        .textContent = tickText(t);
    });
    root.appendChild(svg("text", { x: 4, y: 12, "font-size": 12, fill: "#6b7280" })).textContent = currency;
    var actual = [[left, y(0)]], projected = [], high = [], low = [];
    path.forEach(function (p, k) {
      if (p.projected) {
        projected.push([x(k), y(p.total)]);
        high.push([x(k), y(p.high)]);
        low.unshift([x(k), y(p.low)]);
      } else {
        actual.push([x(k), y(p.total)]);
      }
    });
    var join = function (pts) { return pts.map(function (q) { return q[0].toFixed(1) + "," + q[1].toFixed(1); }).join(" "); };
    var from = actual[actual.length - 1]; // the projection goes on from the last actual day
    if (projected.length) {
      root.appendChild(svg("polygon", { points: join([from].concat(high, low)), fill: "#1f77b4", "fill-opacity": 0.15, stroke: "none", "data-forecast-band": "1" }));
      root.appendChild(svg("polyline", { points: join([from].concat(projected)), fill: "none", stroke: "#1f77b4", "stroke-width": 2,
        "stroke-dasharray": "6 4", "data-forecast-line": "projected" }));
    }
    if (actual.length > 1) {
      root.appendChild(svg("polyline", { points: join(actual), fill: "none", stroke: "#1f77b4", "stroke-width": 2.5, "data-forecast-line": "actual" }));
    }
    var step = labelStep(path.length, W - left - right);
    path.forEach(function (p, k) {
      var day = p.at.slice(0, 10);
      var c = svg("circle", { cx: x(k), cy: y(p.total), r: 2.5, fill: p.projected ? "#fff" : "#1f77b4", stroke: "#1f77b4",
        "data-forecast-day": day, "data-projected": p.projected ? "1" : "0", "data-total": p.total, "data-low": p.low, "data-high": p.high });
      root.appendChild(titled(c, dayLabel(p.at, tz) + ": " + fixed(p.total, places) + " " + currency +
        (p.projected ? " (" + fixed(p.low, places) + " to " + fixed(p.high, places) + ")" : "")));
      if (k % step === 0) {
        root.appendChild(svg("text", { x: x(k), y: H - 8, "text-anchor": "middle", "font-size": 12, fill: "#6b7280" })).textContent = dayLabel(p.at, tz);
      }
    });
    // The month end's figures beside the last day, kept 14 units apart
    // (a narrow band would stack them) and above the axis.
    // Without a band (nothing projected, or no noise) the total alone.
    var ends = fc.low === fc.high ? [["total", fc.total]] : [["high", fc.high], ["total", fc.total], ["low", fc.low]], ys = [];
    ends.forEach(function (e, i) { ys.push(Math.max(y(e[1]) + 4, i ? ys[i - 1] + 14 : -Infinity)); });
    var lift = Math.max(0, ys[ys.length - 1] - (H - bottom + 4));
    ends.forEach(function (e, i) {
      var t = svg("text", { x: W - right + 10, y: ys[i] - lift, "font-size": e[0] === "total" ? 13 : 11, "font-weight": e[0] === "total" ? 600 : 400,
        fill: e[0] === "total" ? "#1d2430" : "#6b7280", "data-forecast-label": e[0] });
      t.textContent = (e[0] === "total" ? "month end " : e[0] + " ") + fixed(e[1], places) + " " + currency;
      root.appendChild(t);
    });
    clear("forecast-chart").appendChild(root);
    var legend = [["actual", "#1f77b4"]];
    if (projected.length) {
      legend.push(["projected", "repeating-linear-gradient(90deg, #1f77b4 0 4px, transparent 4px 6px)"],
        ["band of the usage's noise", "rgba(31, 119, 180, .15)"]);
    }
    var lg = clear("forecast-legend");
    legend.forEach(function (it) {
      var span = document.createElement("span"), i = document.createElement("i");
      i.style.background = it[1];
      span.appendChild(i);
      span.appendChild(document.createTextNode(it[0]));
      lg.appendChild(span);
    });
    el("forecast-section").hidden = false;
  }

  function anomalyRows(tableId, list, tz, withTenant) {
    var tbody = rowsOf(tableId);
    if (list.length === 0) { var tr = document.createElement("tr"); text(tr, "td", "none this month", "muted").colSpan = withTenant ? 6 : 5; tbody.appendChild(tr); }
    list.forEach(function (a) {
      var tr = document.createElement("tr");
      tr.dataset.anomalyId = a.id;
      if (withTenant) { text(tr, "td", a.tenant); }
      text(tr, "td", fmt(a.start, tz, { day: "numeric", month: "short", hour: "2-digit", minute: "2-digit", hourCycle: "h23" }));
      // A meter's figures at its unit's places; spend at the minor unit.
      var v = function (x) { return a.meter in PLACES ? qty(x, a.meter) : fixed(x, 2); };
      text(tr, "td", UNITS[a.meter] || a.meter);
      text(tr, "td", a.direction);
      text(tr, "td", v(a.observed), "num");
      text(tr, "td", v(a.expected) + " ± " + v(a.spread), "num");
      tbody.appendChild(tr);
    });
  }

  // insights fills the tenant's efficiency section; a failure there
  // (insights not served, a zone off whole hours) is a note, not a broken
  // portal.
  function insights(cost, tenant) {
    var note = function (e) { var n = el("insights-note"); n.textContent = "Insights unavailable: " + e.message; n.hidden = false; };
    if (!(cost.as_of > cost.start)) { return Promise.resolve(); }
    var tz = cost.time_zone || "UTC";
    var eff = api("/v1/insights/efficiency?" + query({ from: cost.start, to: cost.as_of, tenant: tenant })).then(function (rep) {
      var t = rep.tenants.length ? rep.tenants[0] : null;
      if (!t || t.measured_gpu_microseconds === 0) { el("eff-util").textContent = "not measured"; } else {
        el("eff-util").textContent = (100 * t.sm_active_microseconds / t.measured_gpu_microseconds).toFixed(1) + " %";
      }
      var fig = el("eff-idle");
      fig.textContent = hoursOfMicros(t ? t.idle_gpu_microseconds : 0) + " GPU-hours";
      fig.dataset.idleGpuMicroseconds = t ? String(t.idle_gpu_microseconds) : "0";
      var places = (String(cost.so_far).split(".")[1] || "").length;
      el("eff-idle-cost").textContent = t && t.idle_cost ? "costing " + fixed(t.idle_cost.amount, places) + " " + t.idle_cost.currency + " (before tax)" : "";
    });
    var held = api("/v1/usage?" + query({ from: cost.start, to: cost.as_of, step: "day", group_by: tenant ? "tenant" : "", meters: "gpu_hours,sm_active_hours", tz: tz }))
      .then(function (u) { heldChart(u.points.filter(function (p) { return !tenant || p.tenant === tenant; }), tz); });
    var an = api("/v1/insights/anomalies?" + query({ from: cost.start, to: cost.end, tenant: tenant })).then(function (r) {
      anomalyRows("anomalies", r.anomalies, tz, false);
    });
    return Promise.all([eff.catch(note), held.catch(note), an.catch(note)]);
  }

  // dateLabel shows a day the API gives as YYYY-MM-DD (already in the
  // tenant's zone): "17 Oct".
  function dateLabel(date, opts) { return fmt(date + "T12:00:00Z", "UTC", opts || { day: "numeric", month: "short" }); }
  // creditAmount shows a grant's figure in its unit: money at the
  // currency's places, an included quantity at its meter's.
  function creditAmount(v, grant, currency, places) {
    if (grant.kind === "included") { return qty(v, grant.meter) + " " + (UNITS[grant.meter] || grant.meter); }
    return fixed(v, places) + " " + currency;
  }
  function includedText(list) {
    return list.map(function (m) { return qty(m.remaining, m.meter) + " " + (UNITS[m.meter] || m.meter); }).join(" + ");
  }

  // creditChart draws the burn-down of the month so far: what was left at
  // each day's end (today: now) as a line, money when the tenant has a
  // money grant, else its included quantity, each day's exact figure in
  // its tooltip.
  function creditChart(acc, places) {
    var money = acc.balances.some(function (b) { return b.grant.kind !== "included"; });
    var meter = money ? "" : (acc.included_remaining[0] || {}).meter;
    var unit = money ? acc.currency : (UNITS[meter] || meter);
    var value = function (d) {
      if (money) { return d.money_remaining; }
      var m = d.included_remaining.filter(function (x) { return x.meter === meter; })[0];
      return m ? m.remaining : "0";
    };
    var label = function (v) { return money ? fixed(v, places) : qty(v, meter); };
    el("credit-chart-what").textContent = money ? "(money left at each day's end, today's now)" : "(" + unit + " left at each day's end, today's now)";
    var days = acc.daily, W = chartWidth("credit-chart"), H = 220, left = 52, bottom = 28, top = 26, max = 0;
    days.forEach(function (d) { max = Math.max(max, parseFloat(value(d))); });
    var ticks = niceTicks(max), axisMax = ticks[ticks.length - 1];
    var root = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "credit left by day", "data-credit-unit": unit });
    var y = function (v) { return H - bottom - parseFloat(v) / axisMax * (H - bottom - top); };
    ticks.forEach(function (t) {
      root.appendChild(svg("line", { x1: left, x2: W, y1: y(t), y2: y(t), stroke: "#eceef1" }));
      root.appendChild(svg("text", { x: left - 6, y: y(t) + 4, "text-anchor": "end", "font-size": 12, fill: "#6b7280", "data-tick": tickText(t) }))
        .textContent = tickText(t);
    });
    root.appendChild(svg("text", { x: 4, y: 12, "font-size": 12, fill: "#6b7280" })).textContent = unit;
    var slot = (W - left) / Math.max(days.length, 1), step = labelStep(days.length, W - left);
    var x = function (k) { return left + (k + 0.5) * slot; };
    root.appendChild(svg("polyline", { points: days.map(function (d, k) { return x(k).toFixed(1) + "," + y(value(d)).toFixed(1); }).join(" "),
      fill: "none", stroke: "#1f77b4", "stroke-width": 2.5, "data-credit-line": "1" }));
    days.forEach(function (d, k) {
      var c = svg("circle", { cx: x(k), cy: y(value(d)), r: 3, fill: "#1f77b4", "data-credit-day": d.date, "data-credit-left": value(d) });
      root.appendChild(titled(c, dateLabel(d.date) + ": " + label(value(d)) + " " + unit + " left"));
      if (k % step === 0) {
        root.appendChild(svg("text", { x: x(k), y: H - 8, "text-anchor": "middle", "font-size": 12, fill: "#6b7280" })).textContent = dateLabel(d.date);
      }
    });
    clear("credit-chart").appendChild(root);
  }

  // creditView fills the tenant's credit section from /v1/credits: what
  // is left, when it runs out, the balance of every grant, the burn-down
  // by day and what expires soon. No grant: the section stays hidden; a
  // failure is a note, not a broken portal.
  function creditView(cost) {
    var places = (String(cost.so_far).split(".")[1] || "").length;
    return api("/v1/credits?" + query({ tenant: cost.tenant })).then(function (acc) {
      if (acc.balances.length === 0) { return; }
      el("credit-section").hidden = false; // laid out first: the chart takes its box's width
      var cur = acc.currency, m = el("credit-money");
      m.textContent = fixed(acc.money_remaining, places) + " " + cur;
      m.dataset.amount = acc.money_remaining;
      el("credit-included").textContent = acc.included_remaining.length ? includedText(acc.included_remaining) + " included left" : "";
      var dep = el("credit-depletion"), note = el("credit-depletion-note");
      dep.dataset.depletion = acc.depletion || "";
      if (acc.depletion) {
        dep.textContent = dateLabel(acc.depletion, { day: "numeric", month: "short", year: "numeric" });
        note.textContent = acc.days_left === 0 ? "no money credit left" : "in " + acc.days_left + (acc.days_left === 1 ? " day" : " days") + ", at the forecast spend";
      } else if (acc.forecast_through) {
        dep.textContent = "not this month";
        note.textContent = "the forecast spend leaves credit " + through(acc.forecast_through, acc.time_zone);
      } else {
        dep.textContent = "–";
        note.textContent = "no money credit: included hours only";
      }
      var tbody = rowsOf("credit-balances");
      acc.balances.forEach(function (b) {
        var g = b.grant, tr = document.createElement("tr");
        tr.dataset.creditGrant = g.id;
        tr.dataset.remaining = b.remaining;
        text(tr, "td", g.id + (g.note ? " · " + g.note : "") + (g.voided_at ? " (voided)" : ""));
        text(tr, "td", g.kind + (g.sku_class ? " " + g.sku_class : ""));
        [b.granted, b.used, b.expired, b.voided, b.rolled_over, b.remaining].forEach(function (v) { text(tr, "td", creditAmount(v, g, cur, places), "num"); });
        text(tr, "td", g.expires_at ? fmt(g.expires_at, acc.time_zone, { day: "numeric", month: "short", year: "numeric" }) : "never");
        tbody.appendChild(tr);
      });
      var ebody = rowsOf("credit-expiring");
      if (acc.expiring.length === 0) { var none = document.createElement("tr"); text(none, "td", "nothing expires soon", "muted").colSpan = 4; ebody.appendChild(none); }
      acc.expiring.forEach(function (b) {
        var tr = document.createElement("tr");
        tr.dataset.expiringGrant = b.grant.id;
        text(tr, "td", b.grant.id);
        text(tr, "td", b.grant.kind);
        text(tr, "td", creditAmount(b.remaining, b.grant, cur, places), "num");
        text(tr, "td", fmt(b.grant.expires_at, acc.time_zone, { day: "numeric", month: "short", hour: "2-digit", minute: "2-digit", hourCycle: "h23" }));
        ebody.appendChild(tr);
      });
      creditChart(acc, places);
    }).catch(function (e) {
      var n = el("credit-note");
      n.textContent = "Credit unavailable: " + e.message;
      n.hidden = false;
    });
  }

  // tenantView draws one tenant's month: its own (tenant "") for a tenant's
  // key, or one an operator opened from the fleet view.
  function tenantView(tenant) {
    el("fleet-view").hidden = true;
    el("tenant-view").hidden = false;
    el("back").hidden = !tenant;
    ["meters", "invoices", "anomalies"].forEach(rowsOf);
    ["chart", "legend", "held-chart", "held-legend", "forecast-chart", "forecast-legend", "credit-chart"].forEach(clear);
    ["credit-balances", "credit-expiring"].forEach(rowsOf);
    el("forecast-section").hidden = true;
    el("credit-section").hidden = true;
    el("credit-note").hidden = true;
    el("insights-note").hidden = true;
    el("trend").hidden = true;
    document.body.dataset.view = "tenant";
    return api("/v1/cost?" + query({ month: month, tenant: tenant })).then(function (cost) {
      var tz = cost.time_zone || "UTC";
      el("title").textContent = "GPU usage: " + cost.tenant;
      el("who").textContent = cost.tenant + " · " + cost.month + " · " + cost.currency + " · price book " + cost.book_version + " · times in " + tz;
      var mtd = el("mtd-cost");
      mtd.textContent = cost.so_far + " " + cost.currency;
      mtd.dataset.amount = cost.so_far;
      el("forecast-cost").textContent = cost.forecast + " " + cost.currency;
      el("forecast-cost").dataset.amount = cost.forecast;
      el("mtd-asof").textContent = "usage " + through(cost.as_of, tz);
      // The forecast, its band and the chart are one priced forecast: the
      // figures agree; the method says how the usage still to come is made.
      var methods = { actual: "the month is over: its usage priced as the invoice prices it",
        trend: "usage by trend and weekly season, priced as the invoice prices it",
        run_rate: "usage at its average rate so far (under two weeks of history), priced as the invoice prices it" };
      el("forecast-method").textContent = methods[cost.forecast_method] || "";
      el("forecast-method").dataset.method = cost.forecast_method || "";
      if (cost.trend) {
        var tr = el("trend"), sp = cost.trend.spend;
        // Amounts come at the currency's minor units: so_far shows how many.
        var places = (String(cost.so_far).split(".")[1] || "").length;
        tr.dataset.total = sp.total;
        tr.textContent = "";
        if (cost.forecast_low !== cost.forecast_high) {
          tr.textContent = "likely " + cost.forecast_low + " to " + cost.forecast_high + " " + cost.currency;
          tr.hidden = false;
        }
        // A chart that cannot be drawn is a note, not a broken portal.
        try {
          forecastChart(sp, cost.currency, places, tz);
        } catch (e) {
          tr.textContent += " (chart unavailable: " + e.message + ")";
          tr.hidden = false;
        }
      }
      var tbody = el("meters").tBodies[0];
      cost.meters.forEach(function (m) {
        var row = document.createElement("tr");
        text(row, "td", UNITS[m.meter] || m.meter);
        text(row, "td", m.so_far + " " + cost.currency, "num");
        text(row, "td", m.forecast + " " + cost.currency, "num");
        tbody.appendChild(row);
      });
      var usage = cost.as_of > cost.start
        ? api("/v1/usage?" + query({ from: cost.start, to: cost.as_of, step: "day", group_by: tenant ? "tenant,sku" : "sku", meters: "gpu_hours", tz: tz }))
        : Promise.resolve({ points: [] });
      return Promise.all([usage, api("/v1/invoices?" + query({ page_size: 100, tenant: tenant })), insights(cost, tenant), tz, creditView(cost)]);
    }).then(function (all) {
      var tz = all[3];
      barChart("chart", "legend", all[0].points.filter(function (p) { return !tenant || p.tenant === tenant; }).map(function (p) {
        return { day: p.bucket, series: p.sku, value: parseFloat(p.gpu_hours), exact: qty(p.gpu_hours, "gpu_hours") };
      }), "GPU-hours", tz, function (r) { return { "data-day": r.day.slice(0, 10), "data-sku": r.series, "data-gpu-hours": r.value.toFixed(6) }; });
      var tbody = el("invoices").tBodies[0];
      all[1].invoices.forEach(function (inv) {
        var tr = document.createElement("tr");
        text(tr, "td", inv.number || "(draft)");
        text(tr, "td", inv.period);
        text(tr, "td", inv.status);
        text(tr, "td", inv.total + " " + inv.currency, "num");
        var td = document.createElement("td");
        ["pdf", "csv", "json"].forEach(function (f) {
          var a = document.createElement("a");
          a.href = "/v1/invoices/" + encodeURIComponent(inv.number || inv.id) + "?format=" + f + "&access_token=" + encodeURIComponent(token);
          a.textContent = f.toUpperCase();
          td.appendChild(a);
        });
        tr.appendChild(td);
        tbody.appendChild(tr);
      });
    });
  }

  // fleetView draws the month of every tenant in the key's scope: capacity
  // (admin keys), what tenants held and how much of it ran, spend by
  // tenant and department, who holds GPUs idle, anomalies, and when each
  // GPU model fills up (admin keys).
  function fleetView(scope, tenants) {
    el("tenant-view").hidden = true;
    el("fleet-view").hidden = false;
    el("back").hidden = true;
    document.body.dataset.view = "fleet";
    if (el("fleet-view").dataset.drawn) { return Promise.resolve(); }
    var admin = scope === "admin";
    var now = new Date(), m = month || now.toISOString().slice(0, 7);
    var start = m + "-01T00:00:00Z";
    var next = new Date(Date.UTC(+m.slice(0, 4), +m.slice(5, 7), 1)).toISOString().replace(".000", "");
    var hour = new Date(Math.floor(now.getTime() / 3.6e6) * 3.6e6).toISOString().replace(".000", "");
    var asOf = hour < next ? hour : next;
    el("title").textContent = "GPU fleet";
    el("who").textContent = (admin ? "all tenants" : "department " + scope.replace(/^department:/, "")) + " · " + m + " (UTC) · usage " + through(asOf, "UTC");
    if (!admin) {
      el("fleet-scope-note").textContent = "Capacity, idle capacity and capacity dates are fleet-wide: an admin key shows them.";
      el("fleet-scope-note").hidden = false;
      el("fleet-capacity").textContent = el("fleet-idle").textContent = "admin only";
    }
    var note = function (e) { var n = el("fleet-note"); n.textContent += (n.textContent ? " " : "") + "Partly unavailable: " + e.message + "."; n.hidden = false; };
    if (!(asOf > start)) { el("fleet-view").dataset.drawn = "1"; return Promise.resolve(); }
    var range = { from: start, to: asOf };
    var costs = Promise.all(tenants.map(function (t) {
      return api("/v1/cost?" + query({ month: m, tenant: t.tenant })).catch(function (e) { note(e); return null; });
    }));
    var usage = api("/v1/usage?" + query(Object.assign({ step: "day", group_by: "tenant", meters: "gpu_hours", tz: "UTC" }, range)));
    var eff = api("/v1/insights/efficiency?" + query(range)).catch(function (e) { note(e); return null; });
    var an = api("/v1/insights/anomalies?" + query({ from: start, to: next })).catch(function (e) { note(e); return { anomalies: [] }; });
    var capacity = admin ? api("/v1/insights/capacity").catch(function (e) { note(e); return null; }) : Promise.resolve(null);
    var credit = api("/v1/credits").catch(function (e) { note(e); return null; });
    return Promise.all([costs, usage, eff, an, capacity, credit]).then(function (all) {
      var costList = all[0], points = all[1].points, rep = all[2];
      // Capacity is every GPU-hour of the fleet, idle capacity the ones
      // nobody held (usage's tenant "").
      var total = "0", idle = "0";
      points.forEach(function (p) { total = addDecimal(total, p.gpu_hours); if (p.tenant === "") { idle = addDecimal(idle, p.gpu_hours); } });
      var allocated = addDecimal(total, "-" + idle);
      var put = function (id, v, data) { var n = el(id); n.textContent = v; if (data !== undefined) { n.dataset.value = data; } };
      put("fleet-allocated", qty(allocated, "gpu_hours") + " GPU-hours", fixed(allocated, 9));
      if (admin) {
        put("fleet-capacity", qty(total, "gpu_hours") + " GPU-hours", fixed(total, 9));
        put("fleet-idle", qty(idle, "gpu_hours") + " GPU-hours", fixed(idle, 9));
      }
      if (rep && rep.fleet.measured_gpu_microseconds > 0) {
        put("fleet-util", (100 * rep.fleet.sm_active_microseconds / rep.fleet.measured_gpu_microseconds).toFixed(1) + " %");
        el("fleet-held-idle").textContent = "SM-active share of the GPU time held; " + hoursOfMicros(rep.fleet.idle_gpu_microseconds) + " GPU-hours held but idle";
      } else {
        put("fleet-util", "not measured");
      }
      // Spend, per currency (customers may be billed in several).
      var byCurrency = {}, rows = [], depts = {};
      tenants.forEach(function (t, i) {
        var c = costList[i];
        if (!c) { return; }
        var cur = byCurrency[c.currency] || (byCurrency[c.currency] = { so_far: "0", forecast: "0" });
        cur.so_far = addDecimal(cur.so_far, c.so_far);
        cur.forecast = addDecimal(cur.forecast, c.forecast);
        var d = t.department || "(none)", dc = depts[d + " " + c.currency] || (depts[d + " " + c.currency] = { name: d, currency: c.currency, n: 0, so_far: "0", forecast: "0" });
        dc.n++;
        dc.so_far = addDecimal(dc.so_far, c.so_far);
        dc.forecast = addDecimal(dc.forecast, c.forecast);
        rows.push({ tenant: t.tenant, department: t.department || "", cost: c });
      });
      var places = function (c) { return (String(c.so_far).split(".")[1] || "").length; };
      var curs = Object.keys(byCurrency).sort();
      var spend = curs.map(function (k) { var p = rows.filter(function (r) { return r.cost.currency === k; })[0]; return fixed(byCurrency[k].so_far, places(p.cost)) + " " + k; });
      put("fleet-spend", spend.join(" + ") || "none", curs.length === 1 ? fixed(byCurrency[curs[0]].so_far, places(rows[0].cost)) : "");
      el("fleet-forecast").textContent = curs.length ? "month end forecast " + curs.map(function (k) {
        var p = rows.filter(function (r) { return r.cost.currency === k; })[0];
        return fixed(byCurrency[k].forecast, places(p.cost)) + " " + k;
      }).join(" + ") : "";
      var effBy = {};
      (rep ? rep.tenants : []).forEach(function (t) { effBy[t.tenant] = t; });
      rows.sort(function (a, b) { return parseFloat(b.cost.so_far) - parseFloat(a.cost.so_far) || (a.tenant < b.tenant ? -1 : 1); });
      var tbody = rowsOf("spenders");
      rows.forEach(function (r) {
        var tr = document.createElement("tr"), td = document.createElement("td"), a = document.createElement("a");
        tr.dataset.tenant = r.tenant;
        tr.dataset.soFar = r.cost.so_far;
        a.href = "#";
        a.textContent = r.tenant;
        a.addEventListener("click", function (ev) { ev.preventDefault(); open(r.tenant); });
        td.appendChild(a);
        tr.appendChild(td);
        text(tr, "td", r.department);
        text(tr, "td", r.cost.so_far + " " + r.cost.currency, "num");
        text(tr, "td", r.cost.forecast + " " + r.cost.currency, "num");
        var e = effBy[r.tenant];
        text(tr, "td", e ? hoursOfMicros(e.held_gpu_microseconds) : "–", "num");
        text(tr, "td", e ? hoursOfMicros(e.idle_gpu_microseconds) : "–", "num");
        tbody.appendChild(tr);
      });
      var dbody = el("departments").tBodies[0];
      Object.keys(depts).sort().forEach(function (k) {
        var d = depts[k], p = rows.filter(function (r) { return r.cost.currency === d.currency; })[0], tr = document.createElement("tr");
        tr.dataset.department = d.name;
        tr.dataset.soFar = fixed(d.so_far, places(p.cost));
        text(tr, "td", d.name);
        text(tr, "td", String(d.n), "num");
        text(tr, "td", fixed(d.so_far, places(p.cost)) + " " + d.currency, "num");
        text(tr, "td", fixed(d.forecast, places(p.cost)) + " " + d.currency, "num");
        dbody.appendChild(tr);
      });
      barChart("fleet-chart", "fleet-legend", points.map(function (p) {
        return { day: p.bucket, series: p.tenant || "(idle capacity)", value: parseFloat(p.gpu_hours), exact: qty(p.gpu_hours, "gpu_hours") };
      }), "GPU-hours", "UTC", function (r) { return { "data-fleet-day": r.day.slice(0, 10), "data-tenant": r.series, "data-gpu-hours": r.value.toFixed(6) }; });
      var ibody = el("idle-holders").tBodies[0], idlers = (rep ? rep.tenants : []).filter(function (t) { return t.idle_gpu_microseconds > 0; });
      idlers.sort(function (a, b) { return b.idle_gpu_microseconds - a.idle_gpu_microseconds; });
      if (idlers.length === 0) { var none = document.createElement("tr"); text(none, "td", "none this month", "muted").colSpan = 4; ibody.appendChild(none); }
      idlers.forEach(function (t) {
        var tr = document.createElement("tr");
        tr.dataset.idleTenant = t.tenant;
        tr.dataset.idleGpuMicroseconds = String(t.idle_gpu_microseconds);
        text(tr, "td", t.tenant);
        text(tr, "td", t.department || "");
        text(tr, "td", hoursOfMicros(t.idle_gpu_microseconds) + " GPU-hours", "num");
        var like = rows.filter(function (r) { return t.idle_cost && r.cost.currency === t.idle_cost.currency; })[0];
        text(tr, "td", t.idle_cost ? (like ? fixed(t.idle_cost.amount, places(like.cost)) : t.idle_cost.amount) + " " + t.idle_cost.currency : "–", "num");
        ibody.appendChild(tr);
      });
      anomalyRows("fleet-anomalies", all[3].anomalies, "UTC", true);
      if (all[4]) {
        var cbody = el("capacity").tBodies[0];
        if (all[4].models.length === 0) { var nf = document.createElement("tr"); text(nf, "td", "no history to forecast from yet", "muted").colSpan = 4; cbody.appendChild(nf); }
        all[4].models.forEach(function (f) {
          var tr = document.createElement("tr");
          tr.dataset.model = f.model;
          text(tr, "td", f.model);
          text(tr, "td", f.capacity_gpus, "num");
          text(tr, "td", f.history_peak, "num");
          text(tr, "td", f.exceeds ? fmt(f.at, "UTC", { day: "numeric", month: "short", year: "numeric" }) : "not within the forecast");
          cbody.appendChild(tr);
        });
        el("capacity-section").hidden = false;
      }
      if (all[5]) { depletionRows(all[5].customers, rows, places); }
      el("fleet-view").dataset.drawn = "1";
    });
  }

  // depletionRows lists the customers with credit, soonest to run out
  // first (the API's order), each opening its tenant's view.
  function depletionRows(customers, rows, places) {
    var tbody = rowsOf("depletion");
    if (customers.length === 0) { var none = document.createElement("tr"); text(none, "td", "no customer has credit", "muted").colSpan = 5; tbody.appendChild(none); }
    customers.forEach(function (c) {
      var like = rows.filter(function (r) { return r.tenant === c.tenant; })[0];
      var tr = document.createElement("tr"), td = document.createElement("td"), a = document.createElement("a");
      tr.dataset.creditTenant = c.tenant;
      tr.dataset.daysLeft = c.days_left === null ? "" : String(c.days_left);
      tr.dataset.moneyRemaining = c.money_remaining;
      a.href = "#";
      a.textContent = c.tenant;
      a.addEventListener("click", function (ev) { ev.preventDefault(); open(c.tenant); });
      td.appendChild(a);
      tr.appendChild(td);
      text(tr, "td", fixed(c.money_remaining, like ? places(like.cost) : 2) + " " + c.currency, "num");
      text(tr, "td", c.included_remaining.length ? includedText(c.included_remaining) : "–", "num");
      text(tr, "td", c.depletion ? dateLabel(c.depletion, { day: "numeric", month: "short", year: "numeric" }) : "not this month");
      text(tr, "td", c.days_left === null ? "–" : String(c.days_left), "num");
      tbody.appendChild(tr);
    });
    el("depletion-section").hidden = false;
  }

  var operator = null;
  // ready marks the page drawn, with how far it is wider than the window
  // (0: nothing scrolls sideways), for people's tools and the tests.
  function ready() {
    document.body.dataset.overflow = String(Math.max(0, document.documentElement.scrollWidth - innerWidth));
    document.body.dataset.ready = "1";
  }
  function open(tenant) {
    document.body.dataset.ready = "";
    tenantView(tenant).then(ready).catch(function (e) { fail(e.message); });
  }
  el("back-link").addEventListener("click", function (ev) {
    ev.preventDefault();
    fleetView(operator.scope, operator.tenants).then(ready);
  });

  if (!token) { fail("No token: open the portal with the link you were given (…/portal/#token=…)."); return; }
  api("/v1/tenants").then(function (t) {
    if (/^tenant:/.test(t.scope)) { return tenantView(""); }
    operator = t;
    var drill = params.get("tenant");
    return drill ? tenantView(drill) : fleetView(t.scope, t.tenants);
  }).then(ready).catch(function (e) { fail(e.message); });
})();
