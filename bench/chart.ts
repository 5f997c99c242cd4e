/**
 * The benchmark's chart: an SVG written here, rasterized to PNG.
 *
 * Rasterizing uses `@resvg/resvg-js` because it needs no native build and
 * downloads nothing at install: its prebuilt binary for each platform ships
 * inside an npm package of its own (an optional dependency), so `npm ci`
 * from the registry is all it takes, and Deno loads it as a Node-API addon.
 * Text is drawn with a system sans-serif font (DejaVu Sans on Debian).
 *
 * @module
 */
import { Resvg } from "@resvg/resvg-js";

/** One series of a grouped bar panel. */
export interface Series {
  readonly label: string;
  readonly color: string;
  /** One value per group; `null` leaves a gap. */
  readonly values: readonly (number | null)[];
}

/** A panel of grouped bars. */
export interface Panel {
  readonly title: string;
  readonly unit: string;
  readonly groups: readonly string[];
  readonly series: readonly Series[];
  /** Logarithmic value axis (for figures that differ by orders of magnitude). */
  readonly log?: boolean;
}

const _W = 520;
const _H = 440;
const _PAD = { left: 64, right: 16, top: 48, bottom: 118 };

/**
 * Renders panels side by side under a title to PNG bytes.
 *
 * @example
 * ```ts
 * const png = renderChart("Title", "subtitle", [{
 *   title: "req/s", unit: "req/s", groups: ["c=1"],
 *   series: [{ label: "a", color: "#1f77b4", values: [100] }],
 * }]);
 * await Deno.writeFile("chart.png", png);
 * ```
 */
export function renderChart(
  title: string,
  subtitle: string,
  panels: readonly Panel[],
): Uint8Array {
  const width = _W * panels.length;
  const height = _H + 56;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="DejaVu Sans, Arial, sans-serif">`,
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
    `<text x="16" y="26" font-size="18" font-weight="bold">${
      _esc(title)
    }</text>`,
    `<text x="16" y="46" font-size="12" fill="#555">${_esc(subtitle)}</text>`,
  ];
  panels.forEach((panel, i) => parts.push(_panel(panel, i * _W, 56)));
  parts.push("</svg>");
  const resvg = new Resvg(parts.join("\n"), {
    background: "white",
    font: { loadSystemFonts: true, defaultFontFamily: "DejaVu Sans" },
  });
  return resvg.render().asPng();
}

function _panel(panel: Panel, x0: number, y0: number): string {
  const plotW = _W - _PAD.left - _PAD.right;
  const plotH = _H - _PAD.top - _PAD.bottom;
  const left = x0 + _PAD.left;
  const top = y0 + _PAD.top;
  const values = panel.series.flatMap((s) =>
    s.values.filter((v): v is number => v !== null && v > 0)
  );
  const max = Math.max(1, ...values);
  const out: string[] = [
    `<text x="${x0 + _PAD.left}" y="${
      y0 + 24
    }" font-size="14" font-weight="bold">${_esc(panel.title)}</text>`,
  ];
  let scale: (v: number) => number;
  let ticks: number[];
  if (panel.log) {
    const lo = Math.floor(Math.log10(Math.max(0.1, Math.min(...values, max))));
    const hi = Math.ceil(Math.log10(max));
    const span = Math.max(1, hi - lo);
    scale = (v) => plotH * (Math.log10(Math.max(v, 10 ** lo)) - lo) / span;
    ticks = Array.from({ length: span + 1 }, (_, k) => 10 ** (lo + k));
  } else {
    const step = _niceStep(max / 5);
    const hi = Math.ceil(max / step) * step;
    scale = (v) => plotH * v / hi;
    ticks = Array.from(
      { length: Math.round(hi / step) + 1 },
      (_, k) => k * step,
    );
  }
  for (const t of ticks) {
    const y = top + plotH - scale(t);
    out.push(
      `<line x1="${left}" y1="${y}" x2="${
        left + plotW
      }" y2="${y}" stroke="#e4e4e4"/>`,
      `<text x="${left - 6}" y="${
        y + 4
      }" font-size="11" text-anchor="end" fill="#444">${_fmt(t)}</text>`,
    );
  }
  out.push(
    `<text x="${x0 + 14}" y="${
      top + plotH / 2
    }" font-size="11" fill="#444" transform="rotate(-90 ${x0 + 14} ${
      top + plotH / 2
    })" text-anchor="middle">${_esc(panel.unit)}</text>`,
  );
  const groupW = plotW / panel.groups.length;
  const barW = Math.min(26, (groupW - 12) / panel.series.length);
  panel.groups.forEach((group, g) => {
    const gx = left + g * groupW + (groupW - barW * panel.series.length) / 2;
    panel.series.forEach((s, k) => {
      const v = s.values[g];
      if (v === null || v === undefined || !(v > 0)) return;
      const h = Math.max(1, scale(v));
      const x = gx + k * barW;
      out.push(
        `<rect x="${x}" y="${top + plotH - h}" width="${
          barW - 2
        }" height="${h}" fill="${s.color}"/>`,
        `<text x="${x + barW / 2 - 1}" y="${
          top + plotH - h - 3
        }" font-size="9" text-anchor="middle" fill="#222">${_fmt(v)}</text>`,
      );
    });
    out.push(
      `<text x="${left + g * groupW + groupW / 2}" y="${
        top + plotH + 16
      }" font-size="12" text-anchor="middle">${_esc(group)}</text>`,
    );
  });
  out.push(
    `<line x1="${left}" y1="${top + plotH}" x2="${left + plotW}" y2="${
      top + plotH
    }" stroke="#333"/>`,
  );
  panel.series.forEach((s, k) => {
    const lx = left + (k % 2) * (plotW / 2);
    const ly = top + plotH + 38 + Math.floor(k / 2) * 18;
    out.push(
      `<rect x="${lx}" y="${
        ly - 10
      }" width="12" height="12" fill="${s.color}"/>`,
      `<text x="${lx + 17}" y="${ly}" font-size="11">${_esc(s.label)}</text>`,
    );
  });
  return out.join("\n");
}

function _niceStep(raw: number): number {
  const p = 10 ** Math.floor(Math.log10(Math.max(raw, 1e-9)));
  const f = raw / p;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

function _fmt(v: number): string {
  if (v === 0) return "0";
  if (v >= 10_000) return `${Math.round(v / 1000)}k`;
  if (v >= 1000) return `${(v / 1000).toFixed(1)}k`;
  if (v >= 10) return String(Math.round(v));
  if (v >= 1) return v.toFixed(1);
  return v.toFixed(2);
}

function _esc(text: string): string {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(
    ">",
    "&gt;",
  );
}
