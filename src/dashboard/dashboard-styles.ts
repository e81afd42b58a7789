/**
 * The dashboard's style sheet, as a string: tsc ships it in dist/ with the
 * rest, so nothing is built or looked up at run time. Served as
 * assets/dashboard.css (the CSP allows no inline style).
 */

export const DASHBOARD_CSS = String.raw`
:root { --fg: #1f2937; --muted: #6b7280; --line: #e5e7eb; --bg: #f9fafb; --accent: #2563eb; --bad: #b91c1c; --ok: #15803d; font-family: system-ui, sans-serif; color: var(--fg); background: var(--bg); }
body { margin: 0; }
header { display: flex; align-items: center; gap: 1rem; padding: .6rem 1.2rem; background: #111827; color: #f9fafb; }
header h1 { font-size: 1.1rem; margin: 0; }
header .who { margin-left: auto; color: #d1d5db; font-size: .85rem; }
.live { font-size: .8rem; padding: .1rem .5rem; border-radius: 1rem; background: #374151; }
.live[data-state="live"] { background: var(--ok); }
.live[data-state="down"] { background: var(--bad); }
main { padding: 1rem 1.2rem; max-width: 1400px; }
h2 { font-size: 1rem; margin: 1.4rem 0 .4rem; }
h3 { font-size: .9rem; margin: 1rem 0 .3rem; color: var(--muted); }
.cards { display: flex; flex-wrap: wrap; gap: .8rem; }
.card { background: #fff; border: 1px solid var(--line); border-radius: .4rem; padding: .6rem .9rem; min-width: 9rem; }
.card .value { display: block; font-size: 1.6rem; font-variant-numeric: tabular-nums; }
.card .label { color: var(--muted); font-size: .8rem; }
.card.warn .value { color: var(--bad); }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: .8rem; margin-top: 1rem; }
figure { margin: 0; background: #fff; border: 1px solid var(--line); border-radius: .4rem; padding: .6rem; }
figcaption { font-size: .85rem; color: var(--muted); margin-bottom: .3rem; }
svg { width: 100%; height: auto; display: block; }
svg .grid { stroke: var(--line); }
svg .axis, svg .empty { fill: var(--muted); font-size: 11px; }
.legend { display: flex; flex-wrap: wrap; gap: .8rem; font-size: .8rem; }
.legend svg { display: inline; width: 10px; height: 10px; }
table { border-collapse: collapse; width: 100%; background: #fff; border: 1px solid var(--line); font-size: .85rem; }
th, td { text-align: left; padding: .35rem .5rem; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: #f3f4f6; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.error-text { color: var(--bad); max-width: 32rem; overflow-wrap: anywhere; }
td.empty { color: var(--muted); font-style: italic; }
td.actions { white-space: nowrap; }
code { font-size: .8rem; }
pre { max-width: 32rem; overflow: auto; background: #f3f4f6; padding: .4rem; margin: .2rem 0 0; }
button { font: inherit; font-size: .8rem; padding: .2rem .6rem; border: 1px solid var(--line); border-radius: .3rem; background: #fff; cursor: pointer; }
button.primary { background: var(--accent); color: #fff; border-color: var(--accent); }
button.danger { color: var(--bad); }
button:disabled { opacity: .5; cursor: default; }
.error { background: #fef2f2; color: var(--bad); border: 1px solid #fecaca; padding: .5rem .8rem; border-radius: .3rem; }
.notice { background: #f0fdf4; color: var(--ok); border: 1px solid #bbf7d0; padding: .5rem .8rem; border-radius: .3rem; }
.state-alive { color: var(--ok); }
.state-expired { color: var(--bad); }
.state-left { color: var(--muted); }
body.login main { max-width: 22rem; margin: 4rem auto; }
body.login form { display: grid; gap: .6rem; background: #fff; border: 1px solid var(--line); border-radius: .4rem; padding: 1rem; }
body.login input { font: inherit; padding: .4rem; }
`;
