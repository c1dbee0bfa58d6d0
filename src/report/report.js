// report.js: the chart of dnnmem's HTML report (src/report/html.c embeds
// this file in every page; no network). It draws the stacked series of the
// embedded points (#data) into #chart for the view [a, b) of points: one
// column per point, or per group of points when there are more than pixels,
// each group drawn at its point of the most allocated memory, so a one-step
// spike is at least a pixel wide and the peak is always drawn. Wheel zooms
// around the cursor, dragging pans, a double-click shows the whole run;
// "#view=A-B" in the address opens steps A to B (the tests use it).
(function () {
  'use strict';
  var d = JSON.parse(document.getElementById('data').textContent);
  var svg = document.getElementById('chart'), tip = document.getElementById('tip');
  var NS = 'http://www.w3.org/2000/svg';
  var X0 = 80, Y0 = 20, W = 960, H = 380;
  var P = d.points, NP = P.length, NSER = d.series.length, FIRST = 5; // bytes from index 5
  var S = d.strings; // a point's phase, node and op are indices into S
  var U = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  function fmt(b) {
    var i = 0;
    while (b >= 1024 && i < 5) { b /= 1024; i++; }
    return i ? b.toFixed(2) + ' ' + U[i] : b + ' B';
  }
  function stackTop(p) {
    var s = 0;
    for (var k = 0; k < NSER; k++) s += p[FIRST + k];
    return s;
  }
  function alloc(p) { // allocated: every series but the context and the free reserve
    var s = 0;
    for (var k = 0; k < NSER; k++)
      if (d.series[k].name !== 'cuda context' && d.series[k].name !== 'reserved, free') s += p[FIRST + k];
    return s;
  }
  // the y range: the capacity, the headline total and every point's stack
  var ymax = Math.max(d.capacity, d.total, d.top, 1);
  // round IEC ticks: a step of 1, 2 or 5 times a power of ten of one unit
  function tickStep(max) {
    var m = [1, 2, 5, 10, 20, 50, 100, 200, 500];
    for (var u = 0; u < U.length; u++)
      for (var i = 0; i < m.length; i++) {
        var s = m[i] * Math.pow(1024, u);
        if (max / s <= 8) return [s, u];
      }
    return [Math.pow(1024, 5), 5];
  }
  var ts = tickStep(ymax);
  ymax = Math.ceil(ymax / ts[0]) * ts[0];
  function y(b) { return Y0 + H - H * b / ymax; }
  function el(name, attrs, text) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  var view = [0, NP], cols = [];
  // the columns of a view: [first point, end point, point drawn]
  function columns(a, b) {
    var n = b - a, nc = Math.min(n, W), out = [];
    for (var c = 0; c < nc; c++) {
      var lo = a + Math.floor(c * n / nc), hi = a + Math.floor((c + 1) * n / nc), best = lo;
      for (var k = lo; k < hi; k++) if (alloc(P[k]) > alloc(P[best])) best = k;
      out.push([lo, hi, best]);
    }
    return out;
  }
  function pointOfStep(step) { // the last point at or before a step
    var lo = 0, hi = NP - 1;
    while (lo < hi) { var mid = (lo + hi + 1) >> 1; if (P[mid][0] <= step) lo = mid; else hi = mid - 1; }
    return lo;
  }
  function posOfStep(step) { // where a step starts, in points (fractional between two points)
    var p = pointOfStep(step);
    if (P[p][0] >= step || p + 1 >= NP) return p;
    return p + (step - P[p][0]) / (P[p + 1][0] - P[p][0]);
  }
  function draw() {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    if (!NP) { // a result without a timeline (dnnmem_config.timeline unset)
      svg.appendChild(el('text', {x: X0, y: Y0 + 20, 'font-size': 13}, 'no timeline in this result'));
      document.body.dataset.series = 0;
      return;
    }
    var a = view[0], b = view[1];
    cols = columns(a, b);
    var nc = cols.length, cw = W / nc;
    var lower = new Array(nc).fill(0), drawn = 0;
    for (var s = 0; s < NSER; s++) {
      if (!d.series[s].used) continue;
      var up = [], dd = '';
      for (var c = 0; c < nc; c++) up.push(lower[c] + P[cols[c][2]][FIRST + s]);
      for (c = 0; c < nc; c++)
        dd += (c ? ' L' : 'M') + (X0 + c * cw).toFixed(2) + ',' + y(up[c]).toFixed(2) +
              ' L' + (X0 + (c + 1) * cw).toFixed(2) + ',' + y(up[c]).toFixed(2);
      for (c = nc - 1; c >= 0; c--)
        dd += ' L' + (X0 + (c + 1) * cw).toFixed(2) + ',' + y(lower[c]).toFixed(2) +
              ' L' + (X0 + c * cw).toFixed(2) + ',' + y(lower[c]).toFixed(2);
      svg.appendChild(el('path', {'class': 'series', 'data-series': d.series[s].name,
                                  fill: d.series[s].color, d: dd + ' Z'}));
      lower = up;
      drawn++;
    }
    // axes and round ticks
    svg.appendChild(el('line', {x1: X0, y1: Y0 + H, x2: X0 + W, y2: Y0 + H, stroke: '#333'}));
    svg.appendChild(el('line', {x1: X0, y1: Y0, x2: X0, y2: Y0 + H, stroke: '#333'}));
    for (var t = 0; t <= ymax + 0.5; t += ts[0]) {
      var v = t / Math.pow(1024, ts[1]);
      svg.appendChild(el('line', {x1: X0 - 4, y1: y(t), x2: X0 + W, y2: y(t), stroke: '#ddd',
                                  'class': 'grid'}));
      svg.appendChild(el('text', {x: X0 - 6, y: y(t) + 4, 'font-size': 11, 'text-anchor': 'end',
                                  'class': 'ytick', 'data-bytes': t},
                         Math.round(v) + ' ' + U[ts[1]]));
    }
    // iteration boundaries in the view (solid, labelled "step N"), then the
    // phase boundaries (dashed, lighter; labelled where there is room)
    var labels = [], nb = 0;
    function room(x) {
      if (x > X0 + W - 40) return false;
      for (var j = 0; j < labels.length; j++) if (Math.abs(labels[j] - x) < 56) return false;
      return true;
    }
    for (var pass = 1; pass >= 0; pass--)
      for (var i = 0; i < d.bounds.length; i++) {
        var bp = posOfStep(d.bounds[i][0]), it = d.bounds[i][1];
        if (it !== pass || bp < a || bp >= b) continue;
        var x = X0 + W * (bp - a) / (b - a);
        svg.appendChild(el('line', {'class': 'boundary', 'data-kind': it ? 'iteration' : 'phase',
                                    'data-step': d.bounds[i][0], x1: x, y1: Y0, x2: x, y2: Y0 + H,
                                    stroke: it ? '#444' : '#bbb', 'stroke-width': it ? 1.5 : 0.6,
                                    'stroke-dasharray': it ? '' : '3 3'}));
        nb++;
        if (room(x)) {
          svg.appendChild(el('text', {x: x + 2, y: Y0 + H + 14, 'font-size': 10,
                                      fill: it ? '#000' : '#666', 'class': 'blabel'}, d.bounds[i][2]));
          labels.push(x);
        }
      }
    svg.dataset.boundaries = nb;
    // the capacity
    if (d.capacity) {
      svg.appendChild(el('line', {id: 'capacity', x1: X0, y1: y(d.capacity), x2: X0 + W,
                                  y2: y(d.capacity), stroke: '#c00', 'stroke-dasharray': '6 4'}));
      svg.appendChild(el('text', {x: X0 + 4, y: y(d.capacity) - 4, 'font-size': 11, fill: '#c00'},
                         'capacity ' + fmt(d.capacity)));
    }
    // the peak: the column holding the peak's point, drawn at that point
    for (c = 0; c < nc; c++) {
      if (d.peak < P[cols[c][0]][0] || d.peak > P[cols[c][1] - 1][0]) continue;
      var px = X0 + (c + 0.5) * cw, p = P[cols[c][2]], top = stackTop(p);
      // the marker stops above the stack, so it does not hide a one-pixel spike
      svg.appendChild(el('line', {id: 'peak', 'data-step': p[0], 'data-width': cw.toFixed(3),
                                  'data-top-bytes': top, x1: px, y1: Y0, x2: px,
                                  y2: Math.max(Y0, y(top) - 5), stroke: '#000',
                                  'stroke-dasharray': '2 3'}));
      svg.appendChild(el('rect', {x: X0 + c * cw, y: Y0 + H + 1, width: Math.max(cw, 1), height: 4,
                                  fill: '#000', 'class': 'peakcol'}));
      svg.appendChild(el('circle', {cx: px, cy: y(top), r: 3, fill: '#000'}));
      svg.appendChild(el('text', {x: px + (px > X0 + W - 160 ? -6 : 6), y: Math.max(Y0 + 12, y(top) - 6),
                                  'font-size': 11, 'text-anchor': px > X0 + W - 160 ? 'end' : 'start'},
                         'peak ' + fmt(top) + ', step ' + p[0]));
    }
    // the steps axis
    var first = P[a][0], last = P[b - 1][0];
    svg.appendChild(el('text', {x: X0, y: Y0 + H + 30, 'font-size': 11, 'class': 'xrange'},
                       'steps ' + first + ' to ' + last + ' of ' + d.steps +
                       ' (setup, forward, loss, backward, optimizer; iterations as "step N")'));
    document.getElementById('view').textContent = ' steps ' + first + '-' + last;
    document.body.dataset.series = drawn;
    document.body.dataset.columns = nc;
  }
  function zoom(f, at) { // at: a point index kept in place
    var a = view[0], b = view[1], n = Math.max(2, Math.round((b - a) * f));
    if (n >= NP) { view = [0, NP]; draw(); return; }
    var na = Math.round(at - (at - a) * n / (b - a));
    na = Math.max(0, Math.min(NP - n, na));
    view = [na, na + n];
    draw();
  }
  function pointAt(clientX) {
    var r = svg.getBoundingClientRect(), x = clientX - r.left - X0;
    var c = Math.floor(x / W * cols.length);
    return c >= 0 && c < cols.length ? c : -1;
  }
  svg.addEventListener('wheel', function (e) {
    e.preventDefault();
    var c = pointAt(e.clientX);
    zoom(e.deltaY < 0 ? 0.8 : 1.25, c >= 0 ? cols[c][2] : (view[0] + view[1]) / 2);
  }, {passive: false});
  var drag = null;
  svg.addEventListener('mousedown', function (e) { drag = [e.clientX, view[0], view[1]]; });
  window.addEventListener('mouseup', function () { drag = null; });
  svg.addEventListener('dblclick', function () { view = [0, NP]; draw(); });
  svg.addEventListener('mousemove', function (e) {
    if (drag) {
      var n = drag[2] - drag[1], shift = Math.round((drag[0] - e.clientX) / W * n);
      var na = Math.max(0, Math.min(NP - n, drag[1] + shift));
      if (na !== view[0]) { view = [na, na + n]; draw(); }
      return;
    }
    var c = pointAt(e.clientX);
    if (c < 0) { tip.style.display = 'none'; return; }
    var p = P[cols[c][2]], t = 'step ' + p[0] + ', ' + S[p[1]] + ' (iteration ' + p[2] + ')' +
        (S[p[3]] ? '\n' + S[p[3]] + ' (' + S[p[4]] + ')' : '') + '\n';
    for (var k = NSER - 1; k >= 0; k--)
      if (p[FIRST + k]) t += '\n' + d.series[k].name + ': ' + fmt(p[FIRST + k]);
    tip.textContent = t + '\n\ntotal: ' + fmt(stackTop(p));
    tip.style.display = 'block';
    tip.style.left = (e.pageX + 14) + 'px';
    tip.style.top = (e.pageY + 14) + 'px';
  });
  svg.addEventListener('mouseleave', function () { tip.style.display = 'none'; });
  function mid() { return (view[0] + view[1]) / 2; }
  document.getElementById('zin').onclick = function () { zoom(0.5, mid()); };
  document.getElementById('zout').onclick = function () { zoom(2, mid()); };
  document.getElementById('zreset').onclick = function () { view = [0, NP]; draw(); };
  document.getElementById('zpeak').onclick = function () {
    var pk = pointOfStep(d.peak), n = Math.min(NP, 200);
    var a = Math.max(0, Math.min(NP - n, pk - (n >> 1)));
    view = [a, a + n];
    draw();
  };
  var m = /view=(\d+)-(\d+)/.exec(location.hash);
  if (m) {
    var a = pointOfStep(+m[1]), b = pointOfStep(+m[2]) + 1;
    if (b > a) view = [a, b];
  }
  draw();
  document.body.dataset.ready = '1';
})();
