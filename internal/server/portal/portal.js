// The customer portal: signs in with a portal token from the URL
// fragment (#token=gmk_...&month=YYYY-MM; a fragment never reaches a
// server log) and draws the month from the /v1 API. No libraries.
(function () {
  "use strict";
  var params = new URLSearchParams(location.hash.replace(/^#/, ""));
  var token = params.get("token") || "";
  var month = params.get("month") || "";
  // Keep the token out of the address bar and the history once read.
  if (token && history.replaceState) { history.replaceState(null, "", location.pathname + location.search); }
  var palette = ["#2563eb", "#16a34a", "#d97706", "#db2777", "#7c3aed", "#0891b2", "#65a30d", "#dc2626"];

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
  function text(parent, tag, value, cls) {
    var n = document.createElement(tag);
    n.textContent = value;
    if (cls) { n.className = cls; }
    parent.appendChild(n);
    return n;
  }
  function svg(tag, attrs) {
    var n = document.createElementNS("http://www.w3.org/2000/svg", tag);
    Object.keys(attrs).forEach(function (k) { n.setAttribute(k, attrs[k]); });
    return n;
  }

  // chart draws stacked bars of GPU-hours per day, one colour per SKU.
  function chart(points) {
    var days = [], skus = [], byDay = {};
    points.forEach(function (p) {
      var d = p.bucket.slice(0, 10);
      if (!(d in byDay)) { byDay[d] = {}; days.push(d); }
      if (skus.indexOf(p.sku) < 0) { skus.push(p.sku); }
      byDay[d][p.sku] = (byDay[d][p.sku] || 0) + parseFloat(p.gpu_hours);
    });
    skus.sort();
    var W = 1000, H = 260, left = 48, bottom = 24, top = 10;
    var max = 0;
    days.forEach(function (d) {
      var t = 0;
      skus.forEach(function (s) { t += byDay[d][s] || 0; });
      max = Math.max(max, t);
    });
    var root = svg("svg", { viewBox: "0 0 " + W + " " + H, width: "100%", role: "img", "aria-label": "GPU-hours by day" });
    if (days.length === 0) {
      var t = svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", fill: "#6b7280" });
      t.textContent = "No usage in this month yet";
      root.appendChild(t);
    }
    var slot = (W - left) / Math.max(days.length, 1);
    var scale = max > 0 ? (H - bottom - top) / max : 0;
    for (var g = 0; g <= 4; g++) {
      var y = H - bottom - g * (H - bottom - top) / 4;
      root.appendChild(svg("line", { x1: left, x2: W, y1: y, y2: y, stroke: "#eceef1" }));
      var lab = svg("text", { x: left - 6, y: y + 4, "text-anchor": "end", "font-size": 11, fill: "#6b7280" });
      lab.textContent = (max * g / 4).toFixed(max < 4 ? 2 : 0);
      root.appendChild(lab);
    }
    days.forEach(function (d, i) {
      var y = H - bottom;
      skus.forEach(function (s, k) {
        var v = byDay[d][s] || 0;
        if (v <= 0) { return; }
        var h = v * scale;
        y -= h;
        var r = svg("rect", { x: left + i * slot + slot * 0.15, y: y, width: slot * 0.7, height: h, fill: palette[k % palette.length],
          "data-day": d, "data-sku": s, "data-gpu-hours": v.toFixed(6) });
        var tip = svg("title", {});
        tip.textContent = d + " " + s + ": " + v.toFixed(3) + " GPU-h";
        r.appendChild(tip);
        root.appendChild(r);
      });
      if (days.length <= 16 || i % Math.ceil(days.length / 16) === 0) {
        var l = svg("text", { x: left + i * slot + slot / 2, y: H - 6, "text-anchor": "middle", "font-size": 11, fill: "#6b7280" });
        l.textContent = d.slice(5);
        root.appendChild(l);
      }
    });
    el("chart").appendChild(root);
    skus.forEach(function (s, k) {
      var span = document.createElement("span");
      var i = document.createElement("i");
      i.style.background = palette[k % palette.length];
      span.appendChild(i);
      span.appendChild(document.createTextNode(s));
      el("legend").appendChild(span);
    });
  }

  // heldChart draws, per day, the GPU-hours held beside those with the SMs
  // active: the gap is what was held but not used.
  function heldChart(points) {
    var W = 1000, H = 200, left = 48, bottom = 24, top = 10, max = 0;
    points.forEach(function (p) { max = Math.max(max, parseFloat(p.gpu_hours)); });
    var root = svg("svg", { viewBox: "0 0 " + W + " " + H, width: "100%", role: "img", "aria-label": "GPU-hours held and used by day" });
    var slot = (W - left) / Math.max(points.length, 1);
    var scale = max > 0 ? (H - bottom - top) / max : 0;
    var colours = { gpu_hours: "#9ca3af", sm_active_hours: "#2563eb" };
    points.forEach(function (p, i) {
      ["gpu_hours", "sm_active_hours"].forEach(function (m, k) {
        var v = parseFloat(p[m]) || 0, h = v * scale;
        var r = svg("rect", { x: left + i * slot + slot * (0.15 + 0.35 * k), y: H - bottom - h, width: slot * 0.35, height: h,
          fill: colours[m], "data-held-day": p.bucket.slice(0, 10), "data-meter": m, "data-value": v.toFixed(6) });
        var tip = svg("title", {});
        tip.textContent = p.bucket.slice(0, 10) + " " + (k ? "used " : "held ") + v.toFixed(3) + " GPU-h";
        r.appendChild(tip);
        root.appendChild(r);
      });
    });
    el("held-chart").appendChild(root);
    [["held", "#9ca3af"], ["SM-active", "#2563eb"]].forEach(function (x) {
      var span = document.createElement("span"), i = document.createElement("i");
      i.style.background = x[1];
      span.appendChild(i);
      span.appendChild(document.createTextNode(x[0]));
      el("held-legend").appendChild(span);
    });
  }

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

  // forecastChart draws the month's cumulative spend before tax: the actual
  // days as a solid line, the projection dashed, the band shaded, and the
  // month-end total, low and high labelled.
  function forecastChart(fc, currency, places) {
    var path = fc.path || [];
    var W = 1000, H = 240, left = 56, right = 190, bottom = 24, top = 12, max = 0;
    path.forEach(function (p) { max = Math.max(max, parseFloat(p.high)); });
    var root = svg("svg", { viewBox: "0 0 " + W + " " + H, width: "100%", role: "img", "aria-label": "cumulative spend before tax with the month-end forecast",
      "data-forecast-total": fc.total, "data-forecast-low": fc.low, "data-forecast-high": fc.high, "data-forecast-days": path.length });
    var slot = (W - left - right) / Math.max(path.length, 1);
    var scale = max > 0 ? (H - bottom - top) / max : 0;
    var x = function (k) { return left + (k + 1) * slot; }; // a point sits at the end of its day
    var y = function (v) { return H - bottom - parseFloat(v) * scale; };
    for (var g = 0; g <= 4; g++) {
      var gy = H - bottom - g * (H - bottom - top) / 4;
      root.appendChild(svg("line", { x1: left, x2: W - right, y1: gy, y2: gy, stroke: "#eceef1" }));
      var lab = svg("text", { x: left - 6, y: gy + 4, "text-anchor": "end", "font-size": 11, fill: "#6b7280" });
      lab.textContent = (max * g / 4).toFixed(max < 4 ? 2 : 0);
      root.appendChild(lab);
    }
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
      root.appendChild(svg("polygon", { points: join([from].concat(high, low)), fill: "#2563eb", "fill-opacity": 0.15, stroke: "none", "data-forecast-band": "1" }));
      root.appendChild(svg("polyline", { points: join([from].concat(projected)), fill: "none", stroke: "#2563eb", "stroke-width": 2,
        "stroke-dasharray": "6 4", "data-forecast-line": "projected" }));
    }
    if (actual.length > 1) {
      root.appendChild(svg("polyline", { points: join(actual), fill: "none", stroke: "#2563eb", "stroke-width": 2.5, "data-forecast-line": "actual" }));
    }
    path.forEach(function (p, k) {
      var day = p.at.slice(0, 10);
      var c = svg("circle", { cx: x(k), cy: y(p.total), r: 2.5, fill: p.projected ? "#fff" : "#2563eb", stroke: "#2563eb",
        "data-forecast-day": day, "data-projected": p.projected ? "1" : "0", "data-total": p.total, "data-low": p.low, "data-high": p.high });
      var tip = svg("title", {});
      tip.textContent = day + ": " + fixed(p.total, places) + " " + currency + (p.projected ? " (" + fixed(p.low, places) + " to " + fixed(p.high, places) + ")" : "");
      c.appendChild(tip);
      root.appendChild(c);
      if (path.length <= 16 || k % Math.ceil(path.length / 16) === 0) {
        var l = svg("text", { x: x(k), y: H - 6, "text-anchor": "middle", "font-size": 11, fill: "#6b7280" });
        l.textContent = day.slice(5);
        root.appendChild(l);
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
    el("forecast-chart").appendChild(root);
    var legend = [["actual", "#2563eb"]];
    if (projected.length) {
      legend.push(["projected", "repeating-linear-gradient(90deg, #2563eb 0 4px, transparent 4px 6px)"],
        ["band of the usage's noise", "rgba(37, 99, 235, .15)"]);
    }
    legend.forEach(function (it) {
      var span = document.createElement("span"), i = document.createElement("i");
      i.style.background = it[1];
      span.appendChild(i);
      span.appendChild(document.createTextNode(it[0]));
      el("forecast-legend").appendChild(span);
    });
    el("forecast-section").hidden = false;
  }

  // insights fills the efficiency section; a failure there (insights not
  // served, a zone off whole hours) is a note, not a broken portal.
  function insights(cost) {
    var note = function (e) { var n = el("insights-note"); n.textContent = "Insights unavailable: " + e.message; n.hidden = false; };
    if (!(cost.as_of > cost.start)) { return Promise.resolve(); }
    var range = "from=" + encodeURIComponent(cost.start) + "&to=" + encodeURIComponent(cost.as_of);
    var eff = api("/v1/insights/efficiency?" + range).then(function (rep) {
      var t = rep.tenants.length ? rep.tenants[0] : null;
      if (!t || t.measured_gpu_microseconds === 0) { el("eff-util").textContent = "not measured"; } else {
        el("eff-util").textContent = (100 * t.sm_active_microseconds / t.measured_gpu_microseconds).toFixed(1) + " %";
      }
      var idle = t ? t.idle_gpu_microseconds / 3.6e9 : 0;
      var fig = el("eff-idle");
      fig.textContent = idle.toFixed(2) + " GPU-h";
      fig.dataset.idleGpuMicroseconds = t ? String(t.idle_gpu_microseconds) : "0";
      el("eff-idle-cost").textContent = t && t.idle_cost ? "costing " + t.idle_cost.amount + " " + t.idle_cost.currency : "";
    });
    var held = api("/v1/usage?" + range + "&step=day&meters=gpu_hours,sm_active_hours&tz=" + encodeURIComponent(cost.time_zone || "UTC"))
      .then(function (u) { heldChart(u.points); });
    var an = api("/v1/insights/anomalies?from=" + encodeURIComponent(cost.start) + "&to=" + encodeURIComponent(cost.end)).then(function (r) {
      var tbody = el("anomalies").tBodies[0];
      if (r.anomalies.length === 0) { var tr = document.createElement("tr"); text(tr, "td", "none this month", "muted").colSpan = 5; tbody.appendChild(tr); }
      r.anomalies.forEach(function (a) {
        var tr = document.createElement("tr");
        tr.dataset.anomalyId = a.id;
        text(tr, "td", a.start);
        text(tr, "td", a.meter);
        text(tr, "td", a.direction);
        text(tr, "td", a.observed, "num");
        text(tr, "td", a.expected + " ± " + a.spread, "num");
        tbody.appendChild(tr);
      });
    });
    return Promise.all([eff.catch(note), held.catch(note), an.catch(note)]);
  }

  if (!token) { fail("No token: open the portal with the link you were given (…/portal/#token=…)."); return; }
  api("/v1/cost" + (month ? "?month=" + encodeURIComponent(month) : "")).then(function (cost) {
    el("who").textContent = cost.tenant + " · " + cost.month + " · " + cost.currency + " · price book " + cost.book_version;
    var mtd = el("mtd-cost");
    mtd.textContent = cost.so_far + " " + cost.currency;
    mtd.dataset.amount = cost.so_far;
    el("forecast-cost").textContent = cost.forecast + " " + cost.currency;
    el("forecast-cost").dataset.amount = cost.forecast;
    el("mtd-asof").textContent = "usage up to " + cost.as_of;
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
      if (cost.forecast_low !== cost.forecast_high) {
        tr.textContent = "likely " + cost.forecast_low + " to " + cost.forecast_high + " " + cost.currency;
        tr.hidden = false;
      }
      // A chart that cannot be drawn is a note, not a broken portal.
      try {
        forecastChart(sp, cost.currency, places);
      } catch (e) {
        tr.textContent += " (chart unavailable: " + e.message + ")";
        tr.hidden = false;
      }
    }
    var tbody = el("meters").tBodies[0];
    cost.meters.forEach(function (m) {
      var tr = document.createElement("tr");
      text(tr, "td", m.meter);
      text(tr, "td", m.so_far, "num");
      text(tr, "td", m.forecast, "num");
      tbody.appendChild(tr);
    });
    var usage = cost.as_of > cost.start
      ? api("/v1/usage?from=" + encodeURIComponent(cost.start) + "&to=" + encodeURIComponent(cost.as_of) +
        "&step=day&group_by=sku&meters=gpu_hours&tz=" + encodeURIComponent(cost.time_zone || "UTC"))
      : Promise.resolve({ points: [] });
    return Promise.all([usage, api("/v1/invoices?page_size=100"), insights(cost)]);
  }).then(function (both) {
    chart(both[0].points);
    var tbody = el("invoices").tBodies[0];
    both[1].invoices.forEach(function (inv) {
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
    document.body.dataset.ready = "1";
  }).catch(function (e) { fail(e.message); });
})();
